"""The loss every training of this package minimises: the cross-entropy of
the classifier's softmax, computed from its logits on every Keras backend.

Keras' ``sparse_categorical_crossentropy`` of a softmax output is not the
same function on every backend. TensorFlow's recovers the logits (the
``_keras_logits`` that ``keras.activations.softmax`` leaves on its output)
and computes ``log_softmax`` exactly; JAX's and PyTorch's take the log of the
probabilities clipped to ``[1e-7, 1 - 1e-7]``, so an example whose true class
has a probability below 1e-7 adds a constant ``-log(1e-7) = 16.1`` to the
loss and nothing to the gradient. A deep net early in training has many such
examples: ``resnet_mlp(depth=100)`` trained three epochs on 6,000 MNIST images
(seed 1) reached a train loss of 0.44 on TensorFlow, 4.99 on JAX and 5.32 on
PyTorch before this module existed. Keras 1 (GR's MNIST nets) clipped as
JAX and PyTorch do; this package computes from logits everywhere, as the
numerically exact cross-entropy (docs/training.md).

The zoo's classifiers end in a softmax (the Keras Applications signature), so
training runs inside :func:`logits_head`, which takes the softmax off the
``predictions`` layer while the net trains and puts it back afterwards.
"""

import contextlib

import keras

from keras_gresnet.weights.loading import HEAD, head_layer


def cross_entropy():
    """The loss to compile with inside :func:`logits_head`."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def check_classifier_activation(activation, name="classifier_activation"):
    """Refuse a classifier activation other than softmax (the zoo's) or none
    (logits out): the training loss is the softmax's cross-entropy."""
    if keras.activations.get(activation) not in (keras.activations.softmax,
                                                  keras.activations.linear):
        raise ValueError(
            f"{name}={activation!r}: training minimises the cross-entropy of a softmax "
            f"over the classes, so give 'softmax' (the default) or None (logits out)")


@contextlib.contextmanager
def logits_head(model):
    """Within, ``model``'s ``predictions`` layer outputs its logits (no
    softmax), for :func:`cross_entropy`; afterwards its activation is back and
    the compiled step functions, traced with the logits, are dropped.
    Recompile afterwards with a loss for the probabilities to evaluate the
    model with Keras."""
    head = head_layer(model)
    if head is None:
        raise ValueError(f"model {model.name} has no {HEAD!r} classifier to train")
    activation = head.activation
    check_classifier_activation(activation, f"the {HEAD!r} layer's activation")
    head.activation = keras.activations.linear
    model.train_function = model.test_function = model.predict_function = None
    try:
        yield model
    finally:
        head.activation = activation
        # Keras caches the traced steps: a later fit, evaluate or predict
        # must trace the model with its softmax.
        model.train_function = model.test_function = model.predict_function = None
