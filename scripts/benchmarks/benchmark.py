"""Benchmark: training and inference images/s of zoo models on every Keras
backend, side by side with a PyTorch twin of the same architecture
(``scripts/benchmarks/torch_reference.py``), in float32 and mixed bfloat16.

A Keras backend is fixed per process, so each setup (``tf``, ``jax``,
``torch-keras``, ``pytorch``, and with ``--variants`` the profiled variants:
XLA on/off, oneDNN off, op determinism, NCHW torch...) is one persistent
worker process (``--worker``) that keeps its compiled models. The parent runs
the rounds: in round r every (model, precision, mode) job runs once on every
setup, one at a time, in an order rotated by r, so machine noise hits all
alike. The figure of a job is the median, over rounds, of
``batch / median step`` (the step: the interval between two
``on_*_batch_end`` callbacks, the first one of each call dropped).

The Keras training step is the one ``keras-gresnet train`` runs: the zoo
builder (``weights=None``), ``compile(SGD(momentum=0.9),
"sparse_categorical_crossentropy", ["accuracy"],
**keras_gresnet.training.loop.compile_options())``, ``model.fit`` over
in-memory numpy batches of random data (``steps + 1`` batches a call; the
first call, which compiles, is not timed). Inference is ``model.predict``.
PyTorch: eager ``nn.Module``, ``SGD(momentum=0.9)``, ``cross_entropy`` on
logits, ``channels_last`` memory format, ``torch.set_num_threads(cores)``;
mixed precision is ``torch.autocast("cpu", torch.bfloat16)`` against Keras'
``mixed_bfloat16`` policy (``mixed_float16`` is pointless on a CPU: no
float16 arithmetic units, it only adds casts). The artefacts (``savedmodel``,
``onnx``, ``litert``): the ``tf`` setup's model exported by
``keras_gresnet.export`` (BatchNorms folded, its default) and run by its
own runtime, inference in the job's precision (``--variants``: the unfolded
artefacts and the folded Keras models too, ``zoo.inference_model``). The
CPU's model name and the flags that pick kernels (AVX2, AVX-512, AVX512-BF16,
AMX) head the output and every JSON row.

Each round also times every library's best square matmul (``--peak-size``)
in float32 and bfloat16: the run's peak per dtype. Every figure gets its
GFLOP/s (img/s x 2 or 6 x ``zoo.multiply_adds``) and its share of that peak.

    python scripts/benchmarks/benchmark.py [--rounds 2] [--models gresnet_cifar,gresnet_mlp|all]
        [--backends tf,jax,torch-keras,pytorch,pytorch-nchw,savedmodel,onnx,litert]
        [--precisions float32,mixed_bfloat16] [--threads N] [--variants] [--pruned]
        [--quick] [--peak-size 2048] [--json out.json]

On cores shared with another busy process pass ``--threads 1``: torch's
OpenMP threads then run 6x faster than one per core (docs/benchmarks.md).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# name -> (batch, train steps, infer steps) of a default run (2 busy cores).
# wide_gresnet trains at a few images/s here: inference only unless asked.
MODELS = {
    "gresnet_cifar": (128, 4, 4),
    "preact_resnet110": (128, 2, 2),
    "wide_gresnet": (32, 0, 2),
    "gresnet_mlp": (128, 20, 20),
}
DEFAULT_MODELS = ("gresnet_cifar", "gresnet_mlp")  # --models all: the four
# GR's "faster predictions by using a pruned version" (--pruned): a published
# net and the same net without its closed blocks (analysis.closed_blocks:
# g(k) = 0 exactly), inference on the Keras setups only (no PyTorch twin).
PUBLISHED = {"gresnet_mlp100_mnist": False, "gresnet_mlp100_mnist-pruned": True}
PUBLISHED_STEPS = (1000, 0, 10)  # batch 1000 (predict's), inference only
# --quick: tiny twins (one unit a stage, widen 1, depth 4), batch 8.
QUICK = {
    "gresnet_cifar": ("gresnet_cifar", dict(n=1)),
    "preact_resnet110": ("resnet_cifar", dict(n=1, unit="preact")),
    "wide_gresnet": ("wide_gresnet", dict(n=1, widen_factor=1)),
    "gresnet_mlp": ("gresnet_mlp", dict(depth=4)),
}
PRECISIONS = ("float32", "mixed_bfloat16")

# Setups: a worker process each. env: extra environment; compile: overrides
# of compile_options(); init: what the worker does first.
SETUPS = {
    "tf": dict(runner="keras", backend="tensorflow"),
    "jax": dict(runner="keras", backend="jax"),
    "torch-keras": dict(runner="keras", backend="torch"),
    "pytorch": dict(runner="torch"),
    # the PyTorch side is the faster of channels_last and NCHW (ratios are to
    # the fastest PyTorch setup of the run)
    "pytorch-nchw": dict(runner="torch", channels_last=False),
    # the exported artefacts of the TensorFlow setup's model (inference
    # only, BatchNorms folded), each run by its own runtime (keras_gresnet.export)
    "savedmodel": dict(runner="artefact", backend="tensorflow", format="tf_saved_model"),
    "onnx": dict(runner="artefact", backend="tensorflow", format="onnx"),
    "litert": dict(runner="artefact", backend="tensorflow", format="litert"),
}
VARIANTS = {
    # what compile("auto") resolves to on a CPU-only TF: no XLA
    "tf-auto": dict(runner="keras", backend="tensorflow", compile={"jit_compile": "auto"}),
    "tf-xla": dict(runner="keras", backend="tensorflow", compile={"jit_compile": True}),
    "tf-noxla": dict(runner="keras", backend="tensorflow", compile={"jit_compile": False}),
    "tf-onednn-off": dict(runner="keras", backend="tensorflow",
                          env={"TF_ENABLE_ONEDNN_OPTS": "0"}),
    # keras_gresnet.training.train enables TF op determinism (runner._data)
    "tf-determinism": dict(runner="keras", backend="tensorflow", init="determinism"),
    "jax-spe4": dict(runner="keras", backend="jax", compile={"steps_per_execution": 4}),
    "tf-xla-spe4": dict(runner="keras", backend="tensorflow",
                        compile={"jit_compile": True, "steps_per_execution": 4}),
    # XLA:CPU's oneDNN and XNNPACK paths (environment: read when JAX starts)
    "jax-onednn": dict(runner="keras", backend="jax",
                       env={"XLA_FLAGS": "--xla_cpu_use_onednn=true"}),
    "jax-onednn-cc": dict(runner="keras", backend="jax", env={
        "XLA_FLAGS": "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_custom_call=true"}),
    "jax-xnnpack": dict(runner="keras", backend="jax",
                        env={"XLA_FLAGS": "--xla_cpu_use_xnnpack=true"}),
    # one compute thread: on cores shared with another busy process, a
    # second thread that waits at every barrier for a descheduled peer
    "pytorch-1thread": dict(runner="torch", threads=1),
    "torch-keras-1thread": dict(runner="keras", backend="torch", threads=1),
    # the zoo's layers reverted to Keras' own computation (before/after
    # tables): BatchNormalization.call, Conv2D.convolution_op, or both
    "torch-keras-kerasbn": dict(runner="keras", backend="torch", revert=("bn",)),
    "torch-keras-kerasconv": dict(runner="keras", backend="torch", revert=("conv",)),
    "torch-keras-keraslayers": dict(runner="keras", backend="torch", revert=("bn", "conv")),
    "tf-kerasbn": dict(runner="keras", backend="tensorflow", revert=("bn",)),
    # ZeroPadShortcut's subsampling back to a strided slice (before
    # 2026-12-05; TensorFlow's StridedSlice is slow on a CPU)
    "tf-strided": dict(runner="keras", backend="tensorflow", revert=("shortcut",)),
    # its unit-stride slice as an index again (2026-12-05 to 12-07), whose
    # gradient is TensorFlow's slow StridedSliceGrad
    "tf-shrink": dict(runner="keras", backend="tensorflow", revert=("shortcut-index",)),
    # oneDNN primitives cached for the backward ops too (TensorFlow's
    # default recreates them at every call to save memory)
    "tf-cache": dict(runner="keras", backend="tensorflow",
                     env={"TF_MKL_OPTIMIZE_PRIMITIVE_MEMUSE": "false"}),
    # inference with every BatchNorm after a conv folded into it
    # (zoo.inference_model, what `keras-gresnet predict` and the exports run)
    "tf-folded": dict(runner="keras", backend="tensorflow", fold=True),
    "jax-folded": dict(runner="keras", backend="jax", fold=True),
    "torch-keras-folded": dict(runner="keras", backend="torch", fold=True),
    # the folded model's predict compiled by XLA (compile("auto") is no XLA
    # on a CPU-only TensorFlow)
    "tf-folded-xla": dict(runner="keras", backend="tensorflow", fold=True,
                          compile={"jit_compile": True}),
    # the artefacts as trained: every BatchNorm kept (export(fold_batchnorm=False))
    "savedmodel-unfolded": dict(runner="artefact", backend="tensorflow",
                                format="tf_saved_model", fold=False),
    "onnx-unfolded": dict(runner="artefact", backend="tensorflow", format="onnx", fold=False),
    "litert-unfolded": dict(runner="artefact", backend="tensorflow", format="litert",
                            fold=False),
    "tf-1thread": dict(runner="keras", backend="tensorflow",
                       env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}),
    # ops one after the other, each with every core (TensorFlow's default
    # runs independent ops side by side, each asking the same intra-op pool)
    "tf-interop1": dict(runner="keras", backend="tensorflow",
                        env={"TF_NUM_INTEROP_THREADS": "1"}),
    # ablations (where the time goes; not the zoo's nets): every BatchNorm an
    # identity, or every gate a plain addition
    "tf-no-bn": dict(runner="keras", backend="tensorflow", ablate="bn"),
    "tf-no-gate": dict(runner="keras", backend="tensorflow", ablate="gate"),
    "jax-no-bn": dict(runner="keras", backend="jax", ablate="bn"),
    "pytorch-1thread-no-bn": dict(runner="torch", threads=1, ablate="bn"),
    "pytorch-1thread-no-gate": dict(runner="torch", threads=1, ablate="gate"),
}
# --variants adds these (the ablations only when named in --backends)
PROFILED = [v for v in VARIANTS if "-no-" not in v]


def cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def torch_threads():
    return int(os.environ.get("BENCH_TORCH_THREADS") or cores())


# The CPU flags that decide which kernels oneDNN, XLA and PyTorch pick.
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu():
    """``{"model", "id", "flags"}`` of this machine's CPU (``/proc/cpuinfo``):
    its model name, vendor, family and model numbers, and which of
    :data:`CPU_FLAGS` it has; read by the package's ``_cpu.py``, loaded
    alone (this parent process imports no Keras)."""
    import importlib.util

    path = os.path.join(HERE, "..", "..", "keras_gresnet", "_cpu.py")
    spec = importlib.util.spec_from_file_location("_bench_cpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, flags, ident = module._cpuinfo()
    return dict(model=model or "unknown", id=ident, flags=[f for f in CPU_FLAGS if f in flags])


def random_batches(shape, batch, count, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch * count, *shape)).astype("float32")
    y = rng.integers(0, 10, size=batch * count).astype("int32")
    return x, y


def step_seconds(stamps):
    """Intervals between batch ends, the first (call set-up) dropped."""
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return gaps[1:] if len(gaps) > 1 else gaps


# ------------------------------------------------------------------ workers


def matmul_peak(backend, dtype, size, reps=5):
    """GFLOP/s of the best of ``reps`` ``size x size`` matmuls in ``dtype``
    (``float32`` or ``bfloat16``) on ``backend`` (``tensorflow``, ``jax``,
    ``torch``), after two unmeasured ones: what these cores reach on the
    largest, most regular kernel a library has (``2 size^3`` operations)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=(size, size)).astype("float32") for _ in range(2))
    if backend == "tensorflow":
        import tensorflow as tf

        a, b = tf.cast(a, dtype), tf.cast(b, dtype)
        run = lambda: tf.matmul(a, b)[0, 0].numpy()  # noqa: E731 (waits for it)
    elif backend == "jax":
        import jax
        import jax.numpy as jnp

        a, b = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
        matmul = jax.jit(jnp.matmul)
        run = lambda: matmul(a, b).block_until_ready()  # noqa: E731
    else:
        import torch

        a, b = (torch.from_numpy(m).to(getattr(torch, dtype)) for m in (a, b))
        run = lambda: torch.matmul(a, b)  # noqa: E731
    best = float("inf")
    for i in range(reps + 2):
        t0 = time.perf_counter()
        run()
        if i >= 2:
            best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best / 1e9


