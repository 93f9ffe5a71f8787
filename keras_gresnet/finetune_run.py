"""``keras-gresnet finetune``: a fine-tuning (:func:`keras_gresnet.finetune.finetune`)
on a picture folder, into a run folder of the files and rules of
:func:`keras_gresnet.training.train`'s (:mod:`keras_gresnet.training.runs`):
``config.json`` first, ``history.csv`` and ``gates.csv`` after every epoch
(the held-out pictures tested as ``test_*``), a checkpoint of the model and
its optimizer in ``backup/`` after every epoch, then ``model.keras`` (the
fine-tuned net, its card naming the source, class names, preprocessing and
test error), the figures and ``results.json``; the folder's lock while it
trains. The same command on an unfinished folder resumes after its last
finished epoch, in whichever phase that was, and ends as the uninterrupted
run does: each epoch's batches are a function of the seed and the epoch.

The folder's test part is held out by the seed (as ``train --dataset
folder`` holds it out), and ``keras-gresnet evaluate RUN`` tests on it
again.
"""

import os
import sys
import time
from pathlib import Path

from keras_gresnet import finetune
from keras_gresnet._checks import check_seed
from keras_gresnet.data import FOLDER
from keras_gresnet.files import interrupt_kept
from keras_gresnet.layers import ZooModel
from keras_gresnet.training import runs
from keras_gresnet.training.config import inference_copy, recorded_command, _versions
from keras_gresnet.training.runner import _results

RECIPE = "finetune"  # the config's recipe name: finetune()'s two phases


def finetune_run(source, *, data_dir, out, seed=0, overwrite=False, head_epochs=5,
                 full_epochs=None, head_lr=1e-2, full_lr=None, optimizer="adam",
                 batch_size=32, schedule="cosine", verbose="auto"):
    """Fine-tune ``source`` (anything :func:`keras_gresnet.zoo.resolve`
    takes; an exported artefact is refused) on the picture folder
    ``data_dir`` (one subfolder per class) into the run folder ``out``;
    returns a :class:`keras_gresnet.training.Run`.

    The phases and their arguments are :func:`~keras_gresnet.finetune.finetune`'s
    (``seed`` an integer: the run is repeatable to the bit on one machine).
    A new or empty ``out`` gets a new run, an unfinished run of the same
    arguments resumes, a finished one is refused unless ``overwrite``;
    every argument and the folder are checked before the first write."""
    seed = check_seed(seed, "seed")
    finetune.refuse_artefact(source, "source")
    if not isinstance(out, (str, os.PathLike)) or not str(out).strip():
        raise ValueError(f"out={out!r}: give a folder for the run")
    if not isinstance(data_dir, (str, os.PathLike)) or not Path(data_dir).is_dir():
        raise ValueError(f"data_dir={str(data_dir)!r}: no such folder; give a folder of "
                         f"pictures with one subfolder per class")
    out = Path(out)
    plan = finetune.prepare(
        source, data_dir, classes=None, head_epochs=head_epochs, full_epochs=full_epochs,
        head_lr=head_lr, full_lr=full_lr, optimizer=optimizer, batch_size=batch_size,
        schedule=schedule, seed=seed)
    net = plan.net
    config = dict(
        command=recorded_command(sys.argv), versions=_versions(),
        model=net.builder or net.name, source=plan.resolved.source, dataset=FOLDER,
        data_dir=str(data_dir), seed=seed, strategy="default",
        recipe=dict(name=RECIPE, head_epochs=plan.head_epochs, full_epochs=plan.full_epochs,
                    head_lr=plan.head_lr, full_lr=plan.full_lr, optimizer=optimizer,
                    batch_size=plan.batch_size, schedule=plan.schedule,
                    epochs=plan.head_epochs + plan.full_epochs),
        max_train_examples=None, max_test_examples=None)
    resumed = runs.check_folder(out, config, overwrite)  # touches nothing
    test_x, test_y = plan.validation_data
    config.update(
        model_kwargs=net.builder_kwargs if isinstance(net, ZooModel) else {},
        data=dict(name=FOLDER, class_names=plan.class_names, seed=seed,
                  image_shape=list(plan.resolved.model.input_shape[1:]),
                  preprocessing=net.card.get("preprocessing"), batch_size=plan.batch_size,
                  num_train=len(plan.y), num_test=len(test_y)))

    def test():
        return net.evaluate(test_x, test_y, batch_size=plan.batch_size, verbose=0,
                            return_dict=True)

    backup = runs.EpochBackup(out / runs.BACKUP)
    logger = runs.RunLogger(out, test=test, resume=resumed)
    backup.diverged = lambda: logger.diverged
    done = backup.checkpoints()[-1][0] if resumed and backup.checkpoints() else 0
    epochs = plan.head_epochs + plan.full_epochs
    if done > epochs:
        raise ValueError(f"{backup.folder}: its newest checkpoint counts {done} finished epochs, "
                         f"more than the run's {epochs}; it is not this run's: remove it, or "
                         f"fine-tune again with --overwrite")
    # every argument and every file read has proved good: the folder changes now
    lock = runs.prepare_folder(out, config, overwrite=overwrite, resumed=resumed)
    with interrupt_kept() as interrupt:  # a swallowed Ctrl-C raised again (runner._train)
        try:
            start = time.perf_counter()
            callbacks = [logger, backup, runs.RaiseInterrupt(interrupt)]
            net, _ = finetune.train_phases(plan, verbose=verbose, callbacks=callbacks,
                                           restore=(backup.restore, done), validate=False)
            seconds = time.perf_counter() - start
            if logger.diverged:
                from keras_gresnet.training import TrainingDiverged

                raise TrainingDiverged(
                    f"fine-tuning {plan.resolved.source} on {data_dir}: {logger.diverged}; "
                    f"lower --head-lr / --full-lr, or try another seed. History so far: "
                    f"{out / runs.HISTORY}")
            # compiled as Keras' own classifiers are (train_phases): the final metrics
            results = _results(test(), net, logger.history, done, seconds)
            copy = inference_copy(net)
            card = dict(copy.card, dataset=FOLDER,
                        test_error_percent=round(results["test_error_percent"], 4))
            copy.remember(copy.builder, copy.builder_kwargs, card)
            interrupt.check()
            runs.finish(out, copy, results, logger.gates, FOLDER)
        finally:
            lock.release()
    from keras_gresnet.training import Run

    return Run(out=out, config=config, model=net, history=logger.history, results=results)
