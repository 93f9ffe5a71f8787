"""Few-shot fine-tuning on Fashion-MNIST, against training from scratch.

A GResNet MLP (GR Table 1's ``gresnet_mlp``) is pretrained with GR's MNIST
recipe on all training images of classes 0-4 (T-shirt/top, trouser,
pullover, dress, coat), then fine-tuned (:func:`keras_gresnet.finetune.finetune`)
on ``--shots`` labelled training images of each of classes 5-9 (sandal, shirt,
sneaker, bag, ankle boot). Two nets of the same architecture are trained
from scratch on the same images with the same budget (``--epochs`` passes,
same batches): one with GR's recipe, one with the fine-tuning's two phases
on an untrained body (the control: what the pretrained weights add). All
three are tested side by side on the test images of classes 5-9::

    python scripts/finetune_example.py --seed 0 --shots 20 --epochs 20

Fine-tuning spends half of ``--epochs`` on the head (body frozen, Adam 1e-2)
and half on the whole net but BatchNorm (Adam 1e-3, 1/10 of it). The
few-shot set gives only 4 steps per epoch, too few for the Keras guide's
1e-3 / 1e-5. The script prints the three test accuracies and the differences.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_gresnet import data, finetune, training, zoo  # noqa: E402

OLD, NEW = range(0, 5), range(5, 10)  # pretraining / fine-tuning classes
# Few-shot batches, for fine-tuning and scratch alike: 5 per class on average,
# all full (drop_remainder), so no step trains BatchNorm on a 4-image batch.
BATCH_SIZE = 25
HEAD_LR, FULL_LR = 1e-2, 1e-3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the few-shot choice, weights and shuffling")
    parser.add_argument("--shots", type=int, default=20, help="labelled examples per new class")
    parser.add_argument("--epochs", type=int, default=20,
                        help="passes over the few-shot set, fine-tuning and scratch alike")
    parser.add_argument("--depth", type=int, default=10, help="gresnet_mlp depth")
    parser.add_argument("--pretrain-epochs", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if 5 * args.shots < BATCH_SIZE:
        parser.error(f"--shots must be >= {BATCH_SIZE // 5} (one batch of {BATCH_SIZE})")
    if args.epochs < 2:
        parser.error("--epochs must be >= 2 (at least one for each fine-tuning phase)")
    if args.pretrain_epochs < 1:
        parser.error("--pretrain-epochs must be >= 1")
    return args


def subset(images, labels, classes):
    """The examples of ``classes``, labels renumbered from 0."""
    keep = np.isin(labels, classes)
    return images[keep], labels[keep] - min(classes)


def few_shots(images, labels, shots, rng):
    """``shots`` seeded random examples of each label."""
    index = np.concatenate([
        rng.choice(np.flatnonzero(labels == c), shots, replace=False)
        for c in np.unique(labels)
    ])
    return images[index], labels[index]


def gr_model(depth, epochs, steps_per_epoch):
    """``gresnet_mlp`` for 5 classes, compiled with GR's MNIST recipe."""
    recipe = training.get_recipe("gr_mnist", epochs=epochs)
    model = recipe.apply_to(zoo.get_model("gresnet_mlp", depth=depth, input_shape=(28, 28, 1),
                                          classes=5))
    model.compile(optimizer=recipe.optimizer(steps_per_epoch),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model, recipe


def accuracy(model, dataset):
    return model.evaluate(dataset, verbose=0, return_dict=True)["accuracy"]


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(args.seed)
    train_images, train_labels = data.load("fashion_mnist", "train", data_dir=args.data_dir)
    test_images, test_labels = data.load("fashion_mnist", "test", data_dir=args.data_dir)
    old_train, old_test = (subset(train_images, train_labels, OLD),
                           subset(test_images, test_labels, OLD))
    new_test = subset(test_images, test_labels, NEW)
    shots = few_shots(*subset(train_images, train_labels, NEW), args.shots, rng)

    pretrain = data.make_dataset(*old_train, batch_size=128, shuffle=True, seed=args.seed)
    pretrained, recipe = gr_model(args.depth, args.pretrain_epochs, len(pretrain))
    pretrained.fit(pretrain, epochs=recipe.epochs, verbose=0, shuffle=False)  # seeded shuffle
    print(f"pretrained {pretrained.name} on classes 0-4 ({len(old_train[1])} images, "
          f"{recipe.epochs} epochs, Nadam {recipe.learning_rate}): test accuracy "
          f"{accuracy(pretrained, data.make_dataset(*old_test, batch_size=1000)):.4f}")

    few = data.make_dataset(*shots, batch_size=BATCH_SIZE, shuffle=True, drop_remainder=True,
                            seed=args.seed)
    phases = dict(head_epochs=args.epochs - args.epochs // 2, full_epochs=args.epochs // 2,
                  head_lr=HEAD_LR, full_lr=FULL_LR, optimizer="adam")
    tuned, _ = finetune.finetune(pretrained, few, classes=5, **phases)
    scratch, _ = gr_model(args.depth, args.epochs, len(few))
    scratch.fit(few, epochs=args.epochs, verbose=0, shuffle=False)
    untrained = zoo.get_model("gresnet_mlp", depth=args.depth, input_shape=(28, 28, 1),
                              classes=5)
    control, _ = finetune.finetune(untrained, few, classes=5, **phases)

    test = data.make_dataset(*new_test, batch_size=1000)
    results = {
        f"fine-tuned: head {phases['head_epochs']} epochs Adam {HEAD_LR}, then all "
        f"{phases['full_epochs']} epochs Adam {FULL_LR}": accuracy(tuned, test),
        f"from scratch, GR's recipe (Nadam {recipe.learning_rate})": accuracy(scratch, test),
        "from scratch, the same two phases on an untrained body": accuracy(control, test),
    }
    print(f"classes 5-9, {args.shots} shots each ({len(shots[1])} images), {args.epochs} "
          f"epochs = {args.epochs * len(few)} steps of batch {BATCH_SIZE} each, test accuracy "
          f"on their {len(new_test[1])} test images:")
    width = max(map(len, results))
    for name, value in results.items():
        print(f"  {name:{width}}  {value:.4f}")
    tuned_accuracy, scratch_accuracy, control_accuracy = results.values()
    print(f"  fine-tuned - scratch: {100 * (tuned_accuracy - scratch_accuracy):+.2f} points "
          f"(GR's recipe), {100 * (tuned_accuracy - control_accuracy):+.2f} points (same "
          f"phases); seed {args.seed}, {time.perf_counter() - start:.0f} s")

if __name__ == "__main__":
    main()