def ablated(model, what):
    """A clone of the Keras ``model`` with every BatchNormalization an
    identity (``what="bn"``) or every ResidualGate a plain addition
    (``"gate"``)."""
    import keras

    class NoBatchNorm(keras.layers.Layer):
        def call(self, inputs, training=None, mask=None):
            return inputs

    def clone(layer):
        if what == "bn" and isinstance(layer, keras.layers.BatchNormalization):
            return NoBatchNorm(name=layer.name)
        if what == "gate" and type(layer).__name__ == "ResidualGate":
            return keras.layers.Add(name=layer.name)
        return layer.__class__.from_config(layer.get_config())

    return keras.models.clone_model(model, clone_function=clone)


def torch_ablated(net, what):
    """The torch twin of :func:`ablated`, in place."""
    from torch import nn

    import torch_reference as ref

    class Add(nn.Module):
        def forward(self, x, fx):
            return x + fx

    for name, child in list(net.named_children()):
        if what == "bn" and isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            setattr(net, name, nn.Identity())
        elif what == "gate" and isinstance(child, ref.Gate):
            setattr(net, name, Add())
        else:
            torch_ablated(child, what)
    return net


def published_model(name):
    """A :data:`PUBLISHED` net with its weights (offline: the checkout's
    ``zoo/weights``), pruned of every closed block when its name says so;
    the pruned net's largest output difference from the full one on random
    pixels is printed (it is 0: each closed block adds exactly 0)."""
    import keras
    import numpy as np

    from keras_gresnet import analysis, zoo

    full = zoo.resolve(name.removesuffix("-pruned")).model
    if not PUBLISHED[name]:
        return full
    closed = analysis.closed_blocks(full)
    pruned = analysis.prune(full, closed)
    x = np.random.default_rng(0).random((256, *full.input_shape[1:]), dtype="float32")
    difference = float(np.abs(keras.ops.convert_to_numpy(pruned(x, training=False))
                              - keras.ops.convert_to_numpy(full(x, training=False))).max())
    print(f"{name}: {len(closed)} closed blocks removed, parameters {full.count_params():,} -> "
          f"{pruned.count_params():,}, largest output difference {difference:g}",
          file=sys.stderr, flush=True)
    return pruned


