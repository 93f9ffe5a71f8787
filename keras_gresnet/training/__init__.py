"""Train any zoo model with its paper's recipe, on one device or many, into a
run folder; read and test finished runs.

:func:`train` resolves a full config (model, builder arguments, dataset,
recipe with overrides, seed, strategy), builds the model under the
``tf.distribute`` strategy, trains it and leaves a run folder behind
(:mod:`~keras_gresnet.training.runs` describes its files). Running the same
command again on an unfinished run folder resumes after the last finished
epoch.

Modules: :mod:`~keras_gresnet.training.recipes` (the papers' recipes),
:mod:`~keras_gresnet.training.regularization` (their weight decay on a model),
:mod:`~keras_gresnet.training.config` (the run's config and model),
:mod:`~keras_gresnet.training.cluster` (a multi-worker run's cluster),
:mod:`~keras_gresnet.training.backends` (one module per Keras backend: its
strategies, loops, BatchNorm-sync policy and export formats),
:mod:`~keras_gresnet.training.runs` (the run folder),
:mod:`~keras_gresnet.training.loop` (the training loop; ``model.fit`` in
one process),
:mod:`~keras_gresnet.training.tensorboard` (a run's TensorBoard logs),
:mod:`~keras_gresnet.training.evaluation` (testing a run),
:mod:`~keras_gresnet.training.runner` (:func:`train`).
"""

from keras_gresnet._options import RunOptions
from keras_gresnet.training.config import (
    DTYPE_POLICIES, build_model, default_dataset,
    default_recipe, dtype_policy_scope, inference_copy, precision_note, resolve_config,
)
from keras_gresnet.training.evaluation import evaluate, fitted_pixels, test_data, test_set
from keras_gresnet.training.recipes import RECIPES, Recipe, get_recipe
from keras_gresnet.training.runner import Run, TrainingDiverged, train
from keras_gresnet.training.runs import (
    BACKUP, RUN_FILES, EpochBackup, RunLogger, gate_rows, load_run, read_gates,
    read_history, read_results, run_folder, write_results,
)
from keras_gresnet.training.backends import STRATEGIES, make_strategy
from keras_gresnet.training.cluster import (
    Cluster, WorkerLost, local_workers, parse_workers, resolve_cluster,
)
from keras_gresnet.training.tensorboard import TENSORBOARD, RunTensorBoard, check_tensorboard

__all__ = [
    "BACKUP", "Cluster", "DTYPE_POLICIES",
    "EpochBackup", "RECIPES", "RUN_FILES", "Recipe", "Run", "RunLogger", "RunOptions", "RunTensorBoard",
    "STRATEGIES", "TENSORBOARD", "TrainingDiverged", "WorkerLost", "build_model",
    "check_tensorboard", "default_dataset", "default_recipe", "dtype_policy_scope",
    "evaluate", "gate_rows", "get_recipe", "inference_copy", "load_run", "local_workers",
    "make_strategy", "parse_workers", "precision_note", "read_gates", "read_history", "read_results",
    "resolve_cluster", "resolve_config", "run_folder", "test_data", "test_set", "fitted_pixels",
    "train",
    "write_results",
]
