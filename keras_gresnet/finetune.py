"""Fine-tune a pretrained model on new classes, in the two phases of Keras'
transfer-learning guide, with defaults chosen for this zoo's nets.

The phases of Keras' guide "Transfer learning & fine-tuning"
(keras.io/guides/transfer_learning)::

    from keras_gresnet import finetune
    model, history = finetune.finetune("runs/main", train, classes=5)

1. :func:`new_head`: the pretrained model's architecture and body weights
   (copied layer by layer, by name) with a fresh ``predictions`` layer for
   ``classes`` classes. The pretrained model itself is left untouched.
2. Phase 1, :func:`freeze_body`: only the head trains (``head_lr``).
3. Phase 2, :func:`unfreeze_body`: everything but BatchNormalization
   trains (``full_lr``).

The guide's defaults (Adam 1e-3 for the head, then 1e-5 for everything) are
habits of ImageNet-scale transfer, where the pretrained features already fit
the new task and a large body must not move. They do not fit these small
nets moved to another dataset with a few labelled images per class: the head
phase underfits and the body barely moves, and the result is worse than
training the same net from scratch. :func:`finetune`'s defaults (Adam at
1e-2 for the head, 2e-2 for everything, each phase's rate decayed to 0 by a
cosine, a short head phase, a longer full phase) were set by measuring
few-shot transfer between MNIST and Fashion-MNIST against training from
scratch on the same images with the same budget
(``scripts/finetune/finetune_example.py``, its results in
``zoo/results/finetune/table.md``); the learning rates are chosen on a
validation split held out of the training images, never a test image, and so
is the full phase's length (``scripts/finetune/finetune_select.py``,
``zoo/results/finetune_select/``).

BatchNormalization stays in inference mode in both phases, as the guide
advises for fine-tuning: a Keras 3 BN layer with ``trainable=False`` normalises
with its moving statistics and never updates them. A flat functional model
has no other per-layer switch to inference mode, so in phase 2 the BN layers
stay frozen, their scale and offset too (as keras.io's EfficientNet
fine-tuning example leaves them). Unfrozen, they would replace the pretrained
statistics with those of the small fine-tuning batches, which are noisy and
which the already trained layers were not fitted to.

The model comes back with its BatchNormalization layers frozen. To train
them again, set ``layer.trainable = True`` on each layer and recompile
(``model.trainable = True`` alone does nothing on the TensorFlow backend
while the model's own flag is already ``True``).
"""

import dataclasses
import math
import os

import keras

from keras_gresnet import zoo
from keras_gresnet._checks import check_choice, check_int, check_positive, check_seed
from keras_gresnet._text import printable, shortened
from keras_gresnet.finetune_data import (
    RAW_PIXELS_ABOVE, EpochBatches, _fit_data, _folder_data, _is_batches, _is_raw,
    dataset_class_names,
)
from keras_gresnet.layers import ZooModel, all_layers, takes_raw_pixels
from keras_gresnet.training.loss import cross_entropy, logits_head
from keras_gresnet.weights.loading import HEAD

VERBOSITIES = ("auto", 0, 1, 2)
SCHEDULES = ("cosine", "constant")  # how a phase's learning rate moves over its epochs


def load_pretrained(source):
    """The model behind ``source``: anything :func:`keras_gresnet.zoo.resolve`
    takes (the one resolver)."""
    return zoo.resolve(source).model


def source_info(source):
    """``{"class_names": [...] or None, "preprocessing": dict or None}`` of
    ``source``: a list of class names (no preprocessing known), or anything
    :func:`keras_gresnet.zoo.resolve` takes (its card)."""
    if isinstance(source, (list, tuple)) and all(isinstance(n, str) for n in source):
        return dict(class_names=list(source), preprocessing=None)
    card = zoo.resolver.card_of(source)
    return dict(class_names=card.get("class_names"), preprocessing=card.get("preprocessing"))