def keras_model(name, quick):
    """``(model, input shape)`` of a benchmarked net: a :data:`PUBLISHED` one
    with its weights, else the zoo twin of ``torch_reference`` (random
    weights; ``quick``: the tiny one), in the current dtype policy."""
    from keras_gresnet import zoo
    from torch_reference import MODELS as TWINS

    if name in PUBLISHED:
        model = published_model(name)
        return model, model.input_shape[1:]
    builder, kwargs = QUICK[name] if quick else TWINS[name][1]
    shape = TWINS[name][2]
    return zoo.get_model(builder, weights=None, input_shape=shape, classes=10, **kwargs), shape


def keras_worker(setup, quick):
    import keras
    import numpy as np

    from keras_gresnet import zoo
    from keras_gresnet.training.loop import compile_options

    if keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(setup.get("threads") or torch_threads())
    if setup.get("init") == "determinism":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    if "bn" in setup.get("revert", ()):
        from keras_gresnet.layers import BatchNormalization

        BatchNormalization.call = keras.layers.BatchNormalization.call
    if "conv" in setup.get("revert", ()):
        from keras_gresnet.layers import Conv2D

        Conv2D.convolution_op = keras.layers.Conv2D.convolution_op
    if "shortcut" in setup.get("revert", ()):
        from keras_gresnet.layers import shortcuts

        shortcuts._subsample_nhwc = lambda x, s, training=False: x[:, ::s, ::s, :]
    if "shortcut-index" in setup.get("revert", ()):
        from keras_gresnet.layers import shortcuts

        inference_form = shortcuts._subsample_nhwc  # the index, in training too
        shortcuts._subsample_nhwc = lambda x, s, training=False: inference_form(x, s)
    options = {**compile_options(), **setup.get("compile", {})}
    cache = {}

    class Stamps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.t = []

        def _begin(self, logs=None):
            self.t = [time.perf_counter()]

        def _end(self, batch, logs=None):
            if logs and "loss" in logs:
                float(logs["loss"])  # wait for the step (JAX dispatches async)
            self.t.append(time.perf_counter())

        on_train_begin = on_predict_begin = _begin
        on_train_batch_end = on_predict_batch_end = _end

    def model_for(name, precision):
        key = (name, precision)
        if key not in cache:
            keras.config.set_dtype_policy(precision)
            model, shape = keras_model(name, quick)
            keras.config.set_dtype_policy("float32")
            trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
            params = [trainable, model.count_params()]  # the net's, folded or not
            if setup.get("fold"):
                model = zoo.inference_model(model)
            if setup.get("ablate"):
                model = ablated(model, setup["ablate"])
            model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                          loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                          **options)
            cache[key] = dict(model=model, shape=shape, compiled=set(), params=params,
                              macs=zoo.multiply_adds(model))
        return cache[key]

    def measure(req):
        if "peak" in req:
            return dict(gflops=matmul_peak(keras.backend.backend(), req["peak"], req["size"]))
        entry = model_for(req["model"], req["precision"])
        model, batch, steps = entry["model"], req["batch"], req["steps"]
        x, y = random_batches(entry["shape"], batch, steps + 1)
        first = None
        stamps = Stamps()
        if req["mode"] == "train":
            if "train" not in entry["compiled"]:
                t0 = time.perf_counter()
                model.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, verbose=0,
                          shuffle=False)
                first = time.perf_counter() - t0
                entry["compiled"].add("train")
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False,
                      callbacks=[stamps])
        else:
            if "infer" not in entry["compiled"]:
                t0 = time.perf_counter()
                model.predict(x[:batch], batch_size=batch, verbose=0)
                first = time.perf_counter() - t0
                entry["compiled"].add("infer")
            model.predict(x, batch_size=batch, verbose=0, callbacks=[stamps])
        spe = int(options.get("steps_per_execution", 1))  # one callback per execution
        return dict(steps=[t / spe for t in step_seconds(stamps.t)], first=first,
                    params=entry["params"], macs=entry["macs"],
                    options={k: str(v) for k, v in options.items()})

    return measure, dict(backend=keras.backend.backend(), keras=keras.__version__)


