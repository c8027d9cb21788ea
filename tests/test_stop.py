"""The stop path (trainer/stopping.py): a signal or Ctrl-C keeps the run's work.

Real training subprocesses on the tiny model get SIGTERM, SIGUSR1 or SIGINT mid-run: they write a
complete checkpoint of the last complete step, say so in one line without a traceback, exit
EXIT_STOPPED, and `trainer.checkpoint.resume=auto` finishes the run with every step once in
metrics.jsonl. In-process, a signal raised inside the rollout drops it exactly: the resumed run's
metrics equal an unstopped run's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pettingllms.cli.config_loading import load_config
from pettingllms.errors import ConfigError
from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.trainer.local import LocalTrainer
from pettingllms.trainer.stopping import EXIT_STOPPED, StopRequested, StopSignals
from pettingllms.utils.procs import descendants
from trainer_fixtures import RandomTokenEngine, comparable, trainer_cfg

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
STEPS = 30


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    subprocess.run([sys.executable, "scripts/dataprocess/load_math.py", "--offline", "--preset", "math_easy",
                    "--out", str(root / "math_easy")], cwd=ROOT, env=ENV, check=True, capture_output=True)
    return root


def train_args(data_root: Path, out: Path) -> list[str]:
    return ["--config-name", "tiny_test", "env.data=math_easy", f"env.data_root={data_root}",
            f"trainer.output_dir={out}", f"trainer.total_steps={STEPS}", "trainer.checkpoint.save_freq=0",
            "trainer.logging.save_trajectories=false"]


def train_cmd(data_root: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pettingllms.train", *train_args(data_root, out), "trainer.run_name=r", *extra]


def signal_after_two_steps(proc: subprocess.Popen, run: Path, sig: signal.Signals, children: list | None = None) -> str:
    """Send `sig` once step 2 is logged; the process's output. `children` gets its process tree then."""
    try:
        deadline = time.time() + 120
        while len(steps_logged(run)) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before the signal"
        if children is not None:
            children += descendants(proc.pid)
        os.kill(proc.pid, sig)
        return proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()


