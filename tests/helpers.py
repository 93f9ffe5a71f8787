"""Shared test helpers (importable: pytest puts tests/ on sys.path)."""

import socket

import keras
import numpy as np

RNG = np.random.default_rng(0)


def randomize_bn(model, scale=0.1):
    """Non-trivial BN statistics so that an identity cannot pass by accident."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            for w in (layer.moving_mean, layer.beta):
                w.assign(RNG.normal(size=w.shape, scale=scale).astype("float32"))


def random_inputs(model, batch=3):
    """A random float32 batch of the model's input shape."""
    return RNG.normal(size=(batch, *model.input.shape[1:])).astype("float32")


LOOPBACK = {"127.0.0.1", "localhost"}


def guard_network(monkeypatch):
    """Record every host contacted and refuse anything but the loopback;
    returns the list of hosts (a fixture's body: ``yield`` it, then
    :func:`assert_loopback_only`)."""
    hosts = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock, address):
        if isinstance(address, tuple):
            hosts.append(address[0])
            if address[0] not in LOOPBACK:
                raise OSError(f"test: network access to {address[0]} refused")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        hosts.append(host)
        if host not in LOOPBACK:
            raise OSError(f"test: name lookup of {host} refused")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return hosts


def assert_loopback_only(hosts):
    assert set(hosts) <= LOOPBACK, f"contacted {set(hosts) - LOOPBACK}"


def sgd_step_changes(model, x, y, loss="sparse_categorical_crossentropy", lr=1.0):
    """One plain SGD step of ``model`` on ``(x, y)`` through Keras' own
    ``train_on_batch`` (any backend, no tf.GradientTape): ``{variable path:
    new - old}`` of every trainable variable, so ``-change / lr`` is the
    gradient of the loss plus ``model.losses`` (the regularisers)."""
    before = {v.path: np.array(v.numpy()) for v in model.trainable_variables}
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr), loss=loss)
    model.train_on_batch(x, y)
    return {v.path: np.array(v.numpy()) - before[v.path] for v in model.trainable_variables}


def zero_loss(y_true, y_pred):
    """A loss of 0 that keeps the graph connected: the step follows
    ``model.losses`` (the regularisers) alone."""
    return keras.ops.mean(y_pred) * 0.0


def seed_everything(seed):
    """Seed Python, numpy and the backend; where TensorFlow runs (its backend
    or its tf.data), make its ops deterministic too."""
    import sys

    keras.utils.set_random_seed(seed)
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        tf.config.experimental.enable_op_determinism()