def torch_worker(setup, quick):
    import torch
    import torch.nn.functional as F

    import torch_reference as ref

    torch.set_num_threads(setup.get("threads") or torch_threads())
    channels_last = setup.get("channels_last", True)
    cache = {}

    def model_for(name, precision, mode):
        key = (name, precision)
        if key not in cache:
            net = ref.quick(name) if quick else ref.build(name)
            if setup.get("ablate"):
                net = torch_ablated(net, setup["ablate"])
            if channels_last:
                net = net.to(memory_format=torch.channels_last)
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
            cache[key] = dict(net=net, opt=opt, compiled=set(), params=ref.param_counts(net))
        return cache[key]

    def measure(req):
        if "peak" in req:
            return dict(gflops=matmul_peak("torch", req["peak"], req["size"]))
        name, precision, batch, steps = req["model"], req["precision"], req["batch"], req["steps"]
        entry = model_for(name, precision, req["mode"])
        net, opt = entry["net"], entry["opt"]
        x, y = random_batches(ref.MODELS[name][2], batch, steps + 1)
        xs = [ref.to_torch_images(x[i * batch:(i + 1) * batch], channels_last)
              for i in range(steps + 1)]
        ys = [torch.from_numpy(y[i * batch:(i + 1) * batch]).long() for i in range(steps + 1)]
        mixed = precision != "float32"
        autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed)  # noqa: E731

        def train(xb, yb):
            net.train()
            opt.zero_grad(set_to_none=True)
            with autocast():
                out = net(xb)
            loss = F.cross_entropy(out.float(), yb)
            loss.backward()
            opt.step()
            (out.argmax(1) == yb).float().mean()  # Keras' accuracy metric
            return loss.item()

        def infer(xb, yb):
            net.eval()
            with torch.inference_mode(), autocast():
                return net(xb).float().softmax(1)

        fn = train if req["mode"] == "train" else infer
        first = None
        if req["mode"] not in entry["compiled"]:
            t0 = time.perf_counter()
            fn(xs[0], ys[0])
            first = time.perf_counter() - t0
            entry["compiled"].add(req["mode"])
        stamps = [time.perf_counter()]
        for xb, yb in zip(xs, ys):
            fn(xb, yb)
            stamps.append(time.perf_counter())
        return dict(steps=step_seconds(stamps), first=first, params=entry["params"],
                    options=dict(channels_last=str(channels_last),
                                 threads=str(torch.get_num_threads())))

    return measure, dict(backend="pytorch", torch=torch.__version__)


