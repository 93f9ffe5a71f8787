"""Where gresnet_cifar's training step spends its CPU time, op by op: a 3x3
convolution and a training-mode BatchNorm, forward + backward, at the three
stage shapes of the CIFAR nets (batch 128: 32x32x16, 16x16x32, 8x8x64), in
TensorFlow (as Keras' TF backend runs them: ``tf.nn.conv2d`` and Keras'
``BatchNormalization`` layer, in a ``tf.function``), the same under XLA
(``jit_compile=True``), TensorFlow's fused BatchNorm kernel for comparison,
PyTorch (``channels_last``, ``nn.BatchNorm2d``), and the convolution in JAX
(``lax.conv_general_dilated``, NHWC, as Keras' JAX backend calls it; also
its kernel gradient alone, ``jax-dk``), side by side in one process,
alternating rounds; each figure the median over rounds of the median of
``--steps`` calls. Without JAX installed the JAX rows are left out.

    python scripts/benchmarks/bench_ops.py [--rounds 3] [--steps 10] [--threads N]

Prints milliseconds per call and each setup's time over PyTorch's (1.00:
PyTorch's speed; 2.00: twice as slow), then, weighted by how many of each op
gresnet_cifar(n=5) runs per step (a conv and a BN per layer: 11, 10, 10 of
each per stage), the step's conv + BN total per setup.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SHAPES = ((128, 32, 32, 16), (128, 16, 16, 32), (128, 8, 8, 64))
# gresnet_cifar(n=5): convs (and BNs) per stage at these shapes per step:
# stage 1 the stem + 2 per unit, stages 2-3 2 per unit (the strided conv
# and zero-pad shortcut counted at the output shape).
PER_STEP = (11, 10, 10)


def timed(fn, steps):
    fn()
    fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def tf_jobs(shape, threads):
    import keras
    import tensorflow as tf

    b, h, w, c = shape
    x = tf.Variable(tf.random.normal(shape))
    kernel = tf.Variable(tf.random.normal((3, 3, c, c)))
    bn = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)
    bn.build(shape)

    def grad(loss_of, wrt, jit):
        @tf.function(jit_compile=jit)
        def step():
            with tf.GradientTape() as tape:
                loss = loss_of()
            return tape.gradient(loss, wrt)
        return step

    def conv():
        return tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME"))

    def keras_bn():
        return tf.reduce_sum(tf.square(bn(x, training=True)))

    def fused_bn():
        y = tf.compat.v1.nn.fused_batch_norm(x, bn.gamma, bn.beta, epsilon=1e-5,
                                             is_training=True)[0]
        return tf.reduce_sum(tf.square(y))

    bn_vars = [x, *bn.trainable_weights]
    return {
        ("conv", "tf"): grad(conv, [x, kernel], False),
        ("conv", "tf-xla"): grad(conv, [x, kernel], True),
        ("bn", "tf"): grad(keras_bn, bn_vars, False),
        ("bn", "tf-xla"): grad(keras_bn, bn_vars, True),
        ("bn", "tf-fused"): grad(fused_bn, bn_vars, False),
    }


def torch_jobs(shape, threads):
    import torch

    torch.set_num_threads(threads)
    b, h, w, c = shape
    x = torch.randn(b, c, h, w).contiguous(memory_format=torch.channels_last).requires_grad_()
    conv = torch.nn.Conv2d(c, c, 3, 1, 1, bias=False).to(memory_format=torch.channels_last)
    bn = torch.nn.BatchNorm2d(c, momentum=0.1, eps=1e-5)

    def conv_step():
        x.grad = conv.weight.grad = None
        conv(x).sum().backward()

    def bn_step():
        x.grad = bn.weight.grad = bn.bias.grad = None
        bn(x).square().sum().backward()

    return {("conv", "pytorch"): conv_step, ("bn", "pytorch"): bn_step}


def jax_jobs(shape, threads):
    try:
        import jax
    except ImportError:
        return {}
    import numpy as np

    b, h, w, c = shape
    rng = np.random.default_rng(0)
    x = jax.numpy.asarray(rng.normal(size=shape).astype("float32"))
    kernel = jax.numpy.asarray(rng.normal(size=(3, 3, c, c)).astype("float32"))

    def loss(x, kernel):
        return jax.lax.conv_general_dilated(
            x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")).sum()

    both = jax.jit(jax.grad(loss, argnums=(0, 1)))
    dk = jax.jit(jax.grad(loss, argnums=1))
    return {("conv", "jax"): lambda: jax.block_until_ready(both(x, kernel)),
            ("conv", "jax-dk"): lambda: jax.block_until_ready(dk(x, kernel))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="PyTorch's threads (TensorFlow: its own pool)")
    args = parser.parse_args(argv)
    for name in ("rounds", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")

    jobs = {}
    for shape in SHAPES:
        for maker in (tf_jobs, jax_jobs, torch_jobs):
            for (op, setup), fn in maker(shape, args.threads).items():
                jobs[(op, shape, setup)] = fn
    results = {key: [] for key in jobs}
    keys = list(jobs)
    for r in range(args.rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]  # rotate each round
        for key in order:
            results[key].append(timed(jobs[key], args.steps))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    ms = {key: statistics.median(v) for key, v in results.items()}
    print(f"PyTorch threads: {args.threads}; ms per forward + backward call, "
          f"median of {args.rounds} rounds x {args.steps} calls; (x): over PyTorch\n")
    print("| op | shape (batch 128) | setup | ms | / PyTorch |")
    print("|---|---|---|---:|---:|")
    for op, shape, setup in keys:
        ref = ms[(op, shape, "pytorch")]
        value = ms[(op, shape, setup)]
        print(f"| {op} | {'x'.join(map(str, shape[1:]))} | {setup} | {value:.2f} | "
              f"{value / ref:.2f} |")
    print("\ngresnet_cifar(n=5), conv + BN per training step "
          f"({' + '.join(map(str, PER_STEP))} of each per stage):\n")
    print("| setup (conv, BN) | conv ms | BN ms | total ms | / PyTorch |")
    print("|---|---:|---:|---:|---:|")
    pairs = (("tf", "tf"), ("tf-xla", "tf-xla"), ("tf", "tf-fused"), ("pytorch", "pytorch"))
    ref = sum(n * (ms[("conv", s, "pytorch")] + ms[("bn", s, "pytorch")])
              for n, s in zip(PER_STEP, SHAPES))
    for conv_setup, bn_setup in pairs:
        conv = sum(n * ms[("conv", s, conv_setup)] for n, s in zip(PER_STEP, SHAPES))
        bn = sum(n * ms[("bn", s, bn_setup)] for n, s in zip(PER_STEP, SHAPES))
        print(f"| {conv_setup}, {bn_setup} | {conv:.0f} | {bn:.0f} | {conv + bn:.0f} | "
              f"{(conv + bn) / ref:.2f} |")
    if ("conv", SHAPES[0], "jax") in ms:
        conv = sum(n * ms[("conv", s, "jax")] for n, s in zip(PER_STEP, SHAPES))
        ref_conv = sum(n * ms[("conv", s, "pytorch")] for n, s in zip(PER_STEP, SHAPES))
        print(f"| jax, - | {conv:.0f} | | | conv: {conv / ref_conv:.2f} |")


if __name__ == "__main__":
    main()
