"""The backend seam: where the rollout engine(s), env/sandbox work and policy workers live.

The trainer loop (`trainer/local.py`) is one implementation for every backend and talks to it
only through this protocol:

    policies = backend.build_policies(agents)        # PolicySet: one PolicyWorker per policy
    backend.start(bases)                             # engine(s): policy name -> base model path
    backend.check_trainable()                        # training only: the engine can feed it
    batch = backend.runner(settings).run(problems, seed, step=step)   # rollout -> typed Batch
    backend.pause_engines()                          # e.g. vLLM sleep mode while policies train
    ... advantages, worker.update(...) ...
    backend.sync_weights(updated_names)              # WeightUpdate records -> engine(s)
    backend.generation_stats(); backend.close()

`local` keeps everything in this process; `ray` runs N rollout workers as Ray actors (each with
its own engine and env/sandbox pool) and splits a step's problems across them; `verl` (when
installed) backs the policy workers by verl's engine. A backend differs only in these methods.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from omegaconf import DictConfig

from pettingllms.records import Batch
from pettingllms.rollout.runner import RolloutSettings


class Runner(Protocol):
    """Plays problems to the end; `pettingllms.rollout.runner.Rollout` is the local one."""

    def run(self, problems: list[dict[str, Any]], seed: int, k: int | None = None, *,
            step: int = 0) -> Batch: ...


@dataclass
class GenerationStats:
    """Engine work since the last `begin_step`: wall time inside generate (the slowest worker's
    for parallel workers), generated tokens (all workers), time applying weight updates."""
    generate_s: float = 0.0
    generated_tokens: int = 0
    weight_load_s: float = 0.0


class Backend(ABC):
    name = "base"

    def __init__(self, cfg: DictConfig, env_factory: Callable[[], Any]) -> None:
        self.cfg = cfg
        self.env_factory = env_factory
        self.policies: Any = None  # PolicySet, set by build_policies
        self.run_dir: Path | None = None  # the training run's folder (make_backend); None: evaluation

    def build_policies(self, agents: list[str]) -> Any:
        """The policy workers; in-process PolicyWorkers unless a backend places them elsewhere."""
        from pettingllms.trainer.assemble import build_policy_set

        self.policies = build_policy_set(self.cfg, agents)
        return self.policies

    @abstractmethod
    def start(self, bases: dict[str, str]) -> None:
        """Build the rollout engine(s) serving these policies (name -> base model path)."""

    @abstractmethod
    def runner(self, settings: RolloutSettings | None = None) -> Runner:
        """A rollout runner over the engine(s); `settings` replaces the run's own (evaluation)."""

    @abstractmethod
    def apply_updates(self, updates: list[Any]) -> None:
        """Hand WeightUpdate records to every engine."""

    def sync_weights(self, names: list[str] | None = None) -> None:
        """Give the engine(s) each named policy's new weights (default: all), then let idle
        policies offload."""
        workers = self.policies.workers
        names = list(workers) if names is None else list(names)
        if names:
            self.apply_updates([workers[n].weight_update() for n in names])
        for n in names:
            release = getattr(workers[n], "release", None)
            if release is not None:
                release()

    def check_trainable(self) -> None:
        """Raise ConfigError if the engine cannot feed training (e.g. a server that returns no
        token ids or logprobs)."""

    def pause_engines(self) -> None:
        """Between rollout and update: engines may free accelerator memory (vLLM sleep mode)."""

    def begin_step(self) -> None:
        """Reset the counters behind `generation_stats`."""

    def generation_stats(self) -> GenerationStats:
        return GenerationStats()

    def close(self) -> None:
        if self.policies is not None:
            self.policies.close()
