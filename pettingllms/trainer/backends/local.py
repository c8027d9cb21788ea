"""`trainer.backend=local`: one engine, the env/sandbox pool and the policy workers in this process."""
from __future__ import annotations

from typing import Any, Callable

from omegaconf import DictConfig

from pettingllms.rollout.runner import RolloutSettings
from pettingllms.trainer.backends.base import Backend, GenerationStats, Runner
from pettingllms.trainer.timing import TimedEngine


class LocalBackend(Backend):
    name = "local"

    def __init__(self, cfg: DictConfig, env_factory: Callable[[], Any], engine: Any = None) -> None:
        super().__init__(cfg, env_factory)
        self._given = engine  # an engine built elsewhere (tests, a server client)
        self.engine: TimedEngine | None = None

    def start(self, bases: dict[str, str]) -> None:
        from pettingllms.trainer.assemble import build_rollout_engine
        from pettingllms.trainer.components import policy_lora_ranks

        engine = self._given
        if engine is None:
            engine = build_rollout_engine(self.cfg, bases, policy_lora_ranks(self.policies))
        share = getattr(engine, "share_base", None)
        if share is not None:  # one frozen base in memory for trainer and engine, not two
            for name, worker in self.policies.workers.items():
                base = getattr(worker, "frozen_base_weights", None)
                if base is not None:
                    share(name, base())
        self.engine = TimedEngine(engine)

    def runner(self, settings: RolloutSettings | None = None) -> Runner:
        from pettingllms.trainer.assemble import make_runner, rollout_settings

        return make_runner(self.engine, self.env_factory, dict(self.policies.agent_policy),
                           settings or rollout_settings(self.cfg))

    def apply_updates(self, updates: list[Any]) -> None:
        for update in updates:
            self.engine.update_weights(update)

    def check_trainable(self) -> None:
        from pettingllms.errors import ConfigError

        check = getattr(self.engine.inner, "training_problem", None)
        problem = check() if check is not None else None
        if problem:
            raise ConfigError(problem)

    def pause_engines(self) -> None:
        sleep = getattr(self.engine.inner, "sleep", None)
        if sleep is not None:
            sleep()

    def begin_step(self) -> None:
        self.engine.reset_counters()

    def generation_stats(self) -> GenerationStats:
        e = self.engine
        return GenerationStats(e.generate_s, e.generated_tokens, e.load_s)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        super().close()