def artefact_worker(setup, quick):
    """Inference of the model the ``tf`` setup builds (in the job's
    precision, the same builder and seed-free random weights), exported in
    ``setup["format"]`` by :func:`keras_gresnet.export.export` (BatchNorms
    folded unless ``setup["fold"]`` is False) to a temporary folder and run by
    :func:`keras_gresnet.export.load_exported` (onnxruntime, the LiteRT
    interpreter, ``tf.saved_model.load``), one call a batch. The artefact
    takes the model's own input (``include_preprocessing=False``), so it
    computes what ``model.predict`` computes; the largest difference of
    their outputs on the first batch is reported with each result."""
    import atexit
    import shutil
    import tempfile

    import keras
    import numpy as np

    from keras_gresnet import export, zoo

    folder = tempfile.mkdtemp(prefix="bench-artefact-")
    atexit.register(shutil.rmtree, folder, True)  # this worker's exports, removed at its exit
    cache = {}

    def artefact_for(name, precision):
        if (name, precision) not in cache:
            try:
                cache[name, precision] = exported(name, precision)
            except Exception as error:  # e.g. no bfloat16 kernels: the same answer every round
                cache[name, precision] = error
        if isinstance(cache[name, precision], Exception):
            raise cache[name, precision]
        return cache[name, precision]

    def exported(name, precision):
        keras.config.set_dtype_policy(precision)
        model, shape = keras_model(name, quick)
        keras.config.set_dtype_policy("float32")
        out = os.path.join(folder, f"{name}-{precision}" + export.SUFFIXES[setup["format"]])
        export.export(model, out, format=setup["format"], include_preprocessing=False,
                      fold_batchnorm=setup.get("fold", True))
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        return dict(model=model, shape=shape, run=export.load_exported(out), compiled=False,
                    params=[trainable, model.count_params()], macs=zoo.multiply_adds(model),
                    # what it computes in: float32 for a bf16 net's ONNX or LiteRT file
                    dtype_policy=export.read_contract(out)["dtype_policy"])

    def measure(req):  # run() asks it for inference only, and no peak
        entry = artefact_for(req["model"], req["precision"])
        batch, steps = req["batch"], req["steps"]
        x, _ = random_batches(entry["shape"], batch, steps + 1)
        first = None
        if not entry["compiled"]:
            t0 = time.perf_counter()
            entry["run"](x[:batch])
            first = time.perf_counter() - t0
            entry["compiled"] = True
        difference = float(np.abs(np.asarray(entry["run"](x[:batch]), np.float32) - np.asarray(
            keras.ops.convert_to_numpy(entry["model"](x[:batch], training=False)),
            np.float32)).max())
        stamps = [time.perf_counter()]
        for i in range(steps + 1):
            entry["run"](x[i * batch:(i + 1) * batch])
            stamps.append(time.perf_counter())
        return dict(steps=step_seconds(stamps), first=first, params=entry["params"],
                    macs=entry["macs"], options=dict(format=setup["format"],
                                                     dtype_policy=entry["dtype_policy"],
                                                     difference=f"{difference:.2g}"))

    return measure, dict(backend=f"{setup['format']} (from {keras.backend.backend()})",
                         keras=keras.__version__)