def new_head(model, classes, *, preprocessing=None, class_names=None):
    """A copy of ``model`` (anything :func:`load_pretrained` takes) with a
    fresh ``predictions`` layer of ``classes`` units.

    The body's weights are copied by layer name (:func:`keras_gresnet.zoo.transfer_weights`);
    the new head keeps the old one's configuration (activation, dtype, weight
    decay) and gets freshly initialised weights. A model without a
    ``predictions`` layer (``include_top=False``) must output a feature
    vector; a softmax head is put on it. ``model`` is not changed.

    ``preprocessing`` (``Preprocessing.get_config()``'s ``method``, ``mean``,
    ``std``): put a ``PixelNormalization`` named ``"preprocessing"`` in
    front, as the builders' ``include_preprocessing`` does, so that the copy
    takes raw 0-255 pixels (refused for a model that has one already).
    The copy is a :class:`~keras_gresnet.layers.ZooModel` remembering the
    source's builder with the new head and input, and a card naming the
    source and ``class_names``.
    """
    classes = check_int(classes, "classes", 1)
    if class_names is not None and len(class_names) != classes:
        raise ValueError(f"class_names has {len(class_names)} names for classes={classes}")
    resolved = zoo.resolve(model)
    source = resolved.model
    if preprocessing is not None and takes_raw_pixels(source):
        raise ValueError(f"model {source.name} has a PixelNormalization layer already: it "
                         f"takes raw pixels")
    copy = keras.models.clone_model(source)
    if HEAD in {layer.name for layer in copy.layers}:
        old = copy.get_layer(HEAD)
        features, config = old.input, old.get_config()
    else:
        if len(copy.outputs) != 1 or len(copy.outputs[0].shape) != 2:
            raise ValueError(
                f"model {source.name} has no {HEAD!r} layer and its output "
                f"{[tuple(o.shape) for o in copy.outputs]} is not one feature vector "
                f"(batch, features): build it with include_top=False, pooling='avg'"
            )
        features = copy.outputs[0]
        config = keras.layers.Dense(1, activation="softmax").get_config()
    config.update(units=classes, name=HEAD)
    outputs = keras.layers.Dense.from_config(config)(features)
    net = ZooModel(copy.input, outputs, name=source.name)  # same input structure
    zoo.transfer_weights(source, net, skip_missing=False, exclude={HEAD})
    if preprocessing is not None:
        from keras_gresnet.zoo.applications import model_input

        inputs, x = model_input(None, tuple(source.input_shape[1:]), dict(preprocessing))
        # the same layers (and weights) called on the normalised pixels: one flat graph
        net = ZooModel(inputs, net.call(x), name=source.name)
    card = resolved.card
    origin = card.get("source") or (resolved.source if resolved.kind != "model"
                                    else source.name)
    new_card = zoo.cards.card(
        source=f"fine-tuned from {origin}",
        preprocessing=preprocessing or card.get("preprocessing"),
        class_names=list(class_names) if class_names is not None else None,
        license=card.get("license"))
    builder = source.builder if isinstance(source, ZooModel) else None
    kwargs = source.builder_kwargs if builder else None
    if builder:
        kwargs.update(classes=classes, include_top=True)
        if preprocessing is not None:
            kwargs["include_preprocessing"] = dict(preprocessing)
    return net.remember(builder, kwargs, new_card)


def _head(model):
    try:
        return model.get_layer(HEAD)
    except ValueError:
        raise ValueError(
            f"model {model.name} has no {HEAD!r} layer (make one with new_head)"
        ) from None


def freeze_body(model):
    """Phase 1: freeze every layer but the ``predictions`` head. Frozen
    BatchNormalization layers run in inference mode (moving statistics,
    never updated). Recompile afterwards. Returns ``model``."""
    _head(model)
    for layer in all_layers(model):
        layer.trainable = layer.name == HEAD
    return model


def unfreeze_body(model):
    """Phase 2: make every layer trainable except BatchNormalization, which
    stays frozen, in inference mode (see the module docstring). Recompile
    afterwards. Returns ``model``."""
    _head(model)
    for layer in all_layers(model):
        layer.trainable = not isinstance(layer, keras.layers.BatchNormalization)
    return model


def _optimizer_class(name):
    """The Keras optimizer class named ``name`` (``"adam"``, ``"nadam"``...):
    each phase needs a new optimizer, so a name and not an instance."""
    try:
        if not isinstance(name, str):
            raise ValueError
        return type(keras.optimizers.get(name))
    except ValueError:
        raise ValueError(
            f"optimizer must be a Keras optimizer name such as 'adam', 'nadam' or "
            f"'sgd' (a new one is made for each phase), got {name!r}"
        ) from None


def _cosine(lr, epochs, first=0):
    """Half a cosine from ``lr`` (the phase's first epoch, ``first`` counted
    over the whole run) towards 0 (after its ``epochs``), set at the start of
    each epoch: the number of steps per epoch of a ``tf.data.Dataset`` need
    not be known."""
    return keras.callbacks.LearningRateScheduler(
        lambda epoch: lr * 0.5 * (1 + math.cos(math.pi * (epoch - first) / epochs))
    )


