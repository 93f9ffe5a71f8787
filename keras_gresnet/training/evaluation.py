"""Testing a trained model: the test set its source names (a run's own: its
dataset or picture folder and its test subset; else the dataset its card
records, or the one given), as raw 0-255 pixels, through the model with
its recorded preprocessing inside (:func:`keras_gresnet.zoo.raw_pixels_model`,
the pixel contract every door keeps), or through an exported artefact's own
runtime (its contract read, its ops checked first), and the test metrics
on it."""

from pathlib import Path

import numpy as np

from keras_gresnet import data, zoo
from keras_gresnet._text import printable, shown
from keras_gresnet._checks import check_choice, check_int
from keras_gresnet.training.loss import cross_entropy, logits_head


def test_set(source, *, dataset=None, data_dir=None):
    """``(uint8 images, int32 labels, dataset name, how classes matched)``
    the model of ``source`` (anything :func:`keras_gresnet.zoo.resolve`
    takes) is tested on: a run folder's own test set (its dataset or picture
    folder, its seeded test subset) unless ``dataset`` or another folder
    names another; else ``dataset``, by default the dataset its card
    records. A picture folder handed over is a test set: every picture of it
    (its held-out part beside ``train/``), its class folders matched to the
    model's classes by name (:func:`match_classes`; ``how`` says how,
    ``None`` for a named dataset or a run's own folder). An exported
    artefact's pictures are those its contract takes."""
    resolved = _resolved(source)
    config = resolved.config or {}
    dataset = dataset or config.get("dataset") or resolved.card.get("dataset")
    if dataset is None:
        raise ValueError(f"{resolved.source!r} records no dataset: name its test set (e.g. "
                         f"--dataset fashion_mnist)")
    if data.IMAGENET == dataset:
        raise ValueError(
            f"evaluate reads a dataset into memory, which {data.IMAGENET} is not: evaluate an "
            f"ImageNet model on keras_gresnet.data.pipeline('{data.IMAGENET}', ...).test with "
            f"model.evaluate")
    own = config and dataset == config.get("dataset")
    data_dir = data_dir or (config.get("data_dir") if own else None)
    settings = config.get("data") or {}
    if dataset == data.FOLDER:
        if data_dir is None:
            raise ValueError("a picture folder's test set needs its folder: pass data_dir "
                             "(--data-dir PATH)")
        shape = settings.get("image_shape") or _picture_shape(resolved)
        if own and _same_folder(data_dir, config.get("data_dir")):
            # the run's own folder: its own held-out split, as it was tested
            folder = data.read_image_folder(data_dir, image_shape=tuple(shape),
                                            seed=settings.get("seed", config.get("seed", 0)))
            images, labels = folder["test"]
        else:  # a folder handed over as a test set: every picture, classes by name
            folder = data.read_test_folder(data_dir, image_shape=tuple(shape))
            mapping, how = match_classes(folder["class_names"], resolved.class_names,
                                         resolved.source, _class_count(resolved))
            images, labels = folder["images"], mapping[folder["labels"]]
            return images, labels, dataset, how
    else:
        check_choice(dataset, "dataset", (*data.DATASETS, data.FOLDER))
        images, labels = data.load(dataset, "test", data_dir=data_dir)
    if own and config.get("max_test_examples"):  # the run's own seeded subset
        index = data.test_subset(len(labels), config["max_test_examples"], config["seed"])
        images, labels = images[index], labels[index]
    return images, labels, dataset, None


def _resolved(source):
    """``source`` resolved: its model loaded, or, for an exported artefact
    (which holds no Keras model), what its contract declares."""
    from keras_gresnet.artefacts import is_artefact

    artefact = is_artefact(source) or getattr(source, "kind", None) == "artefact"
    return zoo.resolve(source, load=not artefact)


def _picture_shape(resolved):
    """The picture the source's net takes: its model's input shape, or the
    ``(height, width, channels)`` of an artefact's contract."""
    if resolved.kind == "artefact":
        from keras_gresnet.artefacts import contract_picture

        return contract_picture(resolved.source, resolved.contract)[1]
    return resolved.model.input_shape[1:]


def _class_count(resolved):
    if resolved.kind == "artefact":
        return len(resolved.class_names) if resolved.class_names else None
    return _classes(resolved.model)


def _same_folder(a, b):
    try:
        return b is not None and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _classes(model):
    """The model's class count (its head's units), or None."""
    shape = model.output_shape
    return shape[-1] if isinstance(shape, tuple) and shape and isinstance(shape[-1], int) \
        else None


