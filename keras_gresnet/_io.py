"""Atomic file writing: a file appears complete or not at all."""

import contextlib
import json
import os
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path`` (same folder, same suffixes,
    e.g. ``.weights.h5``, so Keras and matplotlib accept it); on success it
    replaces ``path`` in one ``os.replace``, on failure it is removed and
    ``path`` is left untouched."""
    path = Path(path)
    stem, dot, suffixes = path.name.partition(".")
    tmp = path.with_name(f".{stem}.tmp{os.getpid()}{dot}{suffixes}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path, text):
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n")  # insertion order: gates in network order


def write_csv(path, columns, rows):
    """``rows``: iterables in ``columns`` order; floats written in full."""
    lines = [",".join(columns)]
    lines += [",".join(_cell(v) for v in row) for row in rows]
    write_text(path, "\n".join(lines) + "\n")


def _cell(value):
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if any(c in text for c in ',"\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text
