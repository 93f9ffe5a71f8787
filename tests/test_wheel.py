"""The installed wheel is the product: built from this checkout, installed
outside it, run from elsewhere with an empty Keras home, it lists every
published entry, downloads a weight file from a mirror laid out as
``zoo/weights/`` (served on 127.0.0.1), verifies it, reproduces the recorded
test error on the real Fashion-MNIST test set, and uses its cache after."""

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from keras_gresnet import data

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


class _Mirror(http.server.SimpleHTTPRequestHandler):
    requests = None  # a list per server, set in mirror()

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror():
    """``zoo/weights/`` served as it is on 127.0.0.1; yields (url, requests)."""
    requests = []
    handler = functools.partial(type("Handler", (_Mirror,), {"requests": requests}),
                                directory=str(REPO / "zoo" / "weights"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel of this checkout, installed into a fresh target folder."""
    root = tmp_path_factory.mktemp("wheel")
    dist, site = root / "dist", root / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-q", "-w", str(dist), str(REPO)],
                   check=True, timeout=300)
    (wheel,) = dist.glob("keras_gresnet-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "-q", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    return site, wheel


def run(site, cwd, code_or_args, env_extra):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), TF_CPP_MIN_LOG_LEVEL="3", **env_extra)
    args = code_or_args if isinstance(code_or_args, list) else ["-c", code_or_args]
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


LOAD = """
import json, numpy as np, keras, keras_gresnet
from keras_gresnet import data, weights, zoo
assert keras_gresnet.__file__.startswith({site!r}), keras_gresnet.__file__
model = zoo.gresnet_mlp(depth={depth}, weights="{dataset}")
entry = weights.get_weights("gresnet_mlp{depth}_{dataset}")
images, labels = data.load("{dataset}", "test", data_dir={data_dir!r})
pre = data.Preprocessing.from_config(entry["preprocessing"])
test = data.make_dataset(images, labels, batch_size=2000, preprocessing=pre)
predicted = np.concatenate([np.argmax(keras.ops.convert_to_numpy(model(x)), -1) for x, _ in test])
print(json.dumps(dict(error=100 * float(np.mean(predicted != labels)),
                      recorded=entry["test_error_percent"],
                      cached=sorted(p.name for p in weights.cache_folder().iterdir()))))
"""


def test_wheel_carries_the_registry_and_downloads_verified_weights(installed, mirror,
                                                                    tmp_path):
    site, wheel = installed
    url, requests = mirror
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = dict(KERAS_HOME=str(tmp_path / "keras_home"), KERAS_GRESNET_WEIGHTS_URL=url)
    assert not (site / "zoo").exists()  # the release assets stay out of the wheel
    assert (site / "keras_gresnet" / "published_weights.json").is_file()

    listing = run(site, outside, [str(site / "bin" / "keras-gresnet"), "weights", "list"], env)
    registry = json.loads((REPO / "keras_gresnet" / "published_weights.json").read_text())
    assert len(registry) >= 15
    for entry in registry:
        assert entry["name"] in listing
    assert requests == []  # listing reads the packaged registry only

    first = json.loads(run(site, outside, LOAD.format(site=str(site), depth=20,
                                                      dataset="fashion_mnist", data_dir=None),
                           env).splitlines()[-1])
    assert requests == ["/gresnet_mlp20_fashion_mnist.keras"]
    assert first["cached"] == ["gresnet_mlp20_fashion_mnist.keras"]
    # The recorded test error, to one test image in 10,000.
    assert first["error"] == pytest.approx(first["recorded"], abs=0.011)

    second = json.loads(run(site, outside, LOAD.format(site=str(site), depth=20,
                                                       dataset="fashion_mnist", data_dir=None),
                            env).splitlines()[-1])
    assert requests == ["/gresnet_mlp20_fashion_mnist.keras"]  # no second request
    assert second["error"] == first["error"]

    # The cached file, by keras_gresnet.load_model in a process that imported
    # nothing else of the package: it registers the layers itself.
    code = ("import sys, keras_gresnet\n"
            f"assert keras_gresnet.__file__.startswith({str(site)!r})\n"
            "path = keras_gresnet.weights.cache_folder() / 'gresnet_mlp20_fashion_mnist.keras'\n"
            "assert 'keras_gresnet.layers' not in sys.modules\n"
            "model = keras_gresnet.load_model(path, compile=False)\n"
            "print(sum(layer.name.endswith('_gate') for layer in model.layers))\n")
    assert run(site, outside, code, env).splitlines()[-1] == "10"


def test_wheel_loads_gr_deepest_gresnet_on_mnist(installed, mirror, tmp_path):
    """``zoo.gresnet_mlp(depth=100, weights="mnist")`` from the installed
    wheel: one verified download, and GR's data gives the recorded error."""
    site, _ = installed
    url, requests = mirror
    env = dict(KERAS_HOME=str(tmp_path / "keras_home"), KERAS_GRESNET_WEIGHTS_URL=url)
    # An empty $KERAS_HOME for the weights; the real MNIST where `make data` put it.
    mnist = str(data.datasets_folder() / "mnist")
    out = json.loads(run(site, tmp_path, LOAD.format(site=str(site), depth=100, dataset="mnist",
                                                     data_dir=mnist), env).splitlines()[-1])
    assert requests == ["/gresnet_mlp100_mnist.keras"]
    # one test image in 10,000 (0.01 points), as above, plus float slack
    assert out["error"] == pytest.approx(out["recorded"], abs=0.011)


def test_installed_wheel_has_no_checkout_weights(installed, tmp_path):
    """From a wheel there is no zoo/weights/ to read: SHIPPED_DIR is None,
    and a published name without cache or server fails with a message that
    says how to install the file by hand."""
    site, _ = installed
    code = ("from keras_gresnet import weights\n"
            "print(weights.download.SHIPPED_DIR)\n"
            "try:\n"
            "    weights.weights_path('gresnet_mlp2_fashion_mnist')\n"
            "except ValueError as e:\n"
            "    print('ERROR', e)\n")
    out = run(site, tmp_path, code, dict(KERAS_HOME=str(tmp_path / "home"),
                                         KERAS_GRESNET_WEIGHTS_URL="http://127.0.0.1:9/",
                                         KERAS_GRESNET_DOWNLOAD_TIMEOUT="5"))
    lines = out.splitlines()
    assert lines[0] == "None"
    assert lines[1].startswith("ERROR") and "127.0.0.1:9" in lines[1]
    assert "put gresnet_mlp2_fashion_mnist.keras" in lines[1]
