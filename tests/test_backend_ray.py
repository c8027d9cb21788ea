"""trainer.backend=ray on the tiny model: rollout workers as Ray actors (HF engine here; the vLLM
engine in a worker is covered in test_engine_vllm.py)."""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
import ray

from pettingllms.trainer.backends.ray import WorkersLost, init_ray
from pettingllms.trainer.local import LocalTrainer
from pettingllms.utils.private_ray import stop_ray
from trainer_fixtures import trainer_cfg

TESTS = str(Path(__file__).resolve().parent)
# The workers import the toy env's module (trainer_fixtures) from the tests folder.
RAY = ["trainer.backend=ray", "ray.worker_imports=[trainer_fixtures]", "ray.num_cpus=2", "ray.cpus_per_worker=0.5",
       "ray.step_timeout_s=120"]


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the module (the backends join it and leave it running)."""
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = TESTS + (os.pathsep + old if old else "")
    from pettingllms.config import RayConfig
    assert init_ray(RayConfig(num_cpus=2))
    yield
    stop_ray()
    os.environ["PYTHONPATH"] = old


def _run(cfg, steps: int = 2):
    trainer = LocalTrainer(cfg)
    try:
        return trainer.fit(max_steps=steps), trainer
    finally:
        trainer.close()


def _comparable(row: dict) -> dict:
    """Every metric except wall-clock ones."""
    return {k: v for k, v in row.items()
            if not (k.startswith(("timing/", "time/", "faults/")) or k.endswith(("_s", "per_s")))}


def test_one_ray_worker_equals_local_metric_for_metric(tmp_path, ray_session):
    local, _ = _run(trainer_cfg(tmp_path / "local", "trainer.run_name=a"))
    remote, _ = _run(trainer_cfg(tmp_path / "ray", "trainer.run_name=a", *RAY, "ray.num_rollout_workers=1"))
    assert len(local) == len(remote) == 2
    # The engine's sampler logprobs come from another process with its own torch thread count, so
    # their fp32 sums round apart (seen here: up to 2e-6, at values of ~0.05); every sample, reward, advantage
    # and update metric must still be equal. 1e-4 is far below a wrong-weights gap (~1e-2).
    gap = ("old_logprob_mismatch_mean", "old_logprob_mismatch_max")
    for a, b in zip(local, remote):
        ca, cb = _comparable(a), _comparable(b)
        for k in [k for k in ca if k.endswith(gap)]:
            assert ca.pop(k) == pytest.approx(cb.pop(k), abs=1e-4), k
        assert ca == cb
        assert b["timing/generate_s"] > 0 and b["tokens/generated_per_s"] > 0


def test_sandbox_errors_in_a_ray_worker_reach_the_metrics_and_threads_auto_works(tmp_path, ray_session):
    """Sandbox runs happen in the rollout workers' processes: their counts travel back on the Batch
    and land in metrics.jsonl exactly as a local run counts them. `trainer.threads=auto` gives each
    worker the CPUs Ray reserved for it (it used to crash every worker at start-up)."""
    from trainer_fixtures import SANDBOXED_ENV_NAME

    sandboxed = [f"env.name={SANDBOXED_ENV_NAME}", "sandbox.allow_weak=true", "trainer.threads=auto"]
    local, _ = _run(trainer_cfg(tmp_path / "local", "trainer.run_name=s", *sandboxed), steps=1)
    remote, trainer = _run(trainer_cfg(tmp_path / "ray", "trainer.run_name=s", *sandboxed, *RAY,
                                       "ray.num_rollout_workers=2", "rollout.batch_size=2"), steps=1)
    cfg = trainer.cfg
    checker_steps = int(cfg.rollout.batch_size) * int(cfg.rollout.k)  # one turn: k checker branches a problem
    sandbox = {k: v for k, v in remote[0].items() if k.startswith("sandbox/")}
    assert sandbox["sandbox/runs"] == checker_steps and sandbox["sandbox/errors"] == checker_steps
    assert sum(v for k, v in sandbox.items() if k.startswith("sandbox/errors/")) == checker_steps
    assert sandbox == {k: v for k, v in local[0].items() if k.startswith("sandbox/")}
    logged = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {k: v for k, v in logged[0].items() if k.startswith("sandbox/")} == sandbox


def test_private_ray_workers_run_at_the_drivers_priority(ray_session):
    """Ray renices every worker by +15 unless told otherwise; the rollout workers do all of a run's
    generation, so the private Ray keeps them at the driver's niceness (utils/private_ray.py)."""
    @ray.remote(num_cpus=0)
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == os.nice(0)


