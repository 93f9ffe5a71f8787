"""The zoo's builder names and one-line descriptions, readable without
importing Keras or TensorFlow (``keras-gresnet list`` prints it at once).

It mirrors the registry of :mod:`keras_gresnet.zoo` (each builder's
docstring, first line) and the recipes of
:mod:`keras_gresnet.training.recipes` (their names, for ``train --help``);
``tests/test_trust.py`` checks that they agree.
"""

MODELS = {
    'gated_plain_mlp': "GR's gated plain MNIST net: a gate on every layer.",
    'gresnet101': "ImageNet GResNet-101: full pre-activation, GR's gate on every unit.",
    'gresnet152': "ImageNet GResNet-152: full pre-activation, GR's gate on every unit.",
    'gresnet200': "ImageNet GResNet-200: full pre-activation, GR's gate on every unit.",
    'gresnet50': "ImageNet GResNet-50: full pre-activation, GR's gate on every unit.",
    'gresnet_cifar': "GR's CIFAR GResNet (GR Table 3: n=5, 32 layers, 15 gates).",
    'gresnet_mlp': "GR's MNIST GResNet (GR Tables 1-2): one scalar gate per block.",
    'plain_mlp': "GR's plain MNIST net (GR Table 1).",
    'preact_resnet1001': 'ResNet-1001, bottleneck, full pre-activation (HE Table 3).',
    'preact_resnet101': 'ImageNet ResNet-101, full pre-activation (HE).',
    'preact_resnet110': 'ResNet-110, full pre-activation (HE Table 2).',
    'preact_resnet152': 'ImageNet ResNet-152, full pre-activation (HE).',
    'preact_resnet164': 'ResNet-164, bottleneck, full pre-activation (HE Tables 2-3).',
    'preact_resnet200': 'ImageNet ResNet-200, full pre-activation (HE).',
    'preact_resnet50': 'ImageNet ResNet-50, full pre-activation (HE).',
    'resnet1001': 'ResNet-1001, bottleneck, original unit (HE Table 3).',
    'resnet101': 'ImageNet ResNet-101, original unit (HE).',
    'resnet110': 'ResNet-110, original (post-activation) unit (HE Tables 1-2).',
    'resnet152': 'ImageNet ResNet-152, original unit (HE).',
    'resnet164': 'ResNet-164, bottleneck, original unit (HE Table 3).',
    'resnet200': 'ImageNet ResNet-200, original unit (HE).',
    'resnet50': 'ImageNet ResNet-50, original unit (HE).',
    'resnet_cifar': 'CIFAR residual net of HE and GR, every HE CIFAR variant an argument.',
    'resnet_imagenet': 'ImageNet bottleneck ResNet of HE, every depth and unit an argument.',
    'resnet_mlp': "GR's MNIST ResNet (GR Table 1).",
    'wide_gresnet': 'Wide GResNet (GR Tables 3-4): WRN-28-10 with a gate on every unit.',
    'wide_resnet': 'Wide ResNet WRN-d-k (WRN; GR Tables 3-4).',
}

RECIPES = ('gr_mnist', 'preact_cifar', 'wrn_cifar', 'preact_mnist', 'he_cifar', 'preact_cifar_he',
           'he_imagenet')
