"""Runs one user program in its own process: `python child.py SPEC_JSON` (started by the graph runner).

The spec names the program (`module` or `module:function`, default function `run`), the problem,
the gateway's URL, the execution's API key, the agents, and where to write the result. The
program is called as `run(problem, clients)` (a coroutine function is run with asyncio); its
return value, as text, is the answer. The result file gets `{"ok": true, "answer": ...}` or
`{"ok": false, "error": "<kind>: ...", "trace": <traceback>}`; whatever the program prints goes
to the runner's log files. This file imports nothing from pettingllms, so a program starts in the
time its own imports take.

The environment points stock clients at the gateway (OPENAI_BASE_URL, OPENAI_API_KEY) and turns
off the tracing exporters frameworks start by default (the program runs offline).
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import signal
import sys
import traceback
from typing import Any

MAX_ANSWER_CHARS = 20000


class Clients:
    """What a program is given to reach the models: one OpenAI-compatible endpoint per agent.

        clients.base_url("solver")   http://127.0.0.1:<port>/agents/solver/v1 (for any framework)
        clients.api_key              this execution's key (every request must send it)
        clients["solver"]            an `openai.OpenAI` client for that agent (retries off)
        clients.async_openai("solver")  the same as `openai.AsyncOpenAI`
    """

    def __init__(self, url: str, api_key: str, agents: list[str], timeout_s: float = 600.0) -> None:
        self.url, self.api_key, self.agents, self.timeout_s = url, api_key, tuple(agents), float(timeout_s)
        self._cache: dict[str, Any] = {}

    def base_url(self, agent: str) -> str:
        if agent not in self.agents:
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        return f"{self.url}/agents/{agent}/v1"

    def openai(self, agent: str, **kwargs: Any) -> Any:
        import openai

        # a retry after a slow batch would record the same call twice
        kwargs = {"max_retries": 0, "timeout": self.timeout_s, **kwargs}
        return openai.OpenAI(base_url=self.base_url(agent), api_key=self.api_key, **kwargs)

    def async_openai(self, agent: str, **kwargs: Any) -> Any:
        import openai

        kwargs = {"max_retries": 0, "timeout": self.timeout_s, **kwargs}
        return openai.AsyncOpenAI(base_url=self.base_url(agent), api_key=self.api_key, **kwargs)

    def __getitem__(self, agent: str) -> Any:
        if agent not in self._cache:
            self._cache[agent] = self.openai(agent)
        return self._cache[agent]


def load_program(spec: str, search: list[str]) -> Any:
    """The callable `spec` names: "pkg.module" (its `run`) or "pkg.module:function"."""
    module_name, _, func = spec.partition(":")
    for path in reversed(search):
        if path not in sys.path:
            sys.path.insert(0, path)
    module = importlib.import_module(module_name)
    fn = getattr(module, func or "run", None)
    if not callable(fn):
        raise AttributeError(f"{module_name} has no callable {func or 'run'!r}")
    return fn


def die_with_parent(parent: int) -> None:
    """Linux: SIGKILL to this process when the trainer thread that started it dies (kill -9 of the
    trainer included), so no program outlives its run; elsewhere a no-op."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the call above
        os._exit(1)


def main(spec_path: str) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # our modules are not the program's
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    if spec.get("parent"):
        die_with_parent(int(spec["parent"]))
    result: dict[str, Any]
    try:
        fn = load_program(spec["program"], spec.get("search", []))
    except BaseException as e:  # noqa: BLE001 - any failure to load is the program's
        result = {"ok": False, "error": f"load: {type(e).__name__}: {e}", "trace": traceback.format_exc()}
    else:
        clients = Clients(spec["url"], spec["api_key"], spec["agents"], spec.get("timeout_s", 600.0))
        try:
            answer = fn(spec["problem"], clients)
            if inspect.isawaitable(answer):
                answer = asyncio.run(answer) if inspect.iscoroutine(answer) else asyncio.run(_wait(answer))
            result = {"ok": True, "answer": None if answer is None else str(answer)[:MAX_ANSWER_CHARS]}
        except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: reward 0
            result = {"ok": False, "error": f"program: {type(e).__name__}: {e}"[:2000],
                      "trace": traceback.format_exc()[-8000:]}
    with open(spec["result"], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


async def _wait(awaitable: Any) -> Any:
    return await awaitable


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
