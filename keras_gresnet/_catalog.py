"""The zoo's builder names and one-line descriptions, readable without
importing Keras or TensorFlow (``keras-gresnet list`` prints it at once).

It mirrors the registry of :mod:`keras_gresnet.zoo` (each builder's
docstring, first line); ``tests/test_cli.py`` checks that the two agree.
"""

MODELS = {
    'gated_plain_mlp': "GR's gated plain net (GR Table 1): 784 -> 50 -> ``depth`` layers -> 10.",
    'gresnet101': "ImageNet ResNet-101, full pre-activation with GR's gate on every unit (HE).",
    'gresnet152': "ImageNet ResNet-152, full pre-activation with GR's gate on every unit (HE).",
    'gresnet200': "ImageNet ResNet-200, full pre-activation with GR's gate on every unit (HE).",
    'gresnet50': "ImageNet ResNet-50, full pre-activation with GR's gate on every unit (HE).",
    'gresnet_cifar': "GR's CIFAR GResNet (GR Table 3: n=5, 32 layers, 15 gates): a full",
    'gresnet_mlp': "GR's MNIST GResNet (GR Table 1): 784 -> 50 -> ``depth`` layers -> 10.",
    'plain_mlp': "GR's plain net (GR Table 1): 784 -> 50 -> ``depth`` layers -> 10.",
    'preact_resnet1001': 'ResNet-1001, bottleneck, full pre-activation (HE: 10.2M, 4.92%).',
    'preact_resnet101': 'ImageNet ResNet-101, full pre-activation (HE).',
    'preact_resnet110': 'ResNet-110, full pre-activation (HE: 1.7M, 6.37%).',
    'preact_resnet152': 'ImageNet ResNet-152, full pre-activation (HE).',
    'preact_resnet164': 'ResNet-164, bottleneck, full pre-activation (HE: 1.7M, 5.46%).',
    'preact_resnet200': 'ImageNet ResNet-200, full pre-activation (HE).',
    'preact_resnet50': 'ImageNet ResNet-50, full pre-activation (HE).',
    'resnet1001': 'ResNet-1001, bottleneck, original unit (HE: 7.61%).',
    'resnet101': 'ImageNet ResNet-101, original unit (HE).',
    'resnet110': 'ResNet-110, original unit (HE: 6.61%).',
    'resnet152': 'ImageNet ResNet-152, original unit (HE).',
    'resnet164': 'ResNet-164, bottleneck, original unit (HE: 5.93%).',
    'resnet200': 'ImageNet ResNet-200, original unit (HE).',
    'resnet50': 'ImageNet ResNet-50, original unit (HE).',
    'resnet_cifar': "CIFAR residual net of HE (and GR's CIFAR ResNets): 3 stages of ``n``",
    'resnet_imagenet': 'ImageNet bottleneck ResNet of HE: 7x7/2 stem + 3x3/2 max-pool, four',
    'resnet_mlp': "GR's MNIST ResNet (GR Table 1): 784 -> 50 -> ``depth`` layers -> 10.",
    'wide_gresnet': 'Wide GResNet (GR Table 3/4: (4,10) + dropout, 3.65% CIFAR-10, 12 gates).',
    'wide_resnet': 'Wide ResNet WRN-d-k (WRN; GR Table 3/4): depth ``6n+4``, widths',
}
