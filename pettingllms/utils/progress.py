"""A line every few seconds for long phases that would otherwise look frozen.

`Progress` is a context manager: while it is open a daemon thread logs "<what>: done/total
<unit>, N tokens, R tok/s, T s" every `every_s` seconds (and once more when a phase that printed ends). The
phase calls `advance(n)` as work completes; the token count comes from an optional counter that
another thread may bump at any time (the HF engine's `decoded_tokens` rises token by token inside
one generate call, so the rate moves even while no problem has finished yet). With `total=None`
the line has no "/total" (a count of unknown size), with `unit=""` no count at all (tokens and time
only); `every_s=None` takes DEFAULT_EVERY_S.

Users: held-out evaluation (eval.progress_s), dataset builds (envs/grid/splits.build_splits, the
math and code builders) and the embedded model's conversion (utils/models.py).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

log = logging.getLogger(__name__)
DEFAULT_EVERY_S = 5.0  # phases without a config key of their own (dataset builds, model conversion)


def token_counter(runner: Any) -> Optional[Callable[[], int]]:
    """Tokens generated so far by a runner's engine (or by an engine given directly): the HF engine's
    live count (during a call), else the count after each call (`TimedEngine.generated_tokens`);
    None where the engine is remote."""
    engine = getattr(runner, "engine", runner)
    for name in ("decoded_tokens", "generated_tokens"):
        if engine is not None and isinstance(getattr(engine, name, None), int):
            return lambda: int(getattr(engine, name))
    return None


class Progress:
    def __init__(self, what: str, total: Optional[int], unit: str, tokens: Optional[Callable[[], int]] = None,
                 every_s: Optional[float] = None, emit: Callable[[str], None] = log.info) -> None:
        self.what, self.unit, self.emit = what, unit, emit
        self.total = None if total is None else int(total)
        self.every_s = float(DEFAULT_EVERY_S if every_s is None else every_s)
        self.done = 0
        self._tokens = tokens
        self._tokens0 = tokens() if tokens is not None else 0
        self._t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._beats = 0

    def advance(self, n: int = 1) -> None:
        self.done += int(n)

    def line(self) -> str:
        elapsed = time.perf_counter() - self._t0
        parts = []
        if self.unit:
            parts.append(f"{self.done}{'' if self.total is None else f'/{self.total}'} {self.unit}")
        if self._tokens is not None:
            tokens = self._tokens() - self._tokens0
            parts.append(f"{tokens:,} tokens, {tokens / elapsed if elapsed > 0 else 0.0:.1f} tok/s")
        parts.append(f"{elapsed:.0f} s")
        return f"{self.what}: " + ", ".join(parts)

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            self._beats += 1
            self.emit(self.line())

    def __enter__(self) -> "Progress":
        self._t0 = time.perf_counter()
        if self.every_s > 0:
            self._thread = threading.Thread(target=self._beat, name=f"progress:{self.what}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._beats and exc[0] is None:  # a phase that said nothing while it ran stays quiet
            self.emit(self.line() + " (done)")
