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
