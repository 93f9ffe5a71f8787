"""GPU check: training images/s of ``gresnet_cifar(n=5)`` on JAX (float32 and
mixed bfloat16) fed by the TensorFlow-free numpy pipeline
(:func:`keras_gresnet.data.numpydata.make_dataset`, augmented, over synthetic
CIFAR-shaped uint8 arrays: there is no CIFAR on the GPU machine), against
the PyTorch twin (``scripts/benchmarks/torch_reference.py``) on the same GPU (``--part
cifar``); inference, ``model.predict`` (as trained, and with its BatchNorms
folded, ``zoo.inference_model``) against PyTorch eager (``--part infer``);
the training rate of the nets to train next on Fashion-MNIST (``--part
recipes``) and of ``preact_resnet1001`` (``--part r1001``); the input
pipelines at batch 128 and 1024 (``--part pipelines``: Keras-JAX fed by the
host's numpy pipeline and by the device pipeline,
:mod:`keras_gresnet.data.devicedata`, one compiled step a call and 16 as one
program (:mod:`keras_gresnet.training.executions`), against PyTorch with its data on the
GPU, float32 and bf16; the GResNet-32 epoch's projected seconds). Every
part first measures the device's matmul peaks (bf16, TF32, float32) and
every row gives its TFLOP/s from ``zoo.multiply_adds`` and its fraction of
each peak, and the projected epoch and recipe. Run it through
``scripts/benchmarks/gpu_check.sh`` (installs Keras from ``.whl/``); results:
docs/benchmarks.md, "GPU check".

    KERAS_BACKEND=jax python scripts/benchmarks/gpu_check.py \
        [--part cifar|infer|recipes|r1001|pipelines] [--tiny]

Every training figure is end to end: ``model.fit`` over ``steps`` batches
after a warm-up call that compiles, wall time including the input pipeline
(whose own rate, with no model, is printed too). PyTorch runs eager,
channels_last, ``cudnn.benchmark``, fed either from batches already on the
GPU or from the same numpy pipeline.
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
PEAKS = {}  # "bf16"/"fp32"/"tf32" -> TFLOP/s of a large matmul, this process


def report(name, ips, flops=None, epoch_images=EPOCH_IMAGES, epochs=RECIPE_EPOCHS, **extra):
    """One row: images/s, the projected epoch and recipe, and where ``flops``
    (per image, forward and backward for training) is given the achieved
    TFLOP/s and its fraction of the peaks measured in the same process."""
    epoch = epoch_images / ips
    row = dict(name=name, images_per_s=round(ips, 1), epoch_s=round(epoch, 1),
               recipe_h=round(epoch * epochs / 3600, 2), recipe_epochs=epochs, **extra)
    if flops:
        row["tflops"] = round(ips * flops / 1e12, 2)
        row.update({f"of_{k}": round(ips * flops / 1e12 / v, 4) for k, v in PEAKS.items()
                    if v > 0})  # a peak that rounds to 0 (bf16 on an AVX2 CPU)
    RESULTS.append(row)
    shown = {k: v for k, v in row.items() if k not in ("name", "images_per_s", "epoch_s", "recipe_h")}
    print(f"{name:>52s}: {ips:10,.0f} img/s | epoch {epoch:8.1f} s | "
          f"{epochs} epochs {row['recipe_h']:7.2f} h  {shown}", flush=True)
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


def dataset(images, labels, batch, feed="numpy"):
    """The TF-free pipeline, augmented (GR's crop and flip), pixels / 255:
    the host's numpy pipeline, or (``feed="device"``) its batches made on
    the device from the pixels put there once."""
    if feed in ("device", "fused"):
        from keras_gresnet.data.devicedata import make_dataset

        return make_dataset(images, labels, batch_size=batch, preprocessing=None,
                            shuffle=True, augment=True, drop_remainder=True, seed=0)
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


def synthetic(n, seed=0, shape=(32, 32, 3)):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, size=(n, *shape), dtype=np.uint8),
            rng.integers(0, 10, size=n).astype(np.int32))


def pipeline_rate(batch, steps):
    images, labels = synthetic(batch * steps)
    ds = dataset(images, labels, batch)
    ds[0]
    t0 = time.perf_counter()
    for i in range(len(ds)):
        ds[i]
    report("numpy pipeline alone (no model)", batch * len(ds) / (time.perf_counter() - t0))


def build_with(build, precision):
    keras.config.set_dtype_policy(precision)
    try:
        return build()
    finally:
        keras.config.set_dtype_policy("float32")


def keras_fit(label, build, precision, batch, steps, warm=3, shape=(32, 32, 3), feed="numpy",
              **projection):
    model = build_with(build, precision)
    options = compile_options()
    if feed == "device":  # Keras' steps_per_execution on the device pipeline
        from keras_gresnet.training.runner import steps_per_execution

        options["steps_per_execution"] = steps_per_execution(steps)
        warm = max(warm, options["steps_per_execution"])
        projection["steps_per_execution"] = options["steps_per_execution"]
    if feed == "fused":  # what keras-gresnet train runs on a JAX GPU: 16 steps as one program
        from keras_gresnet.training import executions

        warm = max(warm, executions.STEPS)
        projection["steps_compiled_as_one"] = executions.STEPS
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"], **options)
    images, labels = synthetic(batch * max(steps, warm), shape=shape)

    def fit(data):
        if feed != "fused":
            return model.fit(data, epochs=1, verbose=0)
        data, per_epoch = executions.fuse(model, data)  # the warm-up's program, kept
        return model.fit(data, epochs=1, steps_per_epoch=per_epoch, verbose=0)

    t0 = time.perf_counter()
    fit(dataset(images[:batch * warm], labels[:batch * warm], batch, feed))
    compile_s = time.perf_counter() - t0
    ds = dataset(images, labels, batch, feed)
    t0 = time.perf_counter()
    history = fit(ds)
    seconds = time.perf_counter() - t0
    loss = history.history["loss"][-1]
    # training: forward + backward (input and weight gradients) = 3 forwards
    report(f"{label} keras-jax {precision}" + {"device": " (device pipeline)",
                                                "fused": " (device pipeline, fused steps)"}.get(
                                                    feed, ""),
           batch * len(ds) / seconds,
           flops=6 * zoo.multiply_adds(model), batch=batch, steps=len(ds),
           compile_s=round(compile_s, 1), loss=round(float(loss), 3),
           params=model.count_params(), **projection)
    keras.backend.clear_session()


def torch_device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def torch_fit(label, net, precision, batch, steps, pipeline, warm=5, flops=None):
    import torch
    import torch.nn.functional as F

    device = torch_device()
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
    report(f"{label} pytorch {precision} ({feed})", n / seconds, flops=flops, batch=batch,
           steps=len(ds), loss=round(float(loss), 3), device=device)


def timed(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def measure_peaks(size):
    """The matmul peaks of this device, measured now (TFLOP/s of a
    size x size x size product, mean of 10 after 3 warm-ups): PyTorch bf16,
    float32 with TF32 allowed (what cuDNN's float32 convolutions and XLA's
    default precision use on Hopper) and strict float32."""
    import torch

    device = torch_device()
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    flops = 2 * size**3
    for name, dtype, tf32 in (("bf16", torch.bfloat16, False), ("tf32", torch.float32, True),
                              ("fp32", torch.float32, False)):
        if name == "tf32" and device != "cuda":
            continue
        torch.backends.cuda.matmul.allow_tf32 = tf32
        x, y = a.to(dtype), b.to(dtype)
        PEAKS[name] = round(flops / timed(lambda: x @ y, 10) / 1e12, 2)
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"matmul peaks {size}^3 on {device}, TFLOP/s: {PEAKS}", flush=True)
    RESULTS.append(dict(name=f"matmul peak {size}^3 ({device}), TFLOP/s", **PEAKS))


def keras_infer(label, model, precision, images, batch):
    model.predict(images[:batch], batch_size=batch, verbose=0)  # compiles
    t0 = time.perf_counter()
    model.predict(images, batch_size=batch, verbose=0)
    seconds = time.perf_counter() - t0
    report(f"{label} keras-jax predict {precision} (numpy in)", len(images) / seconds,
           flops=2 * zoo.multiply_adds(model), batch=batch)


def torch_infer(label, net, precision, images, batch, flops):
    import torch

    device = torch_device()
    net = net.to(device).to(memory_format=torch.channels_last).eval()
    mixed = precision != "float32"
    x = torch.from_numpy(images[:batch].astype("float32") / 255).to(device).permute(
        0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

    def forward():
        with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16,
                                                    enabled=mixed):
            return net(x)

    seconds = timed(forward, max(1, len(images) // batch))
    report(f"{label} pytorch eager {precision} (data on device)", batch / seconds, flops=flops,
           batch=batch)


def infer_part(args, batch, shape):
    """Inference, float32 and bfloat16: keras predict (the user's path) against
    PyTorch eager, and each one's fraction of the measured peaks."""
    import torch_reference as ref

    n = 1 if args.tiny else 5
    build = lambda: zoo.gresnet_cifar(n=n, **shape)  # noqa: E731
    model = build_with(build, "float32")
    macs = zoo.multiply_adds(model)
    print(f"gresnet_cifar(n={n}): {macs:,} multiply-adds per image "
          f"(FLOPs {2 * macs:,} inference, {6 * macs:,} training)", flush=True)
    images, _ = synthetic(batch * (2 if args.tiny else 16))
    keras_infer(f"gresnet_cifar(n={n})", model, "float32", images, batch)
    bf16 = build_with(build, "mixed_bfloat16")
    bf16.set_weights(model.get_weights())
    keras_infer(f"gresnet_cifar(n={n})", bf16, "mixed_bfloat16", images, batch)
    for precision, net in (("float32", model), ("mixed_bfloat16", bf16)):  # BatchNorms folded
        keras_infer(f"gresnet_cifar(n={n}) folded", zoo.inference_model(net), precision, images,
                    batch)
    for precision in ("float32", "mixed_bfloat16"):
        torch_infer(f"gresnet_cifar(n={n})", ref.PreactCifarNet(n, gated=True), precision,
                    images, batch, 2 * macs)


# The nets issue 42 asks to train on Fashion-MNIST on a lent GPU: their
# training rate on 28x28x1 inputs, projected over preact_mnist's 40 epochs of
# 60,000 images (the n=5 nets' recipe) and over their papers' own epochs.
RECIPE_NETS = (
    ("preact_resnet110", {}, 164),
    ("preact_resnet164", {}, 164),
    ("wide_gresnet", {"n": 4, "widen_factor": 10}, 200),
)


def recipes_part(args, batch):
    shape = (28, 28, 1)
    for builder, kwargs, paper_epochs in RECIPE_NETS:
        if args.tiny:
            kwargs = {"n": 1, "widen_factor": 1} if builder == "wide_gresnet" else {}
            builder = "wide_gresnet" if builder == "wide_gresnet" else "gresnet_cifar"
            kwargs = kwargs or {"n": 1}
        label = f"{builder}({', '.join(f'{k}={v}' for k, v in kwargs.items())}) 28x28x1"
        build = lambda: zoo.get_model(builder, weights=None, input_shape=shape,  # noqa: E731
                                      classes=10, **kwargs)
        keras_fit(label, build, "float32", batch, args.steps or (3 if args.tiny else 40),
                  shape=shape, epoch_images=60_000, epochs=40, paper_epochs=paper_epochs)


def pipelines_part(args):
    """GResNet-32 (``gresnet_cifar(n=5)``) training at batch 128 and 1024,
    float32 and bf16: Keras-JAX fed by the host's numpy pipeline, by the
    device pipeline, and PyTorch with its data on the GPU; each row's epoch
    (50,000 images) projected."""
    import torch_reference as ref

    n = 1 if args.tiny else 5
    shape = dict(weights=None, input_shape=(32, 32, 3), classes=10)
    flops = 6 * zoo.multiply_adds(zoo.gresnet_cifar(n=n, **shape))
    for batch in ((8, 16) if args.tiny else (128, 1024)):
        steps = args.steps or (4 if args.tiny else (160 if batch == 128 else 48))
        for precision in ("float32", "mixed_bfloat16"):
            for feed in ("numpy", "device", "fused"):
                keras_fit(f"gresnet_cifar(n={n}) batch {batch}",
                          lambda: zoo.gresnet_cifar(n=n, **shape), precision, batch, steps,
                          feed=feed)
            torch_fit(f"gresnet_cifar(n={n}) batch {batch}", ref.PreactCifarNet(n, gated=True),
                      precision, batch, steps, False, flops=flops)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("cifar", "r1001", "infer", "recipes", "pipelines"),
                        default="cifar")
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
    measure_peaks(256 if args.tiny else 8192)
    shape = dict(weights=None, input_shape=(32, 32, 3), classes=10)
    if args.part == "cifar":
        import torch_reference as ref

        n = 1 if args.tiny else 5
        flops = 6 * zoo.multiply_adds(zoo.gresnet_cifar(n=n, **shape))
        pipeline_rate(batch, steps)
        for precision in ("float32", "mixed_bfloat16"):
            keras_fit(f"gresnet_cifar(n={n})", lambda: zoo.gresnet_cifar(n=n, **shape),
                      precision, batch, steps)
        for precision in ("float32", "mixed_bfloat16"):
            for pipeline in (False, True):
                torch_fit(f"gresnet_cifar(n={n})", ref.PreactCifarNet(n, gated=True), precision,
                          batch, steps, pipeline, flops=flops)
    elif args.part == "infer":
        infer_part(args, args.batch or (8 if args.tiny else 1024), shape)
    elif args.part == "recipes":
        recipes_part(args, batch)
    elif args.part == "pipelines":
        pipelines_part(args)
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
