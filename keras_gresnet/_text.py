"""Text that reaches the terminal from outside the program, made safe to
print: a name from a file or a folder (a class name, a path, a card's or a
contract's field) with its control characters escaped (:func:`printable`),
and a user's value echoed in an error message, shortened (:func:`shown`).
Imports nothing, so that every module, the command line's Keras-free
checks included, prints through it.
"""

# The most characters of one value an error message echoes.
LONGEST_ECHO = 100


def printable(text):
    """A path or name as printed: control characters and other
    unprintable ones escaped (a class folder named with an escape sequence
    cannot move the user's cursor, a newline cannot forge a second line)."""
    text = str(text)
    return text if text.isprintable() else repr(text)[1:-1]


def shortened(text, limit=LONGEST_ECHO):
    """``text`` whole up to ``limit`` characters, else its first ``limit``
    then `` ... (N characters)`` (its whole length)."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]} ... ({len(text)} characters)"


def shown(value):
    """``value`` as an error message echoes it: its ``repr`` (quoted,
    control characters escaped), :func:`shortened`; an integer past the
    4,300 digits Python writes in decimal, in hexadecimal."""
    try:
        text = repr(value)
    except ValueError:  # int's str() limit (a --units 0xfff... of 5,000 digits)
        text = hex(value) if isinstance(value, int) else f"<a {type(value).__name__}>"
    return shortened(text)
