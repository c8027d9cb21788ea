"""Writes that fail in one line: free space, whole JSON lines, and what counts as a write error.

A disk that fills up shows as an OSError (ENOSPC, EDQUOT, EIO...) from Python's own writes, but
torch.save reports it as a RuntimeError from its zip writer ("unexpected pos", "file write
failed") and safetensors as a SafetensorError ("I/O error: No space left on device");
`as_write_failed` turns any of them into `WriteFailed` naming the path and the space.
Whole files (results, dataset splits) go through `write_atomic`: all of it, or the old file (or
none) and a WriteFailed.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from pettingllms.errors import WriteFailed

_WRITE_ERRORS = ("unexpected pos", "file write failed", "PytorchStreamWriter", "inline_container",  # torch.save
                 "No space left on device", "Disk quota exceeded", "Read-only file system", "I/O error")


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the filesystem that holds `path` (its nearest existing folder)."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def folder_bytes(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def is_write_error(e: BaseException) -> bool:
    """An error a failed write shows as (OSError, or torch's / safetensors' own wording of one)."""
    return isinstance(e, OSError) or any(s in str(e) for s in _WRITE_ERRORS)


def as_write_failed(path: str | Path, e: BaseException, needed: int | None = None) -> WriteFailed:
    if isinstance(e, WriteFailed):
        return e
    if isinstance(e, OSError):
        reason = e.strerror or str(e) or type(e).__name__
        if e.filename and str(e.filename) != str(path):
            reason += f" ({e.filename})"
    else:  # torch's zip writer or safetensors: the space ran out (or the device failed) under it
        reason = "the write failed part way (" + (str(e).strip().splitlines() or [type(e).__name__])[0][:120] + ")"
    return WriteFailed(path, reason, needed, free_bytes(path))


def append_line(path: str | Path, line: str) -> None:
    """Append one line whole or not at all: a failed write is cut back off the file."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, data)
        except OSError as e:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise as_write_failed(path, e, len(data)) from None
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write a whole file or nothing: into a hidden file beside it, then renamed over it. A failed
    write removes the partial file, keeps what `path` held before and raises WriteFailed with the
    bytes needed."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, raw)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise as_write_failed(path, e, len(raw)) from None


def write_parquet(frame: Any, path: str | Path) -> None:
    """A pandas DataFrame as a parquet file, whole or not at all (built in memory first, so the
    bytes needed are known; dataset splits are megabytes)."""
    import io

    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    write_atomic(path, buf.getvalue())
