"""Processes under a pid, read from /proc (Linux; empty elsewhere): what a stop kills, what the
soak benchmark counts and what tests check is gone."""
from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Child processes (recursively), parents before their children."""
    children: dict[int, list[int]] = {}
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    except OSError:
        return []
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """Running (a zombie is dead: it only waits for its parent to read its exit status)."""
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0]
    except (OSError, IndexError):
        return False
