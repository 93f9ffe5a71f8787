"""The training loss is the cross-entropy of the softmax computed from the
logits on every backend (keras_gresnet.training.loss): Keras' own loss of a
softmax output clips the probabilities at 1e-7 on JAX and PyTorch, so a
confidently wrong example adds at most -log(1e-7) and no gradient there."""

import math

import keras
import numpy as np
import pytest

from keras_gresnet import finetune, training, zoo
from keras_gresnet.training.loss import cross_entropy, logits_head

# The largest per-example loss Keras' clipped cross-entropy can give.
CLIPPED_MAX = -math.log(1e-7)


def _confident_net(scale):
    """A small MLP whose classifier's logits are ``scale`` times a random
    draw: large scales put the true class far below 1e-7."""
    keras.utils.set_random_seed(0)
    net = zoo.plain_mlp(2, input_shape=(6,), classes=4)
    head = net.get_layer("predictions")
    head.kernel.assign(head.kernel * scale)
    return net


def _exact_cross_entropy(net, x, y):
    """The mean cross-entropy in float64 from the logits (a copy of ``net``
    without the softmax, same weights)."""
    logits_net = zoo.plain_mlp(2, input_shape=(6,), classes=4, classifier_activation=None)
    logits_net.set_weights(net.get_weights())
    logits = np.asarray(logits_net.predict(x, verbose=0), dtype=np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_softmax[np.arange(len(y)), y].mean()


def test_the_loss_is_exact_beyond_the_clipping_of_probabilities():
    net = _confident_net(scale=3000.0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype("float32")
    probabilities = net.predict(x, verbose=0)
    y = probabilities.argmin(axis=1)  # every label the net's least likely class
    assert probabilities[np.arange(64), y].max() < 1e-7  # the case clipping changes
    exact = _exact_cross_entropy(net, x, y)
    assert exact > 2 * CLIPPED_MAX
    net.compile(loss=cross_entropy())
    with logits_head(net):
        loss = net.evaluate(x, y, verbose=0)
    # float32 logits of size ~1e4: a relative error of a few float32 epsilons.
    assert loss == pytest.approx(exact, rel=1e-5)
    # Afterwards the net is the softmax classifier it was, traced afresh.
    np.testing.assert_array_equal(net.predict(x, verbose=0), probabilities)
    assert net.get_layer("predictions").activation is keras.activations.softmax


def test_the_loss_gives_confident_mistakes_a_gradient():
    """Clipping leaves an example below 1e-7 without gradient; the exact loss
    moves the classifier: one SGD step on such examples changes its kernel."""
    net = _confident_net(scale=3000.0)
    x = np.random.default_rng(1).normal(size=(32, 6)).astype("float32")
    y = net.predict(x, verbose=0).argmin(axis=1)
    kernel = np.asarray(net.get_layer("predictions").kernel)
    net.compile(optimizer=keras.optimizers.SGD(1e-3), loss=cross_entropy())
    with logits_head(net):
        net.fit(x, y, batch_size=32, epochs=1, verbose=0)
    change = np.abs(np.asarray(net.get_layer("predictions").kernel) - kernel).max()
    assert change > 1e-4  # the gradient of the logits is O(1) per example here


def test_logits_head_refuses_a_head_it_cannot_train():
    net = zoo.plain_mlp(2, input_shape=(6,), classes=4, classifier_activation="sigmoid")
    with pytest.raises(ValueError, match="softmax"):
        with logits_head(net):
            pass
    assert net.get_layer("predictions").activation is keras.activations.sigmoid
    with pytest.raises(ValueError, match="model_kwargs classifier_activation='sigmoid'"):
        training.resolve_config("plain_mlp", model_kwargs=dict(depth=2,
                                                               classifier_activation="sigmoid"))
    headless = zoo.plain_mlp(2, input_shape=(6,), include_top=False)
    with pytest.raises(ValueError, match="no 'predictions' classifier"):
        with logits_head(headless):
            pass


def test_the_activation_comes_back_when_the_body_raises():
    net = _confident_net(scale=1.0)
    with pytest.raises(RuntimeError):
        with logits_head(net):
            assert net.get_layer("predictions").activation is keras.activations.linear
            raise RuntimeError
    assert net.get_layer("predictions").activation is keras.activations.softmax


@pytest.mark.integration
def test_training_and_evaluation_compute_the_loss_from_the_logits(tmp_path):
    """A learning rate far too large drives the logits to thousands: the
    recorded test loss goes far beyond what clipped probabilities allow, and
    `evaluate` of the run folder gives the same number."""
    run = training.train("plain_mlp", model_kwargs=dict(depth=2), dataset="fashion_mnist",
                         epochs=2, learning_rate=1.0, max_train_examples=1280,
                         max_test_examples=500, out=tmp_path / "run", verbose=0)
    assert run.results["test_loss"] > 2 * CLIPPED_MAX
    again = training.evaluate(tmp_path / "run")
    # the same model and examples, evaluated in another batch order and size
    assert again["test_loss"] == pytest.approx(run.results["test_loss"], rel=1e-4)
    assert again["test_accuracy"] == run.results["test_accuracy"]
    # the returned model is compiled as a softmax classifier again
    x = np.zeros((2, 28, 28, 1), "float32")
    np.testing.assert_allclose(run.model.predict(x, verbose=0).sum(axis=1), 1.0, rtol=1e-5)


def test_finetune_trains_on_the_exact_loss_and_returns_a_softmax_classifier():
    """A learning rate far too large drives the new head's logits to
    thousands: the recorded loss goes beyond what clipped probabilities
    allow; the returned net is a softmax classifier, compiled as one."""
    source = _confident_net(scale=1.0)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(64, 6)).astype("float32")
    y = rng.integers(0, 4, 64)
    net, history = finetune.finetune(source, (x, y), classes=4, head_epochs=3, full_epochs=0,
                                     head_lr=1e3, optimizer="sgd", batch_size=16, verbose=0)
    assert max(history["head"]["loss"]) > 2 * CLIPPED_MAX
    assert net.get_layer("predictions").activation is keras.activations.softmax
    np.testing.assert_allclose(net.predict(x, verbose=0).sum(axis=1), 1.0, rtol=1e-5)