# Phase 2's learning rate and length by the kind of net, each chosen on a
# validation split (finetune's docstring).
DENSE_FULL_LR, CONV_FULL_LR = 2e-2, 1e-3
DENSE_FULL_EPOCHS, CONV_FULL_EPOCHS = 50, 25


def _convolutional(model):
    return any(isinstance(layer, keras.layers.Conv2D) for layer in all_layers(model))


def default_full_lr(model):
    """:func:`finetune`'s phase-2 learning rate for ``model`` (a
    ``keras.Model``): :data:`CONV_FULL_LR` for a net with a convolution,
    else :data:`DENSE_FULL_LR`."""
    return CONV_FULL_LR if _convolutional(model) else DENSE_FULL_LR


def default_full_epochs(model):
    """:func:`finetune`'s phase-2 epochs for ``model`` (a ``keras.Model``):
    :data:`CONV_FULL_EPOCHS` for a net with a convolution, else
    :data:`DENSE_FULL_EPOCHS`."""
    return CONV_FULL_EPOCHS if _convolutional(model) else DENSE_FULL_EPOCHS


def finetune(
    model,
    train_data,
    *,
    classes,
    validation_data=None,
    head_epochs=5,
    full_epochs=None,
    head_lr=1e-2,
    full_lr=None,
    optimizer="adam",
    batch_size=32,
    schedule="cosine",
    seed=None,
    verbose="auto",
):
    """Fine-tune ``model`` on ``classes`` new classes: a fresh head trained on
    the frozen body, then the whole net (BatchNormalization excepted), each
    phase with its own new optimizer and learning-rate schedule.

    The defaults are for a few labelled images per class on this zoo's
    nets (they were measured on 100 and 1,000 images); they were chosen so that
    fine-tuning GR's MLPs with no arguments is not worse than training the
    same net from scratch on the same images with the same budget
    (``scripts/finetune/finetune_example.py`` measures both; the figures are in
    ``zoo/results/finetune/table.md``). GR's CIFAR conv net, fine-tuned from
    Fashion-MNIST to MNIST, gains at 10 images per class but is 0.5 points
    worse than from scratch at 100 (``zoo/results/finetune_conv/table.md``).
    On a large training set, lower the epochs: they count passes over
    ``train_data``.

    Args:
        model: a ``keras.Model``, a run folder, a ``.keras`` file, a preset
            folder or a published weights name; not changed.
        train_data, validation_data: a folder of pictures (one subfolder
            per class, :mod:`keras_gresnet.data.folders`: fitted to the
            model's input, its test split the validation data unless
            ``validation_data`` is given), a ``tf.data.Dataset`` of ``(x, y)``
            batches (``keras.utils.image_dataset_from_directory``'s, any
            ``label_mode`` but ``None``; its ``class_names`` are kept, as a
            folder's; checked like arrays on its first batch), or an
            ``(x, y)`` pair of arrays (batched by ``batch_size``); labels in
            ``[0, classes)``, one-hot, or 0/1 (``label_mode="binary"``).
            Raw 0-255 pixels (a folder, uint8 arrays, or floats
            above 16: ``image_dataset_from_directory``'s batches) get the
            preprocessing of ``model``'s source (its run, preset, weights
            entry or card: :func:`source_info`; pixels / 255 where none is
            recorded) as a ``PixelNormalization`` layer in front of the
            returned model, so that it takes the same raw pixels;
            preprocessed pixels (floats up to 16) go in as they are, and the
            returned model takes preprocessed pixels too. A model with its
            own ``PixelNormalization`` (``include_preprocessing``) takes raw
            pixels only. Never scaled twice.
        classes: number of new classes.
        head_epochs: epochs of phase 1 (head only); 0 skips it. Default 5,
            a short phase: it only has to fit the fresh head before the body
            trains, so that the body's first gradients are not a random
            head's. The transfer itself happens in phase 2: the head alone,
            on the frozen body, ends far worse.
        full_epochs: epochs of phase 2 (everything); 0 skips it. Default
            ``None``: the net's (:func:`default_full_epochs`), 50 for GR's
            fully-connected nets and 25 for a convolutional net;
            ``head_epochs + full_epochs`` is the budget a from-scratch run
            is compared at. Chosen on the validation split of ``full_lr``
            below: for the MLPs 50 did 0.45 points better than 25 (paired
            95% interval [-0.71, -0.18]; 15 did 0.74 worse), at twice the
            time; for the conv net 50 was 0.84 points lower, not beyond noise
            (interval [-2.51, +0.83], 2 seeds), so 25 stays.
        head_lr: phase 1's learning rate. Default 1e-2: with a few steps per
            epoch, the guide's 1e-3 leaves the head far from fitted after
            ``head_epochs``; on a validation split neither 1e-3 nor 3e-2 did
            better beyond noise (``scripts/finetune/finetune_select.py``).
        full_lr: phase 2's learning rate. Default ``None``: the net's
            (:func:`default_full_lr`), 2e-2 for GR's fully-connected nets and
            1e-3 for a convolutional net, not the guide's 1e-5: moved to
            another dataset, these small nets' features must change, not be
            nudged, and at 1e-5 the body hardly moves in ``full_epochs``.
            The cosine ``schedule`` only starts there and brings it down to
            0. Both rates were chosen on a validation split held out of the
            training images, never a test image
            (``scripts/finetune/finetune_select.py``: 200 training images per class
            that are not among the shots, 2 or 3 seeds of their own): the
            MLPs' mean validation error was lowest at 2e-2 of 5e-3, 1e-2,
            2e-2 and 5e-2 (23.6% against 24.0% at 1e-2), the conv net's at
            1e-3 of 3e-4, 1e-3 and 3e-3 (11.2% against 14.7% and 34.7%;
            ``zoo/results/finetune_select/``). GR's CIFAR conv net diverges
            at the MLPs' 2e-2 (Adam's steps are large beside its conv
            kernels' scale: chance-level error after fine-tuning).
        optimizer: a Keras optimizer name; a new one for each phase. Default
            ``"adam"``: Keras 1's Nadam (GR's optimizer) and Keras 3's Nadam
            at the same or GR's rates did worse on most measured tasks.
        batch_size: batch size of array data. Default 32 (Keras'): a
            few-shot set still gives several steps per epoch (GR's 128
            would give one step per epoch on 100 images); 16 was no better.
        schedule: how each phase's learning rate moves over its epochs:
            ``"cosine"`` (default) starts at ``head_lr`` / ``full_lr`` and
            decays by half a cosine towards 0, set at the start of every
            epoch; ``"constant"`` keeps it (the guide's). Default cosine: at
            a constant rate high enough for the body to move, the test
            error still wanders by a point or more late in the run, so
            where the run stops decides its result; the decay ends it at a
            settled point.
        seed: ``None`` (default: whatever the global seeds give, Keras'
            own shuffling of arrays), or an integer in ``[0, 2**31 - 1]``
            that makes the run repeatable: Python's, numpy's and the
            backend's generators are seeded with it before the new head is
            drawn (``keras.utils.set_random_seed``; TensorFlow's ops made
            deterministic where TensorFlow runs), a folder's test part is
            held out by it, and array data (a folder's too) is read in an
            order that is a function of ``(seed, epoch)``
            (:class:`~keras_gresnet.finetune_data.EpochBatches`). Two runs
            with one seed on one machine give the same weights to the bit
            (``tests/test_finetune_run.py``). A ``tf.data.Dataset`` shuffles
            itself: seed it too.
        verbose: ``model.fit``'s verbosity; default ``"auto"``, Keras'
            progress (0 turns it off).

    Returns:
        ``(model, history)``: the fine-tuned copy (left as phase 2 trains it:
        body trainable, BatchNormalization frozen; a
        :class:`~keras_gresnet.layers.ZooModel` whose card names the source,
        the preprocessing and a folder's or dataset's class names, so that
        :func:`keras_gresnet.decode_predictions` and
        :func:`keras_gresnet.zoo.save_preset` need nothing more) and ``{"head": ..., "full":
        ...}``, each phase's ``History.history`` (``{}`` for a skipped phase;
        with the cosine schedule it holds each epoch's ``learning_rate``).
    """
    plan = prepare(model, train_data, classes=classes, validation_data=validation_data,
                   head_epochs=head_epochs, full_epochs=full_epochs, head_lr=head_lr,
                   full_lr=full_lr, optimizer=optimizer, batch_size=batch_size,
                   schedule=schedule, seed=seed)
    return train_phases(plan, verbose=verbose)