def worker_main(args):
    """Read one JSON request a line from stdin, answer one JSON line."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # library chatter must not reach the protocol
    setup = {**SETUPS, **VARIANTS}[args.setup]
    if setup["runner"] == "torch":
        measure, info = torch_worker(setup, args.quick)
    elif setup["runner"] == "artefact":
        measure, info = artefact_worker(setup, args.quick)
    else:
        measure, info = keras_worker(setup, args.quick)
    out.write(json.dumps(dict(ready=True, **info)) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            result = measure(req)
        except Exception as e:  # reported in the table, the run goes on
            result = dict(error=f"{type(e).__name__}: {e}"[:300])
        out.write(json.dumps(result) + "\n")
        out.flush()


class Worker:
    """A persistent worker process of one setup."""

    def __init__(self, name, quick):
        setup = {**SETUPS, **VARIANTS}[name]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **setup.get("env", {}))
        if setup["runner"] in ("keras", "artefact"):
            env["KERAS_BACKEND"] = setup["backend"]
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--setup", name]
        if quick:
            cmd.append("--quick")
        self.name, self.runner = name, setup["runner"]
        self.log = open(os.path.join(os.environ.get("BENCH_LOG_DIR", "/tmp"),
                                     f"benchmark-{name}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)
        self.info = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            return dict(error=self._died())
        return json.loads(line)

    def _died(self):
        """The worker's last words: the last line of its log (an import
        error, a traceback's last line), and where the log is."""
        self.proc.wait()
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        cause = lines[-1] if lines else f"exit code {self.proc.returncode}"
        return f"worker {self.name} died: {cause} (see {self.log.name})"

    def ask(self, req):
        if self.proc.poll() is not None:
            return dict(error=self._died())
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


# ------------------------------------------------------------------- parent


