"""`trainer.backend=ray`: N rollout workers as Ray actors, the policy workers in the driver.

Each rollout worker owns one engine (hf or vllm, `rollout.engine`) and its own env/sandbox
pool, and plays a contiguous slice of the step's problems with the same Rollout runner as the
local backend. The driver computes every problem's key for the whole batch first, so group
keys and per-request seeds are what one process would use: one worker reproduces
`trainer.backend=local` exactly, N workers give the same batch shape. Weight updates go into
the object store once and every worker applies them.

A worker that dies (killed, OOM, its node gone) or outlives `ray.step_timeout_s` is recreated by
the driver, up to `ray.max_worker_restarts` per run: the new worker gets the current weights (the
driver's policy workers hold them) and replays its slice of the step with the same keys and seed,
so the step's trajectories are those of an unfaulted run; metrics count `faults/worker_restarts`.
With no restart left, a lost rollout worker stops the run on the stop path (trainer/stopping.py:
a checkpoint of the last complete step, one line). Ray's own restarts are not used, because a
worker Ray restarts comes back with base weights.

Ray: `ray.address=local` starts a private Ray for this run (token auth on, a fresh token per run,
listening on loopback only; it lives as long as the run: utils/private_ray.py, docs/security.md);
`auto` or HOST:PORT joins a cluster started with `ray start` (docs/backends.md).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from pettingllms.errors import ConfigError
from pettingllms.records import Batch
from pettingllms.trainer.backends.base import Backend, GenerationStats, Runner
from pettingllms.trainer.stopping import StopRequested
from pettingllms.utils.counters import sum_counters
from pettingllms.utils.private_ray import LOCAL, start_ray, stop_ray

log = logging.getLogger(__name__)

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding `pettingllms/`


def init_ray(rcfg: Any) -> bool:
    """Start or join Ray per the `ray` config block; False if Ray was already initialised."""
    path = os.environ.get("PYTHONPATH", "")
    env_vars = {"PYTHONPATH": _PACKAGE_ROOT + (os.pathsep + path if path else ""),
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # vLLM's engine core inside the actor
                **{str(k): str(v) for k, v in (rcfg.env_vars or {}).items()}}
    num_cpus = int(rcfg.num_cpus) if rcfg.num_cpus is not None else None
    return start_ray(str(rcfg.address or LOCAL), num_cpus=num_cpus, env_vars=env_vars,
                     logging_level=logging.WARNING)


class RolloutWorker:
    """One Ray actor: an engine, an env factory and a Rollout runner (see module docstring)."""

    def __init__(self, index: int, cfg: dict, bases: dict[str, str], lora_ranks: dict[str, int],
                 agent_policy: dict[str, str]) -> None:
        import importlib

        import torch

        from pettingllms.config.validate import validate
        from pettingllms.rollout.runner import RolloutSettings
        from pettingllms.trainer.assemble import build_rollout_engine, rollout_settings, rollout_worker_threads
        from pettingllms.trainer.components import make_env_factory
        from pettingllms.trainer.timing import TimedEngine

        self.index = index
        for module in cfg.get("ray", {}).get("worker_imports") or []:  # first: a module may register
            importlib.import_module(str(module))                         # a custom env the config names
        self.cfg = validate(OmegaConf.create(cfg))
        torch.set_num_threads(rollout_worker_threads(self.cfg, torch.get_num_threads()))
        self.env_factory = make_env_factory(self.cfg)
        self.engine = TimedEngine(build_rollout_engine(self.cfg, bases, lora_ranks))
        self.agent_policy = dict(agent_policy)
        self.settings: RolloutSettings = rollout_settings(self.cfg)

    def run(self, problems: list[dict], keys: list[str], seed: int, k: int | None, step: int,
            settings: Any = None) -> tuple[Batch, GenerationStats]:
        from pettingllms.trainer.assemble import make_runner

        self.engine.reset_counters()
        batch = make_runner(self.engine, self.env_factory, self.agent_policy, settings or self.settings).run(
            problems, seed, k, step=step, keys=keys)
        return batch, GenerationStats(self.engine.generate_s, self.engine.generated_tokens, 0.0)

    def update_weights(self, updates: list[Any]) -> float:
        t0 = time.perf_counter()
        for update in updates:
            self.engine.update_weights(update)
        return time.perf_counter() - t0

    def check_trainable(self) -> str | None:
        check = getattr(self.engine.inner, "training_problem", None)
        return check() if check is not None else None

    def sleep(self) -> None:
        sleep = getattr(self.engine.inner, "sleep", None)
        if sleep is not None:
            sleep()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.engine.close()


class _RayRunner:
    def __init__(self, backend: "RayBackend", settings: Any) -> None:
        self.backend = backend
        self.settings = settings  # RolloutSettings or None (each worker's own); pickled to the workers

    def run(self, problems: list[dict[str, Any]], seed: int, k: int | None = None, *, step: int = 0) -> Batch:
        from pettingllms.rollout.runner import unique_keys

        keys = unique_keys(problems)
        workers = self.backend.workers
        n = len(problems)
        slices = [(i * n // len(workers), (i + 1) * n // len(workers)) for i in range(len(workers))]
        def play(i: int, worker: Any) -> Any:  # a recreated worker replays the same slice, keys and seed
            a, b = slices[i]
            return worker.run.remote(problems[a:b], keys[a:b], seed, k, step, self.settings)

        calls = [(i, play(i, workers[i])) for i, (a, b) in enumerate(slices) if b > a]
        results = self.backend.gather(calls, "rollout", resubmit=play)
        stats = self.backend.stats
        stats.generate_s += max((s.generate_s for _, s in results), default=0.0)  # workers run in parallel
        stats.generated_tokens += sum(s.generated_tokens for _, s in results)
        counters = sum_counters(batch.counters for batch, _ in results)  # workers' sandbox/judge
        counters["faults/worker_restarts"] = float(self.backend.restarts)  # so far in this run
        return Batch(step=step, episodes=[e for batch, _ in results for e in batch.episodes], counters=counters)


class RayBackend(Backend):
    name = "ray"

    def __init__(self, cfg: DictConfig, env_factory: Callable[[], Any]) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("trainer.backend=ray needs the ray package (`pip install 'ray[default]==2.60.0'`, "
                              "or `PETTINGLLMS_EXTRAS=ray bash setup.bash`)") from None
        super().__init__(cfg, env_factory)
        if int(cfg.ray.num_rollout_workers) < 1:
            raise ConfigError("ray.num_rollout_workers must be >= 1")
        self.workers: list[Any] = []
        self.restarts = 0  # rollout workers recreated in this run (ray.max_worker_restarts)
        self._new_worker: Callable[[int], Any] | None = None
        self.stats = GenerationStats()
        self._owns_ray = False

    def start(self, bases: dict[str, str]) -> None:
        import ray

        from pettingllms.trainer.components import policy_lora_ranks

        rcfg = self.cfg.ray
        self._owns_ray = init_ray(rcfg)
        cpus, gpus = self.worker_resources()
        actor = ray.remote(max_restarts=0, max_task_retries=0)(RolloutWorker)
        plain = OmegaConf.to_container(self.cfg, resolve=True)
        ranks = policy_lora_ranks(self.policies)
        agent_policy = dict(self.policies.agent_policy)
        self._new_worker = lambda i: actor.options(num_cpus=cpus, num_gpus=gpus).remote(
            i, plain, dict(bases), ranks, agent_policy)
        self.workers = [self._new_worker(i) for i in range(int(rcfg.num_rollout_workers))]
        self.gather([(i, w.pid.remote()) for i, w in enumerate(self.workers)], "start-up")

    def worker_resources(self) -> tuple[float, float]:
        """(CPUs, GPUs) of each rollout worker, checked against the cluster's nodes before any is
        placed (one line, exit 2). ray.gpus_per_worker=auto: utils.placement.rollout_worker_gpus."""
        from pettingllms.trainer.assemble import rollout_gpu_need
        from pettingllms.utils.placement import check_rollout_workers, rollout_worker_gpus
        from pettingllms.utils.ray_waits import cluster_nodes

        rcfg, nodes = self.cfg.ray, cluster_nodes()
        n = int(rcfg.num_rollout_workers)
        gpus = rollout_worker_gpus(rcfg.gpus_per_worker, sum(x.get("GPU", 0.0) for x in nodes), n,
                                   *rollout_gpu_need(self.cfg))
        check_rollout_workers(n, float(rcfg.cpus_per_worker), gpus, nodes)
        return float(rcfg.cpus_per_worker), gpus

    def gather(self, calls: list[tuple[int, Any]], what: str,
               resubmit: Callable[[int, Any], Any] | None = None) -> list[Any]:
        """Results of (worker index, object ref) calls in order. A worker that dies or outlives
        ray.step_timeout_s is recreated and `resubmit(index, new worker)` replays its call; without
        `resubmit`, or with no restart left, one error naming the worker (for a rollout: WorkersLost,
        which the trainer's stop path turns into a checkpoint and one line)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError, RayTaskError

        timeout = float(self.cfg.ray.step_timeout_s)
        deadline = time.monotonic() + timeout
        index = {ref: i for i, ref in calls}
        pending = [ref for _, ref in calls]
        done: dict[int, Any] = {}

        def replace_worker(i: int, cause: str, error: str) -> None:
            nonlocal deadline
            if resubmit is None or self.restarts >= int(self.cfg.ray.max_worker_restarts):
                self._lost(what, error)
            self._recreate(i, cause, what)
            ref = resubmit(i, self.workers[i])
            index[ref] = i
            pending.append(ref)
            deadline = max(deadline, time.monotonic() + timeout)

        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                slow, pending = [index[r] for r in pending], []
                for i in slow:
                    names = ", ".join(map(str, slow))
                    replace_worker(i, f"did not finish its {what} within ray.step_timeout_s={timeout:g}s",
                                   f"ray backend: {what} on rollout worker(s) {names} did not finish within "
                                   f"ray.step_timeout_s={timeout:g}s")
                continue
            ref = ready[0]
            i = index[ref]
            try:
                done[i] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except RayTaskError as e:  # the worker's own code raised: a bug, not a lost worker
                raise RuntimeError(f"ray backend: rollout worker {i} failed during {what}: {e.cause!r}") from None
            except GetTimeoutError:
                replace_worker(i, f"timed out during its {what}", f"ray backend: {what} on rollout worker {i} timed out")
            except RayError as e:  # RayActorError (killed, node lost), OutOfMemoryError (Ray's memory monitor)
                verb = "died" if "ActorError" in type(e).__name__ or "ActorDied" in type(e).__name__ else "failed"
                replace_worker(i, f"{verb} ({death_cause(e)})",
                               f"ray backend: rollout worker {i} {verb} during {what} "
                               f"({type(e).__name__}: {(str(e).splitlines() or [''])[0]})")
        return [done[i] for i, _ in calls]

    def _lost(self, what: str, error: str) -> None:
        restarts = int(self.cfg.ray.max_worker_restarts)
        if what == "rollout":  # the stop path: the last complete step is checkpointed
            raise WorkersLost(f"{error}; no worker restart left (ray.max_worker_restarts={restarts})")
        raise RuntimeError(error)

    def _recreate(self, i: int, cause: str, what: str) -> None:
        """Replace rollout worker `i` with a new one holding the current weights."""
        import ray

        self.restarts += 1
        log.warning("rollout worker %d %s; recreating it (restart %d of ray.max_worker_restarts=%d) with the "
                    "current weights and replaying its part of the %s", i, cause, self.restarts,
                    int(self.cfg.ray.max_worker_restarts), what)
        try:
            ray.kill(self.workers[i], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.workers[i] = self._new_worker(i)
        updates = _cpu_updates([w.weight_update() for w in self.policies.workers.values()])
        try:
            self.gather([(i, self.workers[i].update_weights.remote(updates))], "weight load after a restart")
        except RuntimeError as e:  # no room for it, or it died at once
            self._lost(what, str(e))

    def runner(self, settings: Any = None) -> Runner:
        return _RayRunner(self, settings)

    def apply_updates(self, updates: list[Any]) -> None:
        import ray

        ref = ray.put(_cpu_updates(updates))  # one copy in the object store, read by every worker
        times = self.gather([(i, w.update_weights.remote(ref)) for i, w in enumerate(self.workers)], "weight sync",
                            resubmit=lambda i, w: w.update_weights.remote(ref))
        self.stats.weight_load_s += max(times, default=0.0)

    def check_trainable(self) -> None:
        problem = self.gather([(0, self.workers[0].check_trainable.remote())], "engine check")[0]
        if problem:
            raise ConfigError(problem)

    def pause_engines(self) -> None:
        self.gather([(i, w.sleep.remote()) for i, w in enumerate(self.workers)], "engine sleep",
                    resubmit=lambda i, w: w.sleep.remote())

    def begin_step(self) -> None:
        self.stats = GenerationStats()

    def generation_stats(self) -> GenerationStats:
        return self.stats

    def close(self) -> None:
        import ray

        for w in self.workers:
            try:
                ray.get(w.close.remote(), timeout=30)
            except Exception:  # a dead worker has nothing left to close
                pass
            ray.kill(w)
        self.workers = []
        if self._owns_ray:
            stop_ray()
        super().close()


class WorkersLost(StopRequested):
    """A rollout worker was lost with no restart left: the trainer checkpoints its last complete
    step and stops (exit 75); `trainer.checkpoint.resume=auto` goes on."""


def _cpu_updates(updates: list[Any]) -> list[Any]:
    """CPU tensors: a worker may have no GPU, or another one than the trainer's."""
    return [replace(u, tensors={k: t.detach().cpu() for k, t in u.tensors.items()}) for u in updates]


def death_cause(e: BaseException) -> str:
    """Ray's exit detail of a lost worker (OOM, a signal, its node gone), in a few words."""
    text = " ".join(str(e).split())
    for marker in ("Worker exit detail:", "exit detail:", "The actor died because", "The actor is dead because"):
        if marker in text:
            detail = text.split(marker, 1)[1].strip()
            return (detail.split(". ")[0] or type(e).__name__)[:200]
    return f"{type(e).__name__}: {text[:160]}"