def _folder_form(name):
    """A class name as a folder can hold it: no ``/`` (nor ``\\``), which a
    file system cannot keep in a name ("T-shirt/top" is "T-shirt_top")."""
    return name.replace("/", "_").replace("\\", "_").strip()


def match_classes(folder_names, class_names, source, classes=None):
    """``(mapping, how)``: ``mapping[i]`` the model's label of the ``i``-th
    (sorted) class folder, matched by name to the model's ``class_names``
    (as a folder can spell them: :func:`_folder_form`; letter case aside
    when that is unambiguous); folders named ``0`` .. ``N-1`` are indices. A
    subset of the classes is fine; a folder matching no class is refused in
    one line listing the model's names. A model that records no class
    names takes the folders in sorted order, and ``how`` says so."""
    if all(name.isdigit() for name in folder_names) and (
            not class_names or not all(n in class_names for n in folder_names)):
        indices = np.array([int(name) for name in folder_names])
        limit = len(class_names) if class_names else classes
        if limit is not None and indices.max() >= limit:
            raise ValueError(f"class folder {int(indices.max())} is no class of {source!r}: it "
                             f"has {limit} classes (folders 0 to {limit - 1})")
        return indices, "class folders named by index"
    if not class_names:
        if classes is not None and len(folder_names) > classes:
            raise ValueError(f"{len(folder_names)} class folders, {source!r} has {classes} "
                             f"classes and records no names")
        return np.arange(len(folder_names)), (
            f"{source!r} records no class names: the folders taken in sorted order")
    forms = {_folder_form(n): i for i, n in enumerate(class_names)}
    lower = {}
    for form, i in forms.items():
        lower.setdefault(form.lower(), []).append(i)
    mapping, unknown = [], []
    for name in folder_names:
        form = _folder_form(name)
        if form in forms:
            mapping.append(forms[form])
        elif len(lower.get(form.lower(), ())) == 1:
            mapping.append(lower[form.lower()][0])
        else:
            unknown.append(name)
    if unknown:
        shown_names = ", ".join(printable(n) for n in unknown[:5])
        raise ValueError(
            f"class folders {shown_names} name no class of {source!r}; its classes: "
            f"{', '.join(printable(n) for n in class_names[:100])} (a folder spells '/' as "
            f"'_'; folders 0 to {len(class_names) - 1} are indices)")
    return np.array(mapping), "class folders matched by name"


def with_preprocessing(source, method, dataset, data_dir=None):
    """``source`` resolved, with ``method`` (``"scale"``, ``"mean"``,
    ``"meanstd"``) fitted on ``dataset``'s training images as its recorded
    preprocessing, for a source that records none; refused (one line) where
    the source records its own and ``method`` differs."""
    resolved = zoo.resolve(source)
    recorded = resolved.preprocessing
    if method is None or resolved.takes_raw_pixels:
        return resolved
    if recorded is not None:
        if recorded.get("method") != method:
            raise ValueError(
                f"preprocessing={method!r}: {resolved.source!r} records its own, "
                f"{recorded.get('method')!r} with its training statistics, which every "
                f"door applies; drop the option")
        return resolved
    if dataset == data.FOLDER or dataset not in data.DATASETS:
        raise ValueError(f"preprocessing={method!r} is fitted on a named dataset's "
                         f"training images, not on {dataset!r}")
    images, _ = data.load(dataset, "train", data_dir=data_dir)
    fitted = data.Preprocessing.fit(method, images).get_config()
    return zoo.Resolved(resolved.model, {**resolved.card, "preprocessing": fitted},
                        resolved.kind, resolved.source, resolved.config)


def test_data(config=None, *, dataset=None, data_dir=None, preprocessing=None, batch_size=256):
    """``(test dataset, dataset name, examples)`` as a run saw it, batches of
    normalised pixels: its dataset and training statistics from ``config``;
    without a config, ``dataset`` is required and ``preprocessing`` (default
    ``"scale"``) is fitted on the training split."""
    subset = None
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


