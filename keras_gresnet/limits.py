"""Every size bound on what this package reads from a file or a folder it was
handed, in one place. Each bound is checked before the bytes are read (or
inflated), and each refusal is one ``ValueError`` naming the file and the
bound. The figures follow from what this package writes, with room to spare:

- a model's weights: at most :data:`keras_gresnet.zoo.applications.MAX_PARAMS`
  (2e9) float32 parameters, so 8 GB, plus the container's own bytes;
- the JSON of a model (a ``.keras`` file's ``config.json``): ResNet-1001's,
  the largest zoo model's, is 3.5 MB;
- the JSON of a run, a preset, a card: kilobytes (a history of 10,000 epochs
  is about 2 MB);
- an exported artefact's contract: a few kB (1,000 class names of 100
  characters are 100 kB).

Keras-free and import-free: every layer of the package may import it.
"""

MIB = 2**20

# -- JSON and text ---------------------------------------------------------
# A JSON or CSV file of a run, preset or card (files.read_json, read_bounded).
MAX_TEXT_BYTES = 64 * MIB
# A .keras file's config.json / metadata.json, and a run's config.json.
MAX_CONFIG_BYTES = 64 * MIB
# An exported artefact's contract: a SavedModel's assets.extra JSON, each
# value of an ONNX file's metadata_props, a LiteRT metadata entry.
MAX_CONTRACT_BYTES = 1 * MIB
# A run folder's lock file: one short JSON line.
MAX_LOCK_BYTES = 4096
# The JSON files of a preset downloaded from a hub.
MAX_HUB_JSON_BYTES = 1 * MIB

# -- weights -----------------------------------------------------------------
# A weights file (a preset's model.weights.h5, a .keras file's weights
# member): 2e9 float32 parameters (zoo.applications.MAX_PARAMS) and 1 MiB of
# HDF5's own bytes.
MAX_WEIGHTS_BYTES = 8 * 10**9 + MIB
# An HDF5 weights file's datasets may declare at most this many times the
# file's bytes (Keras writes them uncompressed: more is a compressed bomb),
# or 1 MiB, whichever is more.
MAX_H5_INFLATION = 4
MIN_H5_DECLARED = MIB

# -- archives (.keras files are zip archives) --------------------------------
# The bound of each member of a .keras archive, by name; any other member
# (Keras' assets) is held to MAX_OTHER_MEMBER_BYTES.
KERAS_MEMBER_BYTES = {
    "config.json": MAX_CONFIG_BYTES,
    "metadata.json": MAX_CONFIG_BYTES,
    "model.weights.h5": MAX_WEIGHTS_BYTES,
}
MAX_OTHER_MEMBER_BYTES = 64 * MIB
MAX_ARCHIVE_MEMBERS = 64
# A member other than the JSON ones may inflate to at most this many times
# its compressed bytes (once it declares more than MIN_INFLATION_CHECKED):
# Keras stores the weights member uncompressed (ratio 1.0 in every published
# file), and float32 weights, trained or freshly initialised, are close to
# incompressible (deflate gets about 1.1:1 on them), so even a user's
# re-zipped file stays far below 4:1; a bomb is far above it (the probe's
# was 18:1; Keras 3.15's own check stops only at 100:1, older Keras never).
# The JSON members are held to their size bound alone (JSON deflates 10:1).
MAX_INFLATION = 4
MIN_INFLATION_CHECKED = MIB

# -- exported artefacts ------------------------------------------------------
# A flatbuffer's offsets are 32-bit: no LiteRT file is larger.
MAX_LITERT_BYTES = 2**31
# Protocol buffers hold at most 2 GiB: an ONNX file (weights inside, as this
# package writes them) and a SavedModel's saved_model.pb.
MAX_ONNX_BYTES = 2**31
MAX_SAVED_MODEL_PB_BYTES = 2**31
# An ONNX file's external data (this package writes none) may not exceed the
# weights' bound.
MAX_ONNX_EXTERNAL_BYTES = MAX_WEIGHTS_BYTES

# -- data ----------------------------------------------------------------------
# The most memory one picture may take decoded (its declared width x height x
# bands x bytes per band), checked before it is decoded.
MAX_DECODED_BYTES = 2**30
# The most memory a folder's decoded pictures may take together (uint8).
MAX_FOLDER_BYTES = 4 * 2**30
# An IDX file (MNIST's format): 128 MiB (MNIST's training images are 47 MB).
IDX_MAX_BYTES = 2**27
