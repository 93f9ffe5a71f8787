"""Argument checks shared by every module: each raises a one-line ``ValueError``
naming the argument and what would be accepted.

Two message styles: ``{argument} must be ..., got {value!r}`` for a function's
arguments, and ``{argument}={value!r}: expected ...`` (:func:`fail`) for the
fields of a record such as a training recipe; the value echoed through
:func:`keras_gresnet._text.shown` (a 100,000-character one is not echoed whole).
"""

import difflib
import math
import numbers
import os

from keras_gresnet._text import shown

# data.Preprocessing's methods (here, so that reading the weights registry
# imports no TensorFlow).
PREPROCESSINGS = ("scale", "mean", "meanstd")
# Counts (epochs, steps, batch size) far past any run, but within what
# TensorFlow's int64 step counters and tf.data ranges take.
MAX_COUNT = 2**31 - 1
# Seeds: what NumPy's generators and TensorFlow's (a signed 32-bit integer) take.
MAX_SEED = 2**31 - 1


def did_you_mean(value, choices, spell=str):
    """``" (did you mean X or Y?)"`` for the choices close to ``value`` (a
    typo), else ``""``; ``spell`` writes a choice as the user types it."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, list(choices), n=2, cutoff=0.6)
    close += [c for c in choices if value in c and c not in close][:3 - len(close)]
    return f" (did you mean {' or '.join(spell(c) for c in close)}?)" if close else ""


def is_real(value):
    """Whether ``value`` is a plain ``int`` or ``float`` (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- "{argument} must be ..., got {value!r}" ---------------------------------


def check_choice(value, argument, choices):
    """``value`` must be one of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"Unknown {argument}={shown(value)}; accepted: {', '.join(map(repr, choices))}"
        )
    return value


def check_int(value, argument, minimum, maximum=None):
    """``value`` must be an integer (not a bool) ``>= minimum`` (and
    ``<= maximum`` where given); returns an int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum \
            or (maximum is not None and value > maximum):
        accepted = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{argument} must be an integer {accepted}, got {shown(value)}")
    return int(value)


def check_seed(value, argument):
    """``value`` must be a seed: an integer (not a bool) in ``[0, MAX_SEED]``;
    returns an int."""
    return check_int(value, argument, 0, MAX_SEED)


def check_rate(value, argument):
    """``value`` must be a number in [0, 1); returns a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"{argument} must be a number in [0, 1), got {shown(value)}")
    return float(value)


def check_positive(value, argument):
    """``value`` must be a finite number (not a bool) ``> 0``; returns a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0 \
            or not math.isfinite(value):
        raise ValueError(f"{argument} must be a finite number > 0, got {shown(value)}")
    return float(value)


def check_optional_text(value, argument):
    """``value`` must be a string or ``None``."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{argument} must be a string or None, got {shown(value)}")
    return value


def check_mapping(value, argument):
    """``value`` must be a non-empty dict."""
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{argument} must be a non-empty dict, got {shown(value)}")
    return value


def check_png_path(path, argument="path"):
    """``path`` must name a ``.png`` file in an existing folder; returns it as a string."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).lower().endswith(".png"):
        raise ValueError(f"{argument} must be a .png file path, got {shown(path)}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{argument} {shown(os.fspath(path))}: folder {folder} does not exist")
    return os.fspath(path)


def check_series(x, y, argument, x_name="x", y_name="y"):
    """``x`` and ``y`` must be equally long, non-empty sequences of numbers;
    returns them as float lists."""
    try:
        x, y = [float(v) for v in x], [float(v) for v in y]
    except (TypeError, ValueError):
        raise ValueError(
            f"{argument}: {x_name} and {y_name} must be sequences of numbers"
        ) from None
    if not x or len(x) != len(y):
        raise ValueError(
            f"{argument}: {x_name} and {y_name} must be non-empty and equally long, "
            f"got {len(x)} and {len(y)}"
        )
    return x, y


# -- "{argument}={value!r}: expected ..." ------------------------------------


def fail(argument, value, expected):
    """Raise ``ValueError("{argument}={value!r}: expected {expected}")``
    (the value :func:`~keras_gresnet._text.shown`)."""
    raise ValueError(f"{argument}={shown(value)}: expected {expected}")


def check_listed(value, argument, choices):
    """``value`` must be one of ``choices``."""
    if value not in choices:
        fail(argument, value, f"one of {', '.join(map(repr, choices))}")
    return value


def check_number(value, argument, low=None, high=None):
    """``value`` must be a finite ``int`` or ``float``, ``> low`` (``>= 0``
    when ``low`` is ``None``) and ``< high`` where given."""
    if not is_real(value) or not math.isfinite(value):
        fail(argument, value, "a number (finite)")
    if (value <= low if low is not None else value < 0) or (high is not None and value >= high):
        lower = f"> {low}" if low is not None else ">= 0"
        fail(argument, value, f"a number {lower}" + (f" and < {high}" if high is not None else ""))
    return value


def check_count(value, argument, minimum):
    """``value`` must be an ``int`` (not a bool) in ``[minimum, MAX_COUNT]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
        fail(argument, value, f"an integer >= {minimum} (and <= {MAX_COUNT})")
    return value
