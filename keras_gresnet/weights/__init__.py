"""Published weights: the registry (package data, in every wheel), the cache
and sha256-verified downloads, and the checks that weights fit a builder's
call.

    from keras_gresnet import weights
    weights.list_weights("*mnist*")            # registry entries (dicts)
    weights.weights_path("gresnet_mlp20_mnist")  # the verified local file

A zoo builder's ``weights=`` goes through here; the builders call the fit
check first and load the file as their last step
(:mod:`keras_gresnet.weights.loading`, which alone imports Keras and h5py:
listing and downloading work without them).

Modules: :mod:`~keras_gresnet.weights.registry` (the table),
:mod:`~keras_gresnet.weights.download` (cache and downloads),
:mod:`~keras_gresnet.weights.adapt` (weights at another input: timm's
``adapt_input_conv``),
:mod:`~keras_gresnet.weights.arguments` (``weights=`` checks),
:mod:`~keras_gresnet.weights.loading` (into a built model),
:mod:`~keras_gresnet.weights.release` (a mirror folder of the files).
"""

from keras_gresnet.weights.download import (
    CACHE_SUBDIR,
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT,
    TIMEOUT_ENV,
    URL_ENV,
    base_url,
    cache_folder,
    sha256_of,
    verify_cache,
    weights_path,
)
from keras_gresnet.weights.arguments import (
    PRESET_CONFIG,
    PRESET_METADATA,
    PRESET_WEIGHTS,
    check_argument,
    check_fits,
    source_kind,
    resolve,
)
from keras_gresnet.weights.release import MANIFEST, write_release
from keras_gresnet.weights.registry import (
    CARD_FIELDS,
    FIELDS,
    FILE_FIELDS,
    NOT_TRAINED,
    PUBLISHED,
    RECIPE_OPTIONS,
    STATUSES,
    SUFFIXES,
    VARIANTS,
    WeightsError,
    data_config,
    get_weights,
    list_weights,
    model_card,
    published,
    write_registry,
)

__all__ = [
    "CACHE_SUBDIR", "CARD_FIELDS", "DEFAULT_BASE_URL", "DEFAULT_TIMEOUT", "FIELDS", "FILE_FIELDS", "MANIFEST",
    "NOT_TRAINED", "PRESET_CONFIG", "PRESET_METADATA", "PRESET_WEIGHTS", "PUBLISHED",
    "RECIPE_OPTIONS", "STATUSES", "SUFFIXES", "TIMEOUT_ENV", "URL_ENV", "VARIANTS", "WeightsError", "base_url",
    "cache_folder", "check_argument", "check_fits", "data_config", "get_weights",
    "list_weights", "model_card", "published", "resolve", "sha256_of", "source_kind", "verify_cache", "weights_path",
    "write_registry", "write_release",
]
