"""GPU check: training images/s of ``gresnet_cifar(n=5)`` on JAX (float32 and
mixed bfloat16) fed by the TensorFlow-free numpy pipeline
(:func:`keras_gresnet.data.numpydata.make_dataset`, augmented, over synthetic
CIFAR-shaped uint8 arrays: there is no CIFAR on the GPU machine), against
the PyTorch twin (``scripts/torch_reference.py``) on the same GPU; the
projected time of one CIFAR epoch (50,000 images) and of GR's 164-epoch
recipe for each; and ``preact_resnet1001`` images/s. Run it through
``scripts/gpu_check.sh`` (installs Keras from ``.whl/``).

    KERAS_BACKEND=jax python scripts/gpu_check.py [--part cifar|r1001] [--tiny]

Every figure is end to end: ``model.fit`` over ``steps`` batches after a
warm-up call that compiles, wall time including the input pipeline (whose
own rate, with no model, is printed too). PyTorch runs eager, channels_last,
``cudnn.benchmark``, fed either from batches already on the GPU or from the
same numpy pipeline.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_gresnet import zoo  # noqa: E402

EPOCH_IMAGES = 50_000
RECIPE_EPOCHS = 164  # GR's CIFAR recipe (HE's schedule)
RESULTS = []
PART = ["cifar"]


def report(name, ips, **extra):
    epoch = EPOCH_IMAGES / ips
    row = dict(name=name, images_per_s=round(ips, 1), epoch_s=round(epoch, 1),
               recipe_h=round(epoch * RECIPE_EPOCHS / 3600, 2), **extra)
    RESULTS.append(row)
    print(f"{name:>44s}: {ips:10,.0f} img/s | epoch {epoch:8.1f} s | "
          f"{RECIPE_EPOCHS} epochs {row['recipe_h']:7.2f} h  {extra or ''}", flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"gpu_check-{PART[0]}.json"), "w") as f:
            json.dump(RESULTS, f, indent=1)


def compile_options():
    """The training path's compile options; keras_gresnet.training imports
    TensorFlow (its __init__), so without TF use what it returns on JAX."""
    try:
        from keras_gresnet.training.loop import compile_options as options

        return options()
    except ImportError as e:  # once a process
        if PART[1:]:
            return {"jit_compile": "auto"}
        PART.append("warned")
        print(f"  (keras_gresnet.training not importable without TensorFlow: {e}; "
              f"compiling with jit_compile='auto', JAX's XLA)", flush=True)
        return {"jit_compile": "auto"}


def dataset(images, labels, batch):
    """The TF-free pipeline, augmented (GR's crop and flip), pixels / 255."""
    try:
        from keras_gresnet.data.numpydata import make_dataset
    except ImportError:
        print("  (keras_gresnet.data.numpydata missing: a plain numpy PyDataset)", flush=True)

        class Batches(keras.utils.PyDataset):
            def __len__(self):
                return len(images) // batch

            def __getitem__(self, i):
                s = slice(i * batch, (i + 1) * batch)
                return images[s].astype("float32") / 255.0, labels[s]

        return Batches()
    return make_dataset(images, labels, batch_size=batch, preprocessing=None, shuffle=True,
                        augment=True, drop_remainder=True, seed=0)


def synthetic(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8),
            rng.integers(0, 10, size=n).astype(np.int32))


def pipeline_rate(batch, steps):
    images, labels = synthetic(batch * steps)
    ds = dataset(images, labels, batch)
    ds[0]
    t0 = time.perf_counter()
    for i in range(len(ds)):
        ds[i]
    report("numpy pipeline alone (no model)", batch * len(ds) / (time.perf_counter() - t0))


