"""A run folder's ``config.json`` as its readers rely on it: the types of
its values checked, one line naming the file otherwise.
:mod:`keras_gresnet.training.runs` writes it; the resolver and the run's
own resume read it with :func:`read_run_config`."""

from keras_gresnet.files import read_json
from keras_gresnet.layers.inputs import pixel_statistics

# The types of a run config's values that reading a run relies on.
RUN_CONFIG_TYPES = (
    ("model", lambda v: isinstance(v, str) and v != "", "a model name"),
    ("dataset", lambda v: isinstance(v, str) and v != "", "a dataset name"),
    ("model_kwargs", lambda v: isinstance(v, dict), "a mapping of builder arguments"),
    ("seed", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
     "an integer >= 0"),
    ("data_dir", lambda v: v is None or isinstance(v, str), "null or a folder"),
    ("max_train_examples", lambda v: v is None or (isinstance(v, int) and not isinstance(
        v, bool) and v >= 1), "null or an integer >= 1"),
    ("max_test_examples", lambda v: v is None or (isinstance(v, int) and not isinstance(
        v, bool) and v >= 1), "null or an integer >= 1"),
    ("data", lambda v: isinstance(v, dict), "an object"),
)


def read_run_config(path):
    """A run folder's ``config.json``, the values a reader relies on checked
    (:data:`RUN_CONFIG_TYPES`; ``model`` and ``dataset`` required; a
    ``data.preprocessing`` the pipeline's ``{method, mean, std}``); one
    ``ValueError`` naming the file otherwise."""
    config = read_json(path)
    missing = [k for k in ("model", "dataset") if k not in config]
    if missing:
        raise ValueError(f"{path} is not a keras-gresnet run config (it lacks {missing}); "
                         f"this folder is not a run folder")
    for key, kind, accepted in RUN_CONFIG_TYPES:
        value = config.get(key)
        if key in config and not kind(value):
            raise ValueError(f"{path}: {key}={value!r} is not {accepted}; this config was "
                             f"not written by keras-gresnet (or was edited)")
    statistics = (config.get("data") or {}).get("preprocessing")
    if statistics is not None:
        try:
            pixel_statistics(statistics["method"], statistics.get("mean"), statistics.get("std"))
        except (TypeError, KeyError, AttributeError, ValueError) as error:
            raise ValueError(f"{path}: data.preprocessing {statistics!r} is not the pipeline's "
                             f"{{method, mean, std}} ({error})") from None
    return config
