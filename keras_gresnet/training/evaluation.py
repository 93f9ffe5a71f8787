"""Testing a trained model: a run folder's or a ``.keras`` file's test set, as
the run saw it (its dataset, its training statistics, its test subset), and
the test metrics on it."""

from keras_gresnet import data
from keras_gresnet._checks import check_choice
from keras_gresnet.training.loss import cross_entropy, logits_head
from keras_gresnet.training.runs import load_run


def test_data(config=None, *, dataset=None, data_dir=None, preprocessing=None, batch_size=256):
    """``(test dataset, dataset name, examples)`` as a run saw it: its dataset
    and training statistics from ``config``; without a config, ``dataset`` is
    required and ``preprocessing`` (default ``"scale"``) is fitted on the
    training split."""
    subset = None
    if data.IMAGENET in (dataset, (config or {}).get("dataset")):
        raise ValueError(
            f"evaluate reads a dataset into memory, which {data.IMAGENET} is not: evaluate an "
            f"ImageNet model on keras_gresnet.data.pipeline('{data.IMAGENET}', ...).test with "
            f"model.evaluate")
    if config is not None:
        own = dataset in (None, config["dataset"])
        dataset = dataset or config["dataset"]
        data_dir = data_dir or config.get("data_dir")
        try:
            fitted = data.Preprocessing.from_config(config["data"]["preprocessing"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"the run's config.json has no valid data.preprocessing "
                             f"({error!r})") from None
        if own and config.get("max_test_examples"):
            # The run's own test set: its seeded subset (data.pipeline's).
            subset = (config["max_test_examples"], config["seed"])
    else:
        if dataset is None:
            raise ValueError("dataset is required for a bare .keras file (e.g. --dataset "
                             "fashion_mnist)")
        check_choice(dataset, "dataset", tuple(data.DATASETS))
        images, _ = data.load(dataset, "train", data_dir=data_dir)
        fitted = data.Preprocessing.fit(preprocessing or "scale", images)
    images, labels = data.load(dataset, "test", data_dir=data_dir)
    if subset is not None:
        index = data.test_subset(len(labels), *subset)
        images, labels = images[index], labels[index]
    dataset_ = data.make_dataset(images, labels, batch_size=batch_size, preprocessing=fitted)
    return dataset_, dataset, len(labels)


def evaluate(path, *, dataset=None, data_dir=None, batch_size=256, preprocessing=None):
    """Test loss, accuracy and error of a run folder's model (its dataset and
    training statistics from ``config.json``) or of a ``.keras`` file (give
    ``dataset``; ``preprocessing`` defaults to ``"scale"``, fitted on the
    training split)."""
    model, config = load_run(path)
    test, dataset, examples = test_data(config, dataset=dataset, data_dir=data_dir,
                                        preprocessing=preprocessing, batch_size=batch_size)
    # The loss from the logits, as training computes it on every backend.
    model.compile(loss=cross_entropy(), metrics=["accuracy"])
    with logits_head(model):
        metrics = model.evaluate(test, verbose=0, return_dict=True)
    return dict(
        dataset=dataset,
        test_loss=float(metrics["loss"]),
        test_accuracy=float(metrics["accuracy"]),
        test_error_percent=100 * (1 - float(metrics["accuracy"])),
        examples=examples,
    )
