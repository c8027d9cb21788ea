"""`trainer.backend=ray`: N rollout workers as Ray actors, the policy workers in the driver.

Each rollout worker owns one engine (hf or vllm, `rollout.engine`) and its own env/sandbox
pool, and plays a contiguous slice of the step's problems with the same Rollout runner as the
local backend. The driver computes every problem's key for the whole batch first, so group
keys and per-request seeds are what one process would use: one worker reproduces
`trainer.backend=local` exactly, N workers give the same batch shape. Weight updates go into
the object store once and every worker applies them.

A worker that dies (killed, OOM) or a rollout slower than `ray.step_timeout_s` fails the step
with one message naming the worker; Ray's own restarts are not used, because a restarted
worker would come back with base weights.

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
from pettingllms.utils.counters import sum_counters
from pettingllms.utils.private_ray import LOCAL, start_ray, stop_ray

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
        calls = [(i, workers[i].run.remote(problems[a:b], keys[a:b], seed, k, step, self.settings))
                 for i, (a, b) in enumerate(slices) if b > a]
        results = self.backend.gather(calls, "rollout")
        stats = self.backend.stats
        stats.generate_s += max((s.generate_s for _, s in results), default=0.0)  # workers run in parallel
        stats.generated_tokens += sum(s.generated_tokens for _, s in results)
        return Batch(step=step, episodes=[e for batch, _ in results for e in batch.episodes],
                     counters=sum_counters(batch.counters for batch, _ in results))  # workers' sandbox/judge


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
        self.workers = [
            actor.options(num_cpus=cpus, num_gpus=gpus).remote(
                i, plain, dict(bases), ranks, dict(self.policies.agent_policy))
            for i in range(int(rcfg.num_rollout_workers))]
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

    def gather(self, calls: list[tuple[int, Any]], what: str) -> list[Any]:
        """Results of (worker index, object ref) calls in order; one clear error naming the worker
        if one dies or the whole call outlives ray.step_timeout_s."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

        timeout = float(self.cfg.ray.step_timeout_s)
        deadline = time.monotonic() + timeout
        index = {ref: i for i, ref in calls}
        pending = [ref for _, ref in calls]
        done: dict[Any, Any] = {}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                names = ", ".join(str(index[r]) for r in pending)
                raise RuntimeError(f"ray backend: {what} on rollout worker(s) {names} did not finish within "
                                   f"ray.step_timeout_s={timeout:g}s")
            ref = ready[0]
            try:
                done[ref] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except RayActorError as e:
                raise RuntimeError(f"ray backend: rollout worker {index[ref]} died during {what} "
                                   f"({type(e).__name__}: {str(e).splitlines()[0]})") from None
            except RayTaskError as e:
                raise RuntimeError(f"ray backend: rollout worker {index[ref]} failed during {what}: "
                                   f"{e.cause!r}") from None
            except GetTimeoutError:
                raise RuntimeError(f"ray backend: {what} on rollout worker {index[ref]} timed out") from None
            except RayError as e:  # e.g. OutOfMemoryError: Ray's memory monitor killed the worker
                raise RuntimeError(f"ray backend: rollout worker {index[ref]} failed during {what} "
                                   f"({type(e).__name__}: {str(e).splitlines()[0]})") from None
        return [done[ref] for _, ref in calls]

    def runner(self, settings: Any = None) -> Runner:
        return _RayRunner(self, settings)

    def apply_updates(self, updates: list[Any]) -> None:
        import ray

        # CPU tensors: a worker may have no GPU, or another one than the trainer's
        updates = [replace(u, tensors={k: t.detach().cpu() for k, t in u.tensors.items()}) for u in updates]
        ref = ray.put(updates)  # one copy in the object store, read by every worker
        times = self.gather([(i, w.update_weights.remote(ref)) for i, w in enumerate(self.workers)], "weight sync")
        self.stats.weight_load_s += max(times, default=0.0)

    def check_trainable(self) -> None:
        problem = self.gather([(0, self.workers[0].check_trainable.remote())], "engine check")[0]
        if problem:
            raise ConfigError(problem)

    def pause_engines(self) -> None:
        self.gather([(i, w.sleep.remote()) for i, w in enumerate(self.workers)], "engine sleep")

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