def refuse_artefact(source, argument="model"):
    """One line refusing an exported artefact as the source of a fine-tuning:
    it holds no trainable Keras model."""
    from keras_gresnet.artefacts import is_artefact

    if is_artefact(source):
        raise ValueError(
            f"{argument}={shortened(printable(os.fspath(source)), 300)!r} is an exported "
            f"artefact, which cannot be fine-tuned: fine-tune the .keras file, run folder, "
            f"preset or published name it was exported from")


@dataclasses.dataclass
class Plan:
    """A fine-tuning checked and ready to train (:func:`prepare`): the net
    with its new head, the data as ``model.fit`` takes it, and each phase's
    settings."""

    net: keras.Model
    resolved: object
    x: object
    y: object
    validation_data: object
    class_names: list
    head_epochs: int
    full_epochs: int
    head_lr: float
    full_lr: float
    optimizer_class: type
    batch_size: int
    schedule: str
    seed: object

    def phases(self):
        """``(name, set_trainable, first epoch, stop epoch, lr)`` of each
        phase, its epochs counted over the whole run."""
        head, full = self.head_epochs, self.full_epochs
        return (("head", freeze_body, 0, head, self.head_lr),
                ("full", unfreeze_body, head, head + full, self.full_lr))


def seed_everything(seed):
    """Seed Python, numpy and the backend with ``seed``; where TensorFlow
    runs, make its ops deterministic too (as :func:`keras_gresnet.training.train`)."""
    import sys

    keras.utils.set_random_seed(seed)
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        tf.config.experimental.enable_op_determinism()