def evaluate(source, *, dataset=None, data_dir=None, batch_size=256, preprocessing=None,
             max_examples=None):
    """Test loss, accuracy and error of the model of ``source`` (anything
    :func:`keras_gresnet.zoo.resolve` takes) on raw 0-255 pixels of its test
    set (:func:`test_set`), its recorded preprocessing applied inside the
    model (:func:`keras_gresnet.zoo.raw_pixels_model`).
    ``preprocessing`` (``"scale"``, ``"mean"``, ``"meanstd"``, fitted on
    the training split): only for a source that records none.
    ``max_examples``: only the first that many test pictures (a quick
    check; the error is then not the test set's).

    ``source`` may be an exported artefact (``.onnx``, ``.tflite``,
    SavedModel folder taking raw 0-255 pixels, as ``keras-gresnet export``
    writes it): it is run by its own runtime (:func:`artefact_metrics`) on
    the same raw pixels, the dataset its contract records by default."""
    if max_examples is not None:
        max_examples = check_int(max_examples, "max_examples", 1)
    resolved = _resolved(source)  # once: a file or a download is loaded one time
    images, labels, dataset, how = test_set(resolved, dataset=dataset, data_dir=data_dir)
    images, labels = images[:max_examples], labels[:max_examples]
    if resolved.kind == "artefact":
        return dict(dataset=dataset, **artefact_metrics(resolved, images, labels, preprocessing),
                    examples=len(labels), **({"classes": how} if how else {}))
    resolved = with_preprocessing(resolved, preprocessing, dataset, data_dir)
    model = zoo.raw_pixels_model(resolved)
    x = fitted_pixels(images, model)
    # The loss from the logits, as training computes it on every backend.
    model.compile(loss=cross_entropy(), metrics=["accuracy"])
    with logits_head(model):
        metrics = model.evaluate(x, labels, batch_size=batch_size, verbose=0, return_dict=True)
    return dict(
        dataset=dataset,
        test_loss=float(metrics["loss"]),
        test_accuracy=float(metrics["accuracy"]),
        test_error_percent=100 * (1 - float(metrics["accuracy"])),
        examples=len(labels),
        **({"classes": how} if how else {}),
    )


def fitted_pixels(images, model):
    """Raw ``images`` (N, H, W, C) as float32 in ``model``'s input shape (a
    flat input takes them flattened); one line where they do not fit."""
    want = tuple(model.input_shape[1:])
    x = np.asarray(images, np.float32)
    if tuple(x.shape[1:]) == want:
        return x
    if len(want) == 1 and int(np.prod(x.shape[1:])) == want[0]:
        return x.reshape(len(x), -1)
    raise ValueError(f"the test pictures are {tuple(x.shape[1:])}, the model takes {want}: "
                     f"name the dataset it was trained on")


def artefact_metrics(resolved, images, labels, preprocessing=None):
    """``{test_loss, test_accuracy, test_error_percent}`` of the exported
    artefact ``resolved`` (the resolver's declared artefact) on raw 0-255
    ``images``, run by its own runtime
    (:func:`keras_gresnet.artefact_runtime.exported_predictor`: its ops
    checked, the uint8 pictures cast to the dtype its contract states).
    The loss is the cross-entropy of the probabilities it outputs (float32
    softmax: equal to the Keras model's loss from its logits up to float32
    rounding; a probability that underflowed to 0 counts as the smallest
    float32 one, 87.3), or of the softmax of its outputs where they are no
    probabilities (a model exported with ``classifier_activation=None``).
    ``preprocessing``: the artefact normalises the pixels itself, so only
    the method its contract records is accepted (nothing to do)."""
    from keras_gresnet.artefact_runtime import exported_predictor

    recorded = (resolved.preprocessing or {}).get("method")
    if preprocessing is not None and preprocessing != recorded:
        raise ValueError(f"preprocessing={shown(preprocessing)}: {resolved.source!r} is an "
                         f"exported artefact with its normalisation inside ({recorded!r}); "
                         f"drop the option")
    image_shape, _, predict = exported_predictor(resolved.source)
    if tuple(images.shape[1:]) != tuple(image_shape):
        raise ValueError(f"the test pictures are {tuple(images.shape[1:])}, the artefact takes "
                         f"{tuple(image_shape)}: name the dataset its net was trained on")
    outputs = np.asarray(predict(images), np.float64)
    labels = np.asarray(labels)
    if outputs.ndim != 2 or not len(outputs) == len(labels) or labels.max() >= outputs.shape[1]:
        raise ValueError(f"{resolved.source!r} gives outputs of shape {outputs.shape} for "
                         f"{len(labels)} pictures of {labels.max() + 1} or more classes")
    probabilities = outputs.min() >= 0 and np.allclose(outputs.sum(1), 1, atol=1e-3)
    if probabilities:
        log_p = np.log(np.maximum(outputs, np.finfo(np.float32).tiny))
    else:  # logits: the log-softmax, computed stably
        shifted = outputs - outputs.max(1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    # stated as Keras' accuracy metric states the Keras model's (a float32 mean)
    accuracy = float(np.float32(np.sum(outputs.argmax(1) == labels)) / np.float32(len(labels)))
    return dict(test_loss=float(-log_p[np.arange(len(labels)), labels].mean()),
                test_accuracy=accuracy, test_error_percent=100 * (1 - accuracy))
