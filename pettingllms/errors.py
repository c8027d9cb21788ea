"""Errors meant to be read by a person. A leaf module: anything may import it."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config problem, with a message meant to be read by a person (the CLI prints it in one
    line and exits 2, before any model or data loads)."""


class WriteFailed(OSError):
    """A write the run could not make (disk full, quota, read-only, I/O error), for one line: the
    path, why, and the bytes needed and free where known (pettingllms.utils.diskio builds it)."""

    def __init__(self, path: object, reason: str, needed: int | None = None, free: int | None = None) -> None:
        super().__init__(reason)
        self.path, self.reason, self.needed, self.free = path, reason, needed, free

    def __str__(self) -> str:
        sizes = [f"needs about {self.needed / 1e6:.1f} MB" if self.needed is not None else "",
                 f"{self.free / 1e6:.1f} MB free" if self.free is not None else ""]
        shown = ", ".join(s for s in sizes if s)
        return f"could not write {self.path}: {self.reason}" + (f" ({shown})" if shown else "")