def prepare(model, train_data, *, classes, validation_data=None, head_epochs=5,
            full_epochs=None, head_lr=1e-2, full_lr=None, optimizer="adam", batch_size=32,
            schedule="cosine", seed=None):
    """:func:`finetune`'s arguments checked, its data read and the net with
    its new head made (after seeding, with a ``seed``): a :class:`Plan`, for
    :func:`train_phases`. ``classes=None`` takes a folder's own count."""
    refuse_artefact(model)
    if classes is not None or not isinstance(train_data, (str, os.PathLike)):
        classes = check_int(classes, "classes", 1)
    head_epochs = check_int(head_epochs, "head_epochs", 0)
    if full_epochs is not None:
        full_epochs = check_int(full_epochs, "full_epochs", 0)
    head_lr = check_positive(head_lr, "head_lr")
    if full_lr is not None:
        full_lr = check_positive(full_lr, "full_lr")
    optimizer_class = _optimizer_class(optimizer)
    batch_size = check_int(batch_size, "batch_size", 1)
    check_choice(schedule, "schedule", SCHEDULES)
    if seed is not None:
        seed = check_seed(seed, "seed")
    resolved = zoo.resolve(model)
    source = resolved.model
    full_lr = default_full_lr(source) if full_lr is None else full_lr
    full_epochs = default_full_epochs(source) if full_epochs is None else full_epochs
    train_data, validation_data, class_names, raw = _training_data(
        train_data, validation_data, source, classes, seed or 0)
    classes = len(class_names) if classes is None else classes
    # Raw pixels get the source's recorded preprocessing inside the copy.
    preprocessing = zoo.pixels.recorded_statistics(resolved) \
        if raw and not takes_raw_pixels(source) else None
    if seed is not None:  # before the new head is drawn
        seed_everything(seed)
    net = new_head(resolved, classes, preprocessing=preprocessing, class_names=class_names)
    x, y = (train_data, None) if _is_batches(train_data) else train_data
    return Plan(net, resolved, x, y, validation_data, class_names, head_epochs, full_epochs,
                head_lr, full_lr, optimizer_class, batch_size, schedule, seed)


