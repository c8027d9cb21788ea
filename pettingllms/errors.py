"""Errors meant to be read by a person. A leaf module: anything may import it."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config problem, with a message meant to be read by a person (the CLI prints it in one
    line and exits 2, before any model or data loads)."""