def test_worker_threads_for_each_setting():
    from pettingllms.utils.threads import worker_threads

    assert worker_threads("auto", 0.5, 7) == 1 and worker_threads("auto", 3.0, 7) == 3
    assert worker_threads(2, 1.0, 7) == 2 and worker_threads(0, 1.0, 7) == 7
    with pytest.raises(ValueError, match="trainer.threads"):
        worker_threads("many", 1.0, 7)


def test_two_workers_give_a_valid_step_then_a_killed_worker_fails_the_next_clearly(tmp_path, ray_session):
    """With ray.max_worker_restarts=0 a lost worker is not recreated: the step stops (WorkersLost, the
    trainer's stop path), naming the worker."""
    cfg = trainer_cfg(tmp_path, "trainer.run_name=b", "rollout.batch_size=3", *RAY, "ray.num_rollout_workers=2",
                      "ray.max_worker_restarts=0")
    trainer = LocalTrainer(cfg)
    try:
        m = trainer.train_step(1)  # slices of 1 and 2 problems
        # tiny_test: 1 turn, 2 agents, k=2 -> 3 problems x 2 agents x 2 candidates, a group per (problem, agent)
        assert m["samples/count"] == 12 and m["groups/count"] == 6 and m["episode/count"] == 3
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))
        assert m["policies/trained"] == 1.0 and m["tokens/generated_per_s"] > 0
        # Ray's memory monitor killing a worker surfaces as OutOfMemoryError from ray.get
        real_get = ray.get

        def oom_get(ref, **kw):
            raise ray.exceptions.OutOfMemoryError("1 worker(s) were killed due to the node running low on memory.")
        ray.get = oom_get
        try:
            with pytest.raises(RuntimeError, match=r"rollout worker [01] failed during weight sync \(OutOfMemoryError"):
                trainer.backend.apply_updates([])
        finally:
            ray.get = real_get
        ray.kill(trainer.backend.workers[1])
        t0 = time.monotonic()
        with pytest.raises(WorkersLost, match=r"rollout worker 1 died during rollout .*no worker restart left"):
            trainer.train_step(2)
        assert time.monotonic() - t0 < 60
    finally:
        trainer.close()


@pytest.mark.slow
def test_ray_worker_with_vllm_engine_trains_a_step(tmp_path, ray_session):
    """The combined path: a Ray rollout worker holding a vLLM engine, LoRA adapter synced to it."""
    cfg = trainer_cfg(tmp_path, "trainer.run_name=v", *RAY, "ray.num_rollout_workers=1", "rollout.engine=vllm",
                      "rollout.vllm.cpu_kvcache_gib=1", "rollout.vllm.max_num_seqs=16", "model.lora.enabled=true",
                      "model.lora.rank=8", "model.dtype=float32", "rollout.sampling.top_p=1.0")
    history, _ = _run(cfg, steps=2)
    assert [m["step"] for m in history] == [1, 2]
    for m in history:
        assert m["samples/count"] == 8 and m["tokens/generated_per_s"] > 0
        assert math.isfinite(m["train/loss"]) and m["timing/weight_sync_s"] > 0
    # fp32 engine and trainer, no truncation (top-p would shift the sampler's logprobs by -log(top_p)):
    # the engine's logprobs under the synced adapter are the trainer's to ~1e-5 (tiny model)
    assert history[1]["train/old_logprob_mismatch_max"] < 2e-3


def _trajectories(run_dir: Path) -> dict[str, list[dict]]:
    return {p.name: [json.loads(x) for x in p.read_text().splitlines()]
            for p in sorted((run_dir / "trajectories").glob("*.jsonl"))}


def _pid_alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0]
    except (OSError, IndexError):
        return False