def train_phases(plan, *, verbose="auto", callbacks=(), restore=None, validate=True):
    """Train the two phases of ``plan`` (a :class:`Plan`); returns
    ``(net, {"head": ..., "full": ...})`` as :func:`finetune` does.

    ``callbacks`` see the epochs counted over the whole run (phase 2's
    first is ``head_epochs``). ``restore``: ``None``, or ``(load, done)``:
    ``load`` loads the newest checkpoint into the compiled net and returns
    the epochs it had finished
    (:meth:`keras_gresnet.training.runs.EpochBackup.restore`), ``done`` how
    many it should find (0: none); the phase that epoch belongs to is
    compiled with its optimizer, restored and continued, the earlier phases
    skipped, the later ones trained as an uninterrupted run trains them.
    ``validate=False`` leaves the validation data out of ``fit``."""
    check_choice(verbose, "verbose", VERBOSITIES)
    net = plan.net
    from_logits = _head(net).activation is keras.activations.linear
    done = 0 if restore is None else restore[1]
    history = {}
    for phase, set_trainable, first, stop, lr in plan.phases():
        set_trainable(net)
        history[phase] = {}
        if stop == first or stop < done:
            continue
        # compile after every change of `trainable`: a compiled step keeps the old set.
        net.compile(optimizer=plan.optimizer_class(learning_rate=lr), loss=cross_entropy(),
                    metrics=["accuracy"])
        if done and first < done <= stop:  # the checkpoint's phase
            net.optimizer.build(net.trainable_variables)
            found = restore[0](net)
            if found != done:
                raise ValueError(f"the newest checkpoint could not be read (an older one "
                                 f"counts {found} epochs, not {done}); remove the unreadable "
                                 f"one to resume from it")
        start = max(first, done)
        if start >= stop:
            continue
        history[phase] = _fit_phase(net, plan, first, start, stop, lr, callbacks,
                                    validate, verbose)
    if net.compiled:  # the returned net evaluates as Keras' own classifiers do
        net.compile(optimizer=net.optimizer, metrics=["accuracy"],
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits))
    return net, history


def _training_data(train_data, validation_data, model, classes, seed=0):
    """``(train_data, validation_data, class_names, raw)``: :func:`finetune`'s
    data as ``model.fit`` takes it (:mod:`keras_gresnet.finetune_data`), a
    folder's test split the validation data unless ``validation_data`` is
    given, the class names of a folder or dataset (``None`` otherwise), and
    whether the pixels are raw 0-255; the two data must agree on both, and a
    ``model`` that takes raw pixels gets raw ones."""
    class_names = dataset_class_names(train_data) if _is_batches(train_data) else None
    if isinstance(train_data, (str, os.PathLike)):
        train_data, folder_test, class_names = _folder_data(train_data, model, classes, seed)
        classes = len(class_names)
        if validation_data is None:
            validation_data = folder_test
    if isinstance(validation_data, (str, os.PathLike)):
        validation_data = _folder_data(validation_data, model, classes, seed)[1]
    validation_names = dataset_class_names(validation_data) \
        if _is_batches(validation_data) else None
    if None not in (class_names, validation_names) and validation_names != class_names:
        raise ValueError(f"validation_data's class_names {validation_names} are not "
                         f"train_data's {class_names}: give both the same classes")
    train_data = _fit_data(train_data, "train_data", classes, model)
    raw = _is_raw(train_data)
    if validation_data is not None:
        validation_data = _fit_data(validation_data, "validation_data", classes, model)
        if _is_raw(validation_data) != raw:
            raise ValueError(
                f"validation_data holds {'raw 0-255' if not raw else 'preprocessed'} pixels "
                f"and train_data {'raw 0-255' if raw else 'preprocessed'} ones: give both "
                f"the same way")
    if takes_raw_pixels(model) and not raw:
        raise ValueError(
            f"model {model.name} takes raw 0-255 pixels (it has a PixelNormalization layer), "
            f"but train_data holds preprocessed ones (none above {RAW_PIXELS_ABOVE:g}): give "
            f"the raw pixels")
    return train_data, validation_data, class_names, raw


def _fit_phase(net, plan, first, start, stop, lr, callbacks, validate, verbose):
    """``net.fit`` over the epochs ``start .. stop - 1`` of a phase that
    began at epoch ``first``, with ``plan``'s data (seeded, the batches of
    :class:`~keras_gresnet.finetune_data.EpochBatches`) and its schedule;
    its ``History.history``."""
    callbacks = list(callbacks)
    if plan.schedule == "cosine":
        callbacks.insert(0, _cosine(lr, stop - first, first))
    x, y = plan.x, plan.y
    options = dict(batch_size=None if y is None else plan.batch_size,
                   shuffle=y is not None)  # a Dataset shuffles itself
    if y is not None and plan.seed is not None:  # each epoch's order from (seed, epoch)
        x = EpochBatches(x, y, batch_size=plan.batch_size, seed=plan.seed, epochs=(start, stop))
        y, options = None, dict(steps_per_epoch=x.steps_per_epoch, shuffle=False)
    with logits_head(net):  # the loss from the logits, on every backend
        fit = net.fit(x, y, epochs=stop, initial_epoch=start,
                      validation_data=plan.validation_data if validate else None,
                      verbose=verbose, callbacks=callbacks, **options)
    return fit.history