def steps_logged(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a terminal's foreground job has it


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_signal_stops_with_a_checkpoint_and_resume_finishes_the_run(tmp_path, data_root, sig):
    out, run = tmp_path / "out", tmp_path / "out" / "tiny_test" / "r"
    proc = subprocess.Popen(train_cmd(data_root, out), cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=_default_sigint)
    output = signal_after_two_steps(proc, run, sig)
    assert proc.returncode == EXIT_STOPPED, output[-3000:]
    assert "Traceback" not in output
    done = steps_logged(run)
    n = len(done)
    assert 2 <= n < STEPS and done == list(range(1, n + 1))
    ckpt = ckpt_io.checkpoint_dir(run, n)
    lines = [ln for ln in output.splitlines() if "stopped by" in ln]
    assert len(lines) == 1 and lines[0].endswith(
        f"stopped by {sig.name} after step {n}: checkpoint {ckpt}; "
        "run the same command with trainer.checkpoint.resume=auto to go on"), output[-2000:]
    assert ckpt_io.latest_checkpoint(run) == ckpt and ckpt_io.unreadable_file(ckpt) is None
    assert not list((run / "checkpoints").glob("*.tmp"))

    again = subprocess.run(train_cmd(data_root, out, "trainer.checkpoint.resume=auto"), cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming {run} from step {n}" in again.stdout + again.stderr
    assert steps_logged(run) == list(range(1, STEPS + 1))


def test_ray_backend_stops_with_a_checkpoint_and_leaves_no_process(tmp_path, data_root):
    """Ray's start installs its own SIGTERM handler (it aborts the driver): the trainer takes the
    signal back; Ray's processes (GCS, raylet, rollout workers) end with the run."""
    pytest.importorskip("ray")
    out, run = tmp_path / "out", tmp_path / "out" / "tiny_test" / "r"
    proc = subprocess.Popen(train_cmd(data_root, out, "trainer.backend=ray", "ray.num_rollout_workers=2"), cwd=ROOT,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    children: list[int] = []
    output = signal_after_two_steps(proc, run, signal.SIGTERM, children)
    assert proc.returncode == EXIT_STOPPED, output[-3000:]
    assert "Traceback" not in output and "stopped by SIGTERM after step" in output
    assert len(children) >= 3  # gcs_server, raylet, two workers...
    time.sleep(2)
    left = [pid for pid in children if Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)]
    assert not left, [Path(f"/proc/{pid}/cmdline").read_text()[:100] for pid in left]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0].lower()
    except (OSError, IndexError):
        return "zombie"


class SignalingEngine(RandomTokenEngine):
    """Sends this process `sig` from inside generate in step `at` (a rollout in flight)."""

    def __init__(self, sig: signal.Signals, at: int) -> None:
        super().__init__()
        self.sig, self.at, self.calls = sig, at, 0

    def generate(self, requests):
        self.calls += 1
        if self.calls == 2 * self.at - 1:  # two agents, one turn: the step's first call
            os.kill(os.getpid(), self.sig)
            time.sleep(1)  # the handler raises before this returns
        return super().generate(requests)


def _trainer(tmp_path, engine, *overrides):
    cfg = trainer_cfg(tmp_path, "trainer.run_name=s", "trainer.total_steps=4", "trainer.deterministic=true",
                      "trainer.optim.warmup_steps=1", *overrides)
    return LocalTrainer(cfg, engine=engine)


def test_a_stop_drops_the_rollout_in_flight_and_resume_is_exact(tmp_path):
    full = _trainer(tmp_path / "full", RandomTokenEngine())
    try:
        expected = full.fit()
    finally:
        full.close()

    trainer = _trainer(tmp_path, SignalingEngine(signal.SIGUSR1, at=3))
    try:
        trainer.fit()
    finally:
        trainer.close()
    assert trainer.stopped == "SIGUSR1" and trainer.step == 2
    assert trainer.stop_checkpoint == ckpt_io.checkpoint_dir(trainer.run_dir, 2)
    assert trainer.stop_message().startswith(f"stopped by SIGUSR1 after step 2: checkpoint {trainer.stop_checkpoint}")
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handlers restored after the run

    resumed = _trainer(tmp_path, RandomTokenEngine(), "trainer.checkpoint.resume=auto")
    try:
        history = resumed.fit()
    finally:
        resumed.close()
    assert [m["step"] for m in history] == [1, 2, 3, 4]
    assert [comparable(m) for m in history] == [comparable(m) for m in expected]


def test_signal_outside_a_droppable_section_waits_for_it_to_end():
    stops = StopSignals(["SIGUSR2"], grace_s=30)
    with stops.installed():
        os.kill(os.getpid(), signal.SIGUSR2)  # e.g. during an update: only noted
        assert stops.reason == "SIGUSR2"
        with pytest.raises(StopRequested):
            stops.check()
        with pytest.raises(StopRequested):  # the next rollout does not start
            with stops.droppable():
                pass
        stops.finished()


@pytest.mark.parametrize("value", ["[SIGKILL]", "[SIGTERMM]", "[TERM]"])
def test_stop_signals_are_checked(tmp_path, value):
    with pytest.raises(ConfigError, match="trainer.stop_signals"):
        load_config("tiny_test", [f"trainer.stop_signals={value}"])
    with pytest.raises(ConfigError, match="trainer.stop_grace_s"):
        load_config("tiny_test", ["trainer.stop_grace_s=0"])


SBATCH = "scripts/slurm/train.sbatch"


def test_sbatch_recipe_dry_runs_with_a_stable_run_that_resumes():
    text = (ROOT / SBATCH).read_text()
    assert "#SBATCH --signal=B:USR1@300" in text and "#SBATCH --requeue" in text
    r = subprocess.run(["bash", SBATCH, "--config-name", "tiny_test", "--dry-run"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={**ENV, "SLURM_JOB_ID": "4242", "PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr
    for line in ("run_name: slurm-4242", "resume: auto", "stop_grace_s: 240.0"):
        assert line in r.stdout, line


def test_sbatch_hands_usr1_to_the_trainer_and_requeues(tmp_path, data_root):
    """SLURM's early USR1 goes to the batch script: the trainer checkpoints and exits 75, the
    script calls `scontrol requeue <job>` (here a stand-in that records its arguments)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "scontrol.args"}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {**ENV, "PYTHON": sys.executable, "SLURM_JOB_ID": "77", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = tmp_path / "out"
    run = out / "tiny_test" / "slurm-77"
    proc = subprocess.Popen(["bash", SBATCH, *train_args(data_root, out)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = signal_after_two_steps(proc, run, signal.SIGUSR1)
    assert proc.returncode == EXIT_STOPPED, output[-3000:]
    assert "stopped by SIGUSR1 after step" in output and "requeueing job 77" in output
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "77"]
    assert ckpt_io.latest_checkpoint(run) == ckpt_io.checkpoint_dir(run, len(steps_logged(run)))


def test_a_refused_start_leaves_nothing_in_the_way(tmp_path, data_root):
    """A mistyped data name is refused after Hydra made the run folder (.hydra/, train.log); the
    corrected command under the same run name trains there."""
    out, run = tmp_path / "out", tmp_path / "out" / "tiny_test" / "r"
    args = train_args(data_root, out)
    typo = [a.replace("math_easy", "math_eazy") for a in args]
    bad = subprocess.run([sys.executable, "-m", "pettingllms.train", *typo, "trainer.run_name=r"], cwd=ROOT,
                         env=ENV, capture_output=True, text=True, timeout=300)
    assert "did you mean 'math_easy'" in bad.stderr and "Traceback" not in bad.stderr
    assert run.is_dir() and sorted(p.name for p in run.iterdir()) == [".hydra", "train.log"]
    good = subprocess.run([sys.executable, "-m", "pettingllms.train", *args, "trainer.run_name=r",
                           "trainer.total_steps=1"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stderr[-3000:]
    assert steps_logged(run) == [1]


def test_a_folder_that_trained_is_still_refused(tmp_path):
    from pettingllms.trainer.run_folder import never_trained, refuse_used_folder

    run = tmp_path / "r"
    (run / ".hydra").mkdir(parents=True)
    (run / "train.log").write_text("error: ...\n")
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.jsonl").write_text("")
    assert never_trained(run)
    refuse_used_folder(run)  # an attempt that never finished a step: taken
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ConfigError, match="is not empty"):
        refuse_used_folder(run)
    (run / "metrics.jsonl").unlink()
    (run / "notes.txt").write_text("mine")  # anything a run does not write: never taken
    with pytest.raises(ConfigError, match="is not empty"):
        refuse_used_folder(run)


def test_the_handler_a_launcher_set_runs_after_the_stop():
    """Hydra's submitit launcher requeues on USR2 from its own handler: listed in
    trainer.stop_signals, the run stops first, then that handler runs (hand_on)."""
    seen = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: seen.append(signum))
    try:
        stops = StopSignals(["SIGUSR2"], grace_s=30)
        with stops.installed():
            os.kill(os.getpid(), signal.SIGUSR2)
            assert stops.reason == "SIGUSR2" and seen == []  # the stop path first
            stops.finished()
            stops.hand_on()
        assert seen == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)