def keras_fit(label, build, precision, batch, steps, warm=3):
    keras.config.set_dtype_policy(precision)
    try:
        model = build()
    finally:
        keras.config.set_dtype_policy("float32")
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  **compile_options())
    images, labels = synthetic(batch * max(steps, warm))
    t0 = time.perf_counter()
    model.fit(dataset(images[:batch * warm], labels[:batch * warm], batch), epochs=1, verbose=0)
    compile_s = time.perf_counter() - t0
    ds = dataset(images, labels, batch)
    t0 = time.perf_counter()
    history = model.fit(ds, epochs=1, verbose=0)
    seconds = time.perf_counter() - t0
    loss = history.history["loss"][-1]
    report(f"{label} keras-jax {precision}", batch * len(ds) / seconds, batch=batch,
           steps=len(ds), compile_s=round(compile_s, 1), loss=round(float(loss), 3),
           params=model.count_params())
    keras.backend.clear_session()


def torch_fit(label, net, precision, batch, steps, pipeline, warm=5):
    import torch
    import torch.nn.functional as F

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    net = net.to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    mixed = precision != "float32"
    images, labels = synthetic(batch * steps)
    ds = dataset(images, labels, batch)

    def batches():
        if pipeline:
            for i in range(len(ds)):
                x, y = ds[i]
                x = torch.from_numpy(x)
                if device == "cuda":
                    x = x.pin_memory()
                yield (x.to(device, non_blocking=True).permute(0, 3, 1, 2),
                       torch.from_numpy(y).long().to(device))
        else:
            x, y = ds[0]
            x = torch.from_numpy(x).to(device).permute(0, 3, 1, 2).contiguous(
                memory_format=torch.channels_last)
            y = torch.from_numpy(y).long().to(device)
            for _ in range(len(ds)):
                yield x, y

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=mixed):
            out = net(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        return loss.detach()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    net.train()
    for i, (x, y) in enumerate(batches()):
        if i == warm:
            break
        step(x, y)
    sync()
    t0 = time.perf_counter()
    n = 0
    for x, y in batches():
        loss = step(x, y)
        n += len(y)
    sync()
    seconds = time.perf_counter() - t0
    feed = "numpy pipeline" if pipeline else "data on device"
    report(f"{label} pytorch {precision} ({feed})", n / seconds, batch=batch, steps=len(ds),
           loss=round(float(loss), 3), device=device)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("cifar", "r1001"), default="cifar")
    parser.add_argument("--tiny", action="store_true", help="tiny models, a CPU smoke test")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    PART[0] = args.part
    import jax

    batch = args.batch or (8 if args.tiny else 128)
    steps = args.steps or (3 if args.tiny else 200)
    print(f"keras {keras.__version__} on {keras.backend.backend()}, jax {jax.__version__} "
          f"{jax.devices()}, batch {batch}, {steps} steps{' (tiny)' if args.tiny else ''}",
          flush=True)
    shape = dict(weights=None, input_shape=(32, 32, 3), classes=10)
    if args.part == "cifar":
        import torch_reference as ref

        n = 1 if args.tiny else 5
        pipeline_rate(batch, steps)
        for precision in ("float32", "mixed_bfloat16"):
            keras_fit(f"gresnet_cifar(n={n})", lambda: zoo.gresnet_cifar(n=n, **shape),
                      precision, batch, steps)
        for precision in ("float32", "mixed_bfloat16"):
            for pipeline in (False, True):
                torch_fit(f"gresnet_cifar(n={n})", ref.PreactCifarNet(n, gated=True), precision,
                          batch, steps, pipeline)
    else:
        if args.tiny:  # 1 bottleneck unit a stage: depth 11
            build = lambda: zoo.resnet_cifar(depth=11, block="bottleneck", **shape)  # noqa: E731
            label = "preact bottleneck resnet(depth=11)"
        else:
            build = lambda: zoo.preact_resnet1001(**shape)  # noqa: E731
            label = "preact_resnet1001"
        keras_fit(label, build, "float32", batch, args.steps or (3 if args.tiny else 30))


if __name__ == "__main__":
    main()
