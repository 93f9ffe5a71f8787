"""Where this package keeps files of its own: Keras' home folder."""

import os
from pathlib import Path


def keras_home():
    """Keras' own convention: ``$KERAS_HOME``, else ``~/.keras`` (``/tmp/.keras``
    where the home folder is not writable)."""
    if "KERAS_HOME" in os.environ:
        return Path(os.environ["KERAS_HOME"]).expanduser()
    home = Path("~").expanduser()
    return (home if os.access(home, os.W_OK) else Path("/tmp")) / ".keras"


def datasets_folder():
    """``{keras_home}/datasets``, where Keras' own datasets are cached too."""
    return keras_home() / "datasets"
