"""A full disk (or any failed write) ends a run in one line and loses nothing complete: the path,
the bytes needed and free, which checkpoint is intact and how to resume; no half-written JSON line,
no half-written checkpoint folder. End to end on a real 60 MB tmpfs where the test may mount one."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.errors import WriteFailed
from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.trainer.loggers import JsonlLogger
from pettingllms.trainer.stopping import EXIT_IO_ERROR
from pettingllms.utils import diskio

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


class FillingWorker:
    """Writes `before` bytes of its checkpoint, then the disk is full (ENOSPC, as the OS says it)."""

    def __init__(self, before: int) -> None:
        self.before = before

    def save(self, folder: str) -> None:
        Path(folder).mkdir(parents=True)
        (Path(folder) / "weights.bin").write_bytes(b"\0" * self.before)
        if self.before > 1000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(folder) / "optimizer.pt"))


def test_a_checkpoint_that_fails_part_way_is_removed_and_named(tmp_path):
    ckpt_io.save_checkpoint(tmp_path, 1, {"p": FillingWorker(10)}, {"data": {}})
    with pytest.raises(WriteFailed) as info:
        ckpt_io.save_checkpoint(tmp_path, 2, {"p": FillingWorker(5000)}, {"data": {}})
    msg = str(info.value)
    assert msg.startswith(f"could not write {ckpt_io.checkpoint_dir(tmp_path, 2)}.tmp: No space left on device")
    assert "optimizer.pt" in msg and "MB free" in msg and "needs about 0.0 MB" in msg  # step 1's size
    assert "\n" not in msg
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_000001"]
    assert ckpt_io.latest_checkpoint(tmp_path) == ckpt_io.checkpoint_dir(tmp_path, 1)


def test_the_first_checkpoint_is_estimated_from_the_parameters(tmp_path):
    from trainer_fixtures import RandomTokenEngine, trainer_cfg

    from pettingllms.trainer.local import LocalTrainer

    trainer = LocalTrainer(trainer_cfg(tmp_path, "trainer.run_name=e", "trainer.total_steps=1"),
                           engine=RandomTokenEngine())
    try:
        estimate, basis = ckpt_io.checkpoint_bytes(trainer.run_dir, trainer.workers)
        assert basis.startswith("an estimate")
        trainer.fit()
    finally:
        trainer.close()
    actual, basis = ckpt_io.checkpoint_bytes(trainer.run_dir, trainer.workers)
    assert basis == "the size of step_000001"
    assert 0.8 * actual < estimate < 1.2 * actual, (estimate, actual)


def test_a_metrics_line_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    sink = JsonlLogger(path, [{"step": 1, "reward/mean": 0.5}])
    real_write = os.write

    def write_half_then_full(fd, data):  # the disk fills in the middle of the line
        if len(data) > 4:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(diskio.os, "write", write_half_then_full)
    with pytest.raises(WriteFailed, match=f"could not write {path}: No space left on device"):
        sink.log({"step": 2, "reward/mean": 0.25, "text": "x" * 64})
    monkeypatch.undo()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1]
    sink.log({"step": 2})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]


def test_torch_and_safetensors_wordings_of_a_full_disk_count_as_failed_writes():
    # what torch.save and safetensors raised on a full tmpfs (issue 36), not OSErrors
    for e in (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 15423872 vs 15423760"),
              Exception("Error while serializing: I/O error: No space left on device (os error 28)")):
        assert diskio.is_write_error(e)
        assert str(diskio.as_write_failed("/x/y", e)).startswith("could not write /x/y: the write failed part way")
    assert not diskio.is_write_error(RuntimeError("shape mismatch"))


def _can_mount_tmpfs(tmp_path: Path) -> str:
    """'' if this test may mount a tmpfs in its own mount namespace, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = tmp_path / "probe"
    probe.mkdir()
    r = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
                       capture_output=True, text=True)
    return "" if r.returncode == 0 else f"may not mount a tmpfs here: {r.stderr.strip()[:200]}"


def test_disk_full_end_to_end_on_a_small_tmpfs(tmp_path):
    why = _can_mount_tmpfs(tmp_path)
    if why:
        pytest.skip(why)
    data = tmp_path / "data"
    subprocess.run([sys.executable, "scripts/dataprocess/load_math.py", "--offline", "--preset", "math_easy",
                    "--out", str(data / "math_easy")], cwd=ROOT, env=ENV, check=True, capture_output=True)
    out, copy = tmp_path / "out", tmp_path / "copy"
    out.mkdir()
    train = [sys.executable, "-m", "pettingllms.train", "--config-name", "tiny_test", "env.data=math_easy",
             f"env.data_root={data}", f"trainer.output_dir={out}", "trainer.total_steps=3", "trainer.run_name=r",
             "trainer.checkpoint.save_freq=1"]
    q = " ".join(f"'{a}'" for a in train)
    # 60 MB holds one checkpoint of the tiny model (42 MB) but not two; then the disk grows and
    # the same command with resume=auto goes on (the tmpfs lives as long as this shell)
    script = (f"mount -t tmpfs -o size=60m tmpfs {out} || exit 99; {q}; echo RC1=$?; "
              f"mount -o remount,size=400m tmpfs {out}; cp -a {out}/tiny_test/r {copy}; "
              f"{q} trainer.checkpoint.resume=auto; echo RC2=$?; cp -a {out}/tiny_test/r {copy}-resumed")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=600)
    output = r.stdout + r.stderr
    assert f"RC1={EXIT_IO_ERROR}" in output and "RC2=0" in output, output[-4000:]
    run = out / "tiny_test" / "r"
    lines = [ln for ln in output.splitlines() if "could not write" in ln]
    assert len(lines) == 1, output[-4000:]
    line = lines[0]
    assert f"could not write {run}/checkpoints/step_000002.tmp: not enough free space" in line
    assert "needs about" in line and "MB free" in line
    assert f"checkpoint {run}/checkpoints/step_000001 is intact" in line
    assert line.endswith("free space, then run the same command with trainer.checkpoint.resume=auto to go on")
    assert "Traceback" not in output.split("RC1=")[0]
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == ["step_000001"]
    assert [json.loads(x)["step"] for x in (copy / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    resumed = copy.with_name("copy-resumed")
    assert [json.loads(x)["step"] for x in (resumed / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
