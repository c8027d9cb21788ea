"""Evaluation results and dataset builders on a full disk end like the trainer's writes: one line
naming the path and the bytes needed and free, and a file that is whole or absent (never a
half-written JSON or parquet; a file that was there before is kept)."""
from __future__ import annotations

import errno
import json
import os
import sys
import types
from pathlib import Path

import pytest

from pettingllms.errors import WriteFailed
from pettingllms.trainer.stopping import EXIT_IO_ERROR
from pettingllms.utils import diskio

REAL_WRITE = os.write


class FullDisk:
    """os.write that lets `room` bytes through to files under `root`, then fails as the kernel does
    when the disk fills (ENOSPC); writes elsewhere (pytest's own, pipes) pass untouched."""

    def __init__(self, root: Path, room: int = 0) -> None:
        self.root, self.room, self.refused = str(root), room, 0

    def __call__(self, fd: int, data) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(self.root):
            return REAL_WRITE(fd, data)
        if self.room <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = REAL_WRITE(fd, bytes(data[: self.room]))
        self.room -= n
        return n


def _one_line(msg: str, path: Path) -> None:
    assert msg.startswith(f"could not write {path}: No space left on device (needs about ")
    assert "MB free)" in msg and "\n" not in msg


def test_a_whole_file_write_fails_keeping_the_old_file_and_leaves_no_part(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text('{"old": 1}')
    disk = FullDisk(tmp_path, room=100)  # the new file gets 100 of its 5000 bytes, then the disk is full
    monkeypatch.setattr(os, "write", disk)
    with pytest.raises(WriteFailed) as info:
        diskio.write_atomic(path, json.dumps({"x": "y" * 5000}))
    _one_line(str(info.value), path)
    assert info.value.needed == len(json.dumps({"x": "y" * 5000})) and disk.refused == 1
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # the partial file is gone
    from pettingllms.records import write_jsonl

    with pytest.raises(WriteFailed):
        write_jsonl(tmp_path / "rows.jsonl", [{"i": i} for i in range(100)])
    assert not (tmp_path / "rows.jsonl").exists()


def test_a_dataset_builder_on_a_full_disk_says_one_line_and_writes_no_split(tmp_path, monkeypatch):
    from pettingllms.envs.eight_queens.data import build
    from pettingllms.envs.grid.splits import data_cli

    out = tmp_path / "eight_queens"
    monkeypatch.setattr(os, "write", FullDisk(tmp_path, room=300))
    with pytest.raises(SystemExit) as info:
        data_cli("eight_queens", build, ["--out", str(out), "--n-train", "2", "--n-test", "2"])
    msg = str(info.value.code)
    assert msg.startswith("load_eight_queens: ")
    _one_line(msg.removeprefix("load_eight_queens: "), out / "train.parquet")
    assert not list(out.glob("*.parquet")) and not list(out.glob(".*"))


def test_a_dataset_built_on_first_use_leaves_nothing_when_the_disk_fills(tmp_path, monkeypatch):
    """ensure_dataset builds into a temporary folder: a failed split write leaves no folder."""
    import pandas as pd

    from pettingllms.envs.dataset import ensure_dataset

    def build(out_dir, seed=0):
        Path(out_dir).mkdir(parents=True)
        for split in ("train", "test"):
            diskio.write_parquet(pd.DataFrame({"id": ["a", "b"], "q": ["1+1", "2+2"]}), Path(out_dir) / f"{split}.parquet")
        return {"rows": 2}

    monkeypatch.setitem(sys.modules, "full_disk_builder", types.SimpleNamespace(
        __name__="full_disk_builder", build=build, DATA_NAMES=("toy",)))
    monkeypatch.setattr(os, "write", FullDisk(tmp_path))
    with pytest.raises(WriteFailed) as info:
        ensure_dataset("toy", tmp_path, builder="full_disk_builder")
    assert str(info.value).startswith("could not write ") and "train.parquet: No space left" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_evaluate_on_a_full_disk_prints_the_table_then_one_line_and_exits_74(tmp_path, monkeypatch, capsys):
    from pettingllms import evaluate

    result = {"env": "math", "k": 1, "split": "test", "num_problems": 1, "checkpoint": "", "model": "tiny",
              "benchmarks": {"easy": {"problems": 1, "avg@1": 0.5, "pass@1": 1.0}},
              "overall": {"problems": 1, "avg@1": 0.5, "pass@1": 1.0}}
    monkeypatch.setattr(evaluate, "run_evaluation", lambda cfg: dict(result))
    monkeypatch.setattr(os, "write", FullDisk(tmp_path / "ev"))
    with pytest.raises(SystemExit) as info:
        evaluate.main(["--config-name", "tiny_test", "model=tiny", "eval.k=1", f"trainer.output_dir={tmp_path}",
                       f"hydra.run.dir={tmp_path}/ev"])
    assert info.value.code == EXIT_IO_ERROR
    out, err = capsys.readouterr()
    assert "easy" in out and "0.500" in out  # the numbers are on screen before the write
    line = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(line) == 1
    written = Path(line[0].removeprefix("error: could not write ").split(":")[0])
    assert written.parent == tmp_path / "ev" and written.suffix == ".json"
    _one_line(line[0].removeprefix("error: "), written)
    assert not list((tmp_path / "ev").glob("*.json")) and not list((tmp_path / "ev").glob(".*.part"))
