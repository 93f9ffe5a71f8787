import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Under pytest-xdist, one thread of arithmetic per worker (and per process a
# test starts): N workers on N cores, each with the backends' default of one
# thread per core, would run N x N spinning threads on N cores. Set before
# any backend starts; a variable the caller set is kept.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for _variable in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"):
        os.environ.setdefault(_variable, "1")
    # (XLA takes --flags only: a bare word there ends its parsing, and every
    # flag after it, e.g. a test's --xla_force_host_platform_device_count, is lost)
    if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_cpu_multi_thread_eigen=false").strip()

import keras_gresnet  # noqa: E402,F401  (before TensorFlow: its oneDNN setting, as a user's import)
import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import keras  # noqa: E402
import pytest  # noqa: E402

from helpers import assert_loopback_only, guard_network, train  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts from seed 0 and the float32 policy."""
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")
    # No full garbage collection after every test (free_memory=False): it
    # costs about 0.5 s a test; Python collects as it goes.
    keras.backend.clear_session(free_memory=False)


@pytest.fixture
def network_guard(monkeypatch):
    """Record every host contacted (the fixture's value); anything but the
    loopback is refused and fails the test."""
    hosts = guard_network(monkeypatch)
    yield hosts
    assert_loopback_only(hosts)


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A temporary registry file (``registry.path``, holding no entry;
    ``registry.write(entries)``) standing for the whole registry (the
    models' records name no untrained weights meanwhile), a shipped-weights
    folder that does not exist yet (``registry.shipped``), a temporary
    $KERAS_HOME (its cache of models: ``registry.cache``) and no weights
    URL from the environment."""
    from keras_gresnet import _catalog, weights

    path = tmp_path / "zoo" / "weights.json"
    path.parent.mkdir()
    shipped = path.parent / "weights"
    monkeypatch.setattr(weights.registry, "REGISTRY_FILE", path)
    monkeypatch.setattr(_catalog, "UNTRAINED", ())
    monkeypatch.setattr(weights.download, "SHIPPED_DIR", shipped)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.delenv(weights.URL_ENV, raising=False)

    def write(entries):
        path.write_text(json.dumps(entries))

    write([])
    return SimpleNamespace(path=path, write=write, shipped=shipped,
                           cache=tmp_path / "keras_home" / "models", tmp=tmp_path)


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """A finished tiny run folder (helpers.train; not to be modified by the
    tests)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert train(out) == 0
    return out


@pytest.fixture
def python_sigint():
    """SIGINT under Python's own handler (what a program run from a terminal
    has), restored afterwards."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