def jobs_of(args):
    jobs = []
    for model in args.models + (list(PUBLISHED) if args.pruned else []):
        batch, train_steps, infer_steps = MODELS.get(model, PUBLISHED_STEPS)
        if args.quick:
            batch, train_steps, infer_steps = 8, 3, 3
        batch = args.batch or batch
        if args.train_wide and model == "wide_gresnet" and not train_steps:
            train_steps = 2
        if args.steps:
            train_steps = args.steps if train_steps else 0
            infer_steps = args.steps
        for precision in args.precisions:
            for mode, steps in (("train", train_steps), ("infer", infer_steps)):
                if steps and precision != "float32" and not args.steps:
                    steps = max(2, steps // 2)  # bfloat16 is 8-12x slower on a CPU
                if steps and mode in args.modes and not (
                        model in PUBLISHED and (mode == "train" or precision != "float32")):
                    jobs.append(dict(model=model, precision=precision, mode=mode,
                                     batch=batch, steps=steps))
    return jobs


def run(args):
    setups = list(args.backends) + ([v for v in PROFILED if v not in args.backends]
                                    if args.variants else [])
    jobs = jobs_of(args)
    machine = cpu()
    print(f"{len(setups)} setups x {len(jobs)} jobs x {args.rounds} rounds; "
          f"{cores()} cores; load {os.getloadavg()[0]:.2f}; CPU {machine['model']} "
          f"({machine['id'] or 'family unknown'}), "
          f"flags {' '.join(machine['flags']) or 'none of ' + ' '.join(CPU_FLAGS)}", flush=True)
    workers = {}
    for s in setups:
        t0 = time.perf_counter()
        workers[s] = Worker(s, args.quick)
        print(f"  worker {s}: {workers[s].info} ({time.perf_counter() - t0:.0f} s)", flush=True)
    params = {}  # model -> setup -> (trainable, total)
    results = {}  # (setup, model, precision, mode) -> dict(ips=[...], first=..)
    peaks = {}  # (setup, dtype) -> [GFLOP/s of a round...]
    dtypes = ["float32"] + (["bfloat16"] if "mixed_bfloat16" in args.precisions else [])
    started = time.perf_counter()
    try:
        for r in range(args.rounds):
            for s in (setups[r % len(setups):] + setups[:r % len(setups)]
                      if args.peak_size else []):
                if s not in SETUPS or workers[s].runner == "artefact":
                    continue  # one peak per library: the default setups'
                for dtype in dtypes:
                    res = workers[s].ask(dict(peak=dtype, size=args.peak_size))
                    if "error" in res:
                        results.setdefault((s, f"matmul {args.peak_size}", dtype, "peak"),
                                           dict(ips=[], error=res["error"]))
                        continue
                    peaks.setdefault((s, dtype), []).append(res["gflops"])
                    print(f"  round {r + 1} {s:>15s} matmul {args.peak_size}^2 {dtype:>8s}: "
                          f"{res['gflops']:7.1f} GFLOP/s", flush=True)
            for j, job in enumerate(jobs):
                k = (r + j) % len(setups)
                for s in setups[k:] + setups[:k]:
                    if job["model"] in PUBLISHED and workers[s].runner == "torch":
                        continue  # a published net has no PyTorch twin
                    if job["mode"] == "train" and (workers[s].runner == "artefact"
                                                   or {**SETUPS, **VARIANTS}[s].get("fold")):
                        continue  # an artefact, a folded model: inference only
                    res = workers[s].ask(job)
                    key = (s, job["model"], job["precision"], job["mode"])
                    entry = results.setdefault(key, dict(ips=[], first=None, error=None,
                                                         batch=job["batch"]))
                    if "error" in res:
                        entry["error"] = res["error"]
                    else:
                        entry["ips"].append(job["batch"] / statistics.median(res["steps"]))
                        entry["first"] = entry["first"] or res["first"]
                        entry["options"] = res.get("options")
                        entry["macs"] = res.get("macs")
                        if "-no-" not in s:  # ablations drop weights on purpose
                            params.setdefault(job["model"], {})[s] = tuple(res["params"])
                    ips = f"{entry['ips'][-1]:9.1f} img/s" if not res.get("error") else "error"
                    print(f"  round {r + 1} {s:>15s} {job['model']:>17s} {job['precision']:>14s} "
                          f"{job['mode']:>5s}: {ips}  ({time.perf_counter() - started:.0f} s)",
                          flush=True)
    finally:
        for w in workers.values():
            w.close()
    for model, counts in params.items():
        print(f"  params {model}: " + ", ".join(f"{s} {c[0]:,}/{c[1]:,}" for s, c in counts.items())
              + " (trainable/total)")
        if len(set(counts.values())) > 1:
            raise SystemExit(f"{model}: the twins' parameter counts differ: {counts}")
    return setups, jobs, results, peaks


# Floating-point operations per image and multiply-add (zoo.multiply_adds):
# inference 2 (a multiply and an add), training 6 (forward, input gradient,
# kernel gradient), as scripts/benchmarks/gpu_check.py counts them.
FLOPS_PER_MAC = {"train": 6, "infer": 2}


def best_peaks(peaks):
    """dtype -> (GFLOP/s, setup): the best matmul of the run per dtype."""
    best = {}
    for (s, dtype), values in peaks.items():
        if dtype not in best or max(values) > best[dtype][0]:
            best[dtype] = (max(values), s)
    return best


def table(setups, jobs, results, peaks=None):
    """The markdown table; ratios to the fastest PyTorch setup of the run
    (``pytorch``, ``pytorch-1thread``...) at the same model and precision;
    each figure's GFLOP/s and its fraction of the run's best matmul in the
    dtype it computes in (bfloat16 for ``mixed_bfloat16``, float32 for an
    artefact of it that computes in float32, whose precision says so)."""
    peak = best_peaks(peaks or {})
    macs = {m: e["macs"] for (_, m, _, _), e in results.items() if e.get("macs")}

    def gflops(value, m, p, mode):
        if not value or m not in macs:
            return ""
        g = value * FLOPS_PER_MAC[mode] * macs[m] / 1e9
        top = peak.get("float32" if p == "float32" else "bfloat16")
        return f"{g:,.1f}" + (f" ({100 * g / top[0]:.0f}%)" if top else "")
    def ips(s, m, p, mode):
        e = results.get((s, m, p, mode))
        if not e:
            return None, ""
        if e["error"] and not e["ips"]:
            return None, "error"
        v = statistics.median(e["ips"])
        return v, f"{v:,.1f}" if v < 100 else f"{v:,.0f}"

    references = [s for s in setups if s.startswith("pytorch") and "-no-" not in s]

    def best(m, p, mode):
        values = [ips(s, m, p, mode)[0] for s in references]
        values = [v for v in values if v]
        return max(values) if values else None

    rows = ["| model | setup | precision | batch | train img/s | infer img/s | "
            "train / PyTorch | infer / PyTorch | train GFLOP/s (of peak) | "
            "infer GFLOP/s (of peak) | first train call s |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    seen = []
    for job in jobs:
        if (job["model"], job["precision"]) not in seen:
            seen.append((job["model"], job["precision"]))
    for m, p in seen:
        if m in PUBLISHED:
            continue  # their own table below
        rt, ri = best(m, p, "train"), best(m, p, "infer")
        for s in setups:
            tv, ts = ips(s, m, p, "train")
            iv, is_ = ips(s, m, p, "infer")
            e = results.get((s, m, p, "train")) or results.get((s, m, p, "infer")) or {}
            ratio_t = f"{tv / rt:.2f}x" if tv and rt else ""
            ratio_i = f"{iv / ri:.2f}x" if iv and ri else ""
            first = results.get((s, m, p, "train"), {}).get("first")
            if not (tv or iv or ts or is_):
                continue  # a setup that does not run this precision (an artefact)
            # an artefact computing in another dtype (a bf16 net's ONNX file: float32)
            runs = (e.get("options") or {}).get("dtype_policy") or p
            label = p if runs == p else f"{p} (computes {runs})"
            rows.append(f"| {m} | {s} | {label} | {e.get('batch', '')} | {ts or '-'} | "
                        f"{is_ or '-'} | {ratio_t} | {ratio_i} | {gflops(tv, m, runs, 'train')} | "
                        f"{gflops(iv, m, runs, 'infer')} | {f'{first:.1f}' if first else ''} |")
    if all(m in PUBLISHED for m, _ in seen):
        rows = []  # --models "" --pruned: the pruned table alone
    pruned = [m for m, _ in seen if m in PUBLISHED and PUBLISHED[m]]
    if pruned:
        rows += ["", "| net | setup | precision | full infer img/s | pruned infer img/s "
                 "| pruned / full |", "|---|---|---|---:|---:|---:|"]
    for m in pruned:
        full = m.removesuffix("-pruned")
        for p in dict.fromkeys(p for n, p in seen if n == m):
            for s in setups:
                fv, fs = ips(s, full, p, "infer")
                pv, ps = ips(s, m, p, "infer")
                if fv or pv:
                    rows.append(f"| {full} | {s} | {p} | {fs or '-'} | {ps or '-'} | "
                                + (f"{pv / fv:.2f}x |" if fv and pv else " |"))
    notes = []
    if references:
        notes.append("Ratios: to the fastest of " + ", ".join(references)
                     + " at the same model and precision.")
    if macs:
        notes.append("FLOPs per image (2 x multiply-adds to infer, 6 x to train): " + "; ".join(
            f"{m} {2 * n / 1e6:,.1f} M / {6 * n / 1e6:,.1f} M" for m, n in macs.items()) + ".")
    if peak:
        notes.append("Peak: the best square matmul of the run, " + "; ".join(
            f"{d} {g:,.1f} GFLOP/s ({s})" for d, (g, s) in peak.items()) + ".")
    return "\n".join(rows) + "".join("\n\n" + n for n in notes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated, of {','.join(MODELS)}, or all")
    parser.add_argument("--backends", default=",".join(SETUPS),
                        help=f"comma-separated setups, of {','.join([*SETUPS, *VARIANTS])}")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--variants", action="store_true",
                        help=f"add the profiled variants: {', '.join(PROFILED)}")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of pytorch and torch-keras (default: the "
                             "cores; 1 on cores shared with a busy process)")
    parser.add_argument("--batch", type=int, default=None, help="override every model's batch")
    parser.add_argument("--steps", type=int, default=None, help="override the timed steps")
    parser.add_argument("--train-wide", action="store_true",
                        help="also time wide_gresnet training (a few img/s on a CPU)")
    parser.add_argument("--pruned", action="store_true",
                        help="also time inference of gresnet_mlp100_mnist and the same net "
                        "without its closed blocks (Keras setups; offline weights)")
    parser.add_argument("--quick", action="store_true", help="tiny models, a smoke test")
    parser.add_argument("--peak-size", type=int, default=2048,
                        help="the square matmul whose GFLOP/s is each round's peak, per "
                        "library and dtype (0: none; --quick: 256)")
    parser.add_argument("--json", default=None, help="write the raw results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--setup", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker_main(args)
    for field, allowed in (("models", {**MODELS, "all": None}), ("backends", {**SETUPS, **VARIANTS}),
                           ("precisions", PRECISIONS), ("modes", ("train", "infer"))):
        values = [v for v in getattr(args, field).split(",") if v]
        bad = [v for v in values if v not in allowed]
        if bad:
            parser.error(f"--{field}: unknown {bad}, choose from {list(allowed)}")
        setattr(args, field, values)
    if args.peak_size < 0:
        parser.error(f"--peak-size: a matrix size, or 0 for none; got {args.peak_size}")
    if args.quick and args.peak_size == 2048:
        args.peak_size = 256
    if args.models == ["all"]:
        args.models = list(MODELS)
    if args.threads:
        os.environ["BENCH_TORCH_THREADS"] = str(args.threads)
    setups, jobs, results, peaks = run(args)
    print()
    print(table(setups, jobs, results, peaks))
    if args.json:
        with open(args.json, "w") as f:
            machine = cpu()
            json.dump([dict(setup=k[0], model=k[1], precision=k[2], mode=k[3], cpu=machine, **v)
                       for k, v in results.items()]
                      + [dict(setup=s, model=f"matmul {args.peak_size}", precision=d,
                              mode="peak", gflops=v, cpu=machine)
                         for (s, d), v in peaks.items()],
                      f, indent=1)
    failed = failures(results)
    if failed:
        print(f"\n{len(failed)} cell(s) failed:", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)


def failures(results):
    """One line per errored cell (setup, model, precision, mode: the cause)."""
    return [f"{' '.join(k)}: {v['error']}" for k, v in results.items() if v.get("error")]


if __name__ == "__main__":
    main()
