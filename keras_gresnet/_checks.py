"""Argument checks shared by every module: each raises ``ValueError`` naming
the argument and what would be accepted."""

import numbers

# data.Preprocessing's methods (here, so that reading the weights registry
# imports no TensorFlow).
PREPROCESSINGS = ("scale", "mean", "meanstd")


def check_choice(value, argument, choices):
    """``value`` must be one of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"Unknown {argument}={value!r}; accepted: {', '.join(map(repr, choices))}"
        )
    return value


def check_int(value, argument, minimum, maximum=None):
    """``value`` must be an integer (not a bool) ``>= minimum`` (and
    ``<= maximum`` where given); returns an int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum \
            or (maximum is not None and value > maximum):
        accepted = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{argument} must be an integer {accepted}, got {value!r}")
    return int(value)


def check_rate(value, argument):
    """``value`` must be a number in [0, 1); returns a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"{argument} must be a number in [0, 1), got {value!r}")
    return float(value)
