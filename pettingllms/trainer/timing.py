"""Wall-time accounting for the step split: generate / env / logprob / update / other."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine
from pettingllms.rollout.engines.weights import WeightUpdate


class TimedEngine(RolloutEngine):
    """Wraps an engine and adds up the time spent in `generate` (and weight loading)."""

    def __init__(self, inner: RolloutEngine) -> None:
        self.inner = inner
        self.generate_s = 0.0
        self.load_s = 0.0
        self.generated_tokens = 0

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        t0 = time.perf_counter()
        out = self.inner.generate(requests)
        self.generate_s += time.perf_counter() - t0
        self.generated_tokens += sum(len(c.response_ids) for cs in out for c in cs)
        return out

    def update_weights(self, update: WeightUpdate) -> None:
        t0 = time.perf_counter()
        self.inner.update_weights(update)
        self.load_s += time.perf_counter() - t0

    def reset_counters(self) -> None:
        self.generate_s = self.load_s = 0.0
        self.generated_tokens = 0

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # anything else goes to the real engine
        return getattr(self.inner, name)


class Stopwatch:
    """Named wall-time sections: `with sw.section("update"): ...`."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - t0

    def get(self, name: str) -> float:
        return self.totals.get(name, 0.0)
