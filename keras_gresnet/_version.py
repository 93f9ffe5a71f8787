"""The package version, in one place (the root package, the command line,
presets and Hub cards read it from here)."""

__version__ = "0.1.0"
