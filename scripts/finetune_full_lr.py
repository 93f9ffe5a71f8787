"""Phase 2's starting learning rate of ``finetune``, measured: one
published net fine-tuned on a few seeded images per class of another
dataset at each rate, its test error printed (how finetune's per-net
``full_lr`` defaults were chosen; ``keras_gresnet.finetune.default_full_lr``).

    python scripts/finetune_full_lr.py --weights gresnet_cifar5_fashion_mnist \\
        --target mnist --rates 0.0003 0.001 0.003 0.02
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_gresnet import data, finetune, weights, zoo  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", default="gresnet_cifar5_fashion_mnist")
    parser.add_argument("--target", default="mnist", choices=["mnist", "fashion_mnist"])
    parser.add_argument("--shots", type=int, default=100, help="training images per class")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-examples", type=int, default=2000,
                        help="the first N test images (10000: all)")
    parser.add_argument("--rates", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3, 2e-2])
    args = parser.parse_args(argv)
    entry = weights.get_weights(args.weights)
    x, y = data.load(args.target, "train")
    test_x, test_y = data.load(args.target, "test")
    rng = np.random.default_rng(args.seed)
    index = np.concatenate([rng.choice(np.flatnonzero(y == c), args.shots, replace=False)
                            for c in range(10)])
    x, y = x[index].astype("float32"), y[index]  # raw pixels: finetune normalises them
    test_x = test_x[:args.test_examples].astype("float32")
    test_y = test_y[:args.test_examples]
    if len(entry["input_shape"]) == 1:  # an MLP takes pixels / 255
        x, test_x = x / 255, test_x / 255
    pretrained = zoo.get_model(entry["builder"], **entry["builder_kwargs"],
                               weights=args.weights)
    for rate in args.rates:
        keras.utils.set_random_seed(args.seed)
        model, history = finetune.finetune(pretrained, (x, y), classes=10, full_lr=rate,
                                           verbose=0)
        error = np.mean(model.predict(test_x, batch_size=500, verbose=0).argmax(1) != test_y)
        print(f"full_lr {rate:g}: test error {100 * error:.1f}% on {len(test_y)} "
              f"{args.target} test images (first full-phase epoch's loss "
              f"{history['full']['loss'][0]:.3g})", flush=True)


if __name__ == "__main__":
    main()