def test_a_worker_killed_mid_run_is_recreated_and_the_run_equals_an_unfaulted_one(tmp_path, ray_session):
    """kill -9 (what the OOM killer does) on a rollout worker's pid as step 2 starts: the worker is
    recreated with the current weights and replays its slice with the same seeds, so in
    deterministic mode every step's trajectories equal an unfaulted run's; no worker is left after."""
    import signal
    import threading

    base = ("trainer.deterministic=true", "rollout.batch_size=3", *RAY, "ray.num_rollout_workers=2",
            "trainer.total_steps=3")
    clean, clean_trainer = _run(trainer_cfg(tmp_path / "clean", "trainer.run_name=c", *base), steps=3)
    trainer = LocalTrainer(trainer_cfg(tmp_path / "faulted", "trainer.run_name=f", *base))
    try:
        trainer.fit(max_steps=1)
        pids = ray.get([w.pid.remote() for w in trainer.backend.workers])
        killer = threading.Timer(0.05, os.kill, (pids[1], signal.SIGKILL))  # as step 2's rollout starts
        killer.start()
        history = trainer.fit()
        killer.join()
        after = ray.get([w.pid.remote() for w in trainer.backend.workers])
    finally:
        trainer.close()
    assert after[0] == pids[0] and after[1] != pids[1]
    assert [m["faults/worker_restarts"] for m in history] == [0.0, 1.0, 1.0]
    assert _trajectories(trainer.run_dir) == _trajectories(clean_trainer.run_dir)
    skip = ("faults/", "train/", "old_logprob")  # update metrics: sampler logprobs may round apart (see above)
    assert [{k: v for k, v in _comparable(m).items() if not k.startswith(skip) and "logprob" not in k} for m in history] \
        == [{k: v for k, v in _comparable(m).items() if not k.startswith(skip) and "logprob" not in k} for m in clean]
    time.sleep(2)
    assert not [pid for pid in pids + after if _pid_alive(pid)]


@ray.remote(num_cpus=0)
class _SandboxHolder:
    """A Ray worker process that starts a long sandboxed program, as a rollout worker's env does."""

    def start(self, backend: str) -> int:
        import functools
        import threading

        from pettingllms.sandbox import SandboxLimits, configure_sandbox, run_python
        from pettingllms.sandbox.isolation import reset_backend

        os.environ["PETTINGLLMS_SANDBOX"] = backend.removesuffix("-same-uid")  # "": the strongest here
        reset_backend()
        configure_sandbox(allow_weak=True)
        limits = SandboxLimits(wall_s=60, cpu_s=60)
        run, code = run_python, "import time\ntime.sleep(60)"
        if backend.endswith("-same-uid"):  # as a non-root user has it: under `timeout`, which gets TERM
            import dataclasses

            from pettingllms.sandbox import sandbox_backend
            from pettingllms.sandbox.process import run_with

            same_uid = dataclasses.replace(sandbox_backend(), separate_uid=False, setpriv=None)
            run = functools.partial(run_with, same_uid)
            code = _STUBBORN  # its own child, both ignoring TERM: timeout's KILL 1 s on takes the group
        threading.Thread(target=run, args=(code,), kwargs={"limits": limits}, daemon=True).start()
        return os.getpid()


_STUBBORN = """import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.fork()
time.sleep(60)
"""


@pytest.mark.parametrize("backend", ["", "subprocess", "subprocess-same-uid"])
def test_sandboxed_programs_die_with_a_rollout_worker_killed_by_pid(ray_session, backend):
    """kill -9 on a Ray worker that runs a sandboxed program leaves no sandbox process behind
    (bwrap's --die-with-parent; the subprocess backend's parent-death signal), within seconds,
    not at the program's 60 s wall limit."""
    import signal

    from pettingllms.utils.procs import alive, descendants

    holder = _SandboxHolder.remote()
    pid = ray.get(holder.start.remote(backend))
    # The program itself (launchers done), running for a second: a start that failed (EAGAIN) is retried
    # under a new pid, so the first pid seen may not be the one that runs.
    deadline, seen = time.monotonic() + 30, {}
    while not [p for p, t in seen.items() if alive(p) and time.monotonic() - t > 1.0]:
        assert time.monotonic() < deadline, "the sandboxed program never started"
        time.sleep(0.1)
        for p in descendants(pid):
            if _cmdline(p).endswith(b"main.py\0"):
                seen.setdefault(p, time.monotonic())
    sandboxed = descendants(pid)
    assert len(sandboxed) >= (3 if backend.endswith("same-uid") else 1)  # timeout, the program, its child
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while [p for p in sandboxed if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in sandboxed if alive(p)]
    assert not left, [_cmdline(p)[:120] for p in left]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
