"""The gateway's back end: per-execution accounting and one batched engine call for many requests.

Each running program (an *execution*) is opened with `open()` and gets a secret token; every
request it sends through the gateway names that token (its API key) and an agent. `submit()`
blocks the calling server thread until its completions are ready. One batcher thread collects
the pending requests and sends them to the engine in ONE `generate` call: as soon as every open
execution has a request waiting (nothing else can arrive), or `wait_s` after the first one
(a program may be busy between calls). Requests are sampled with the rollout's settings; only the
count `n`, extra stop strings and a lower token cap come from the request, so every sample's
logprobs are those of the distribution the policy is trained under.

A call that extends an earlier call of its agent (a chat loop resending the conversation) is sent
as prompt ids that begin with that call's prompt and sampled reply ids (prefix.py).

Budgets are per execution (calls, prompt + response tokens); a request over budget is refused
and the execution is marked failed (its reward is 0; the runner then stops its process).
An engine error fails the requests of that batch and is kept in `engine_error`: it is not the
program's fault, and the runner raises it once the executions have ended.
"""
from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.graph.prefix import PrefixKeeper, Prompt
from pettingllms.utils.seeding import sampling_seed

MAX_N = 16  # completions one request may ask for


class GatewayError(Exception):
    """A request the gateway refuses: HTTP status, OpenAI error type, one-line message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass
class Call:
    """One answered request: which agent, its call index within the execution, what was asked."""
    agent: str
    index: int  # this agent's n-th call in its execution (0-based): the sample's `turn`
    order: int  # position among all calls of the execution
    messages: list[dict[str, str]]
    completions: list[Completion]
    prompt_text: str | None = None  # the prompt as text when its ids are exactly that text's (prefix.py)
    extends: int | None = None  # the `order` of the earlier call whose ids this prompt begins with


@dataclass
class Execution:
    token: str
    name: str  # e.g. "<problem>/graph<j>": request ids and seeds derive from it
    seed: int
    max_calls: int
    max_tokens: int
    calls: list[Call] = field(default_factory=list)
    per_agent: Counter = field(default_factory=Counter)
    reserved: int = 0  # calls accepted, answered or not
    tokens: int = 0
    error: str | None = None  # "budget: ..." once over a budget
    prefix_kept: int = 0  # calls extending an earlier one that kept its ids (prefix.py)
    prefix_misses: int = 0  # ... and that were rendered afresh
    closed: bool = False
    inflight: int = 0  # calls waiting on the engine now
    inflight_since: float = 0.0
    waited_s: float = 0.0  # time with at least one call waiting (not charged to the program)

    def charged_s(self, elapsed: float) -> float:
        """The program's own time out of `elapsed`: time spent waiting on the engine is not its."""
        waiting = time.monotonic() - self.inflight_since if self.inflight else 0.0
        return elapsed - self.waited_s - waiting


@dataclass
class _Pending:
    execution: Execution
    agent: str
    index: int
    request: GenerationRequest
    future: Future
    prompt: Prompt


class CallBroker:
    """Answers gateway requests from `engine` for the agents of `agent_policy`."""

    def __init__(self, engine: RolloutEngine, agent_policy: Mapping[str, str], sampling: Mapping[str, Any],
                 wait_s: float = 0.05) -> None:
        self.engine = engine
        self.agent_policy = dict(agent_policy)
        self.sampling = dict(sampling)
        self.wait_s = float(wait_s)
        self.prefix = PrefixKeeper(engine)
        self.engine_error: BaseException | None = None
        self.batches: list[int] = []  # requests per engine call (metrics, tests)
        self._executions: dict[str, Execution] = {}
        self._pending: list[_Pending] = []
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="gateway-batcher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ executions
    def open(self, name: str, seed: int, max_calls: int, max_tokens: int) -> Execution:
        ex = Execution(token="plm-" + secrets.token_hex(16), name=name, seed=int(seed),
                       max_calls=int(max_calls), max_tokens=int(max_tokens))
        with self._cv:
            self._executions[ex.token] = ex
        return ex

    def close(self, ex: Execution) -> list[Call]:
        """End an execution; its calls as of now, in the order they were made (an answer that
        arrives later, for a program already stopped, is not kept)."""
        with self._cv:
            ex.closed = True
            self._cv.notify_all()  # one fewer execution to wait for
            return sorted(ex.calls, key=lambda c: c.order)

    def execution(self, token: str | None) -> Execution:
        with self._cv:
            ex = self._executions.get(token or "")
        if ex is None or ex.closed:
            raise GatewayError(401, "invalid_api_key", "unknown or finished execution: use the API key "
                               "the trainer gave this program (clients.api_key / OPENAI_API_KEY)")
        return ex

    def check_agent(self, agent: str) -> str:
        if agent not in self.agent_policy:
            raise GatewayError(404, "model_not_found", f"unknown agent {agent!r}; this run's agents are "
                               f"{sorted(self.agent_policy)} (name one in the URL .../agents/<agent>/v1 "
                               "or in the request's model field)")
        return agent

    # ------------------------------------------------------------------ requests
    def submit(self, ex: Execution, agent: str, messages: list[dict[str, str]], n: int = 1,
               stop: list[str] | None = None, max_tokens: int | None = None) -> list[Completion]:
        """Block until the engine answered; return the request's `n` completions."""
        self.check_agent(agent)
        params = SamplingParams(n=1, **self.sampling)
        if max_tokens is not None:
            params.max_new_tokens = max(1, min(int(max_tokens), params.max_new_tokens))
        params.stop = list(dict.fromkeys([*params.stop, *(stop or [])]))
        params.n = int(n)
        with self._cv:
            if ex.error:
                raise GatewayError(403, "budget_exceeded", ex.error)
            if ex.reserved >= ex.max_calls:
                ex.error = f"budget: more than {ex.max_calls} calls"
                raise GatewayError(403, "budget_exceeded", ex.error)
            index = ex.per_agent[agent]
            ex.per_agent[agent] += 1
            order = ex.reserved
            ex.reserved += 1
            params = replace(params, seed=sampling_seed(ex.seed, ex.name, agent, index))
            earlier = list(ex.calls)
        request = GenerationRequest(messages=messages, policy=self.agent_policy[agent], params=params,
                                    request_id=f"{ex.name}/{agent}/c{index}")
        try:
            prompt = self.prefix.prompt(earlier, agent, request)  # outside the lock: it tokenises
        except ValueError as e:  # messages the model's template cannot render
            raise GatewayError(400, "invalid_request_error", str(e)) from None
        request.prompt_ids = prompt.ids
        item = _Pending(ex, agent, index, request, Future(), prompt)
        with self._cv:
            self._pending.append(item)
            if not ex.inflight:
                ex.inflight_since = time.monotonic()
            ex.inflight += 1
            self._cv.notify_all()
        try:
            comps = item.future.result()  # raises the batch's GatewayError
        finally:
            with self._cv:
                ex.inflight -= 1
                if not ex.inflight:
                    ex.waited_s += time.monotonic() - ex.inflight_since
        text = self.prefix.confirmed(prompt, request.policy, comps[0].prompt_ids)
        with self._cv:
            if ex.closed:
                raise GatewayError(401, "invalid_api_key", "the execution ended while this call was answered")
            ex.calls.append(Call(agent=agent, index=index, order=order, messages=messages, completions=comps,
                                 prompt_text=text, extends=prompt.extends if prompt.kept else None))
            ex.prefix_kept += prompt.kept is True
            ex.prefix_misses += prompt.kept is False
            ex.tokens += len(comps[0].prompt_ids) + sum(len(c.response_ids) for c in comps)  # one prompt, n replies
            if ex.tokens > ex.max_tokens and not ex.error:
                ex.error = f"budget: {ex.tokens} tokens (limit {ex.max_tokens})"
        return comps

    # ------------------------------------------------------------------ batcher
    def _ready(self, first_at: float) -> bool:
        waiting = {id(p.execution) for p in self._pending}
        live = [ex for ex in self._executions.values() if not ex.closed]
        return all(id(ex) in waiting for ex in live) or time.monotonic() - first_at >= self.wait_s

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._stopped:
                    self._cv.wait()
                if self._stopped:
                    for p in self._pending:
                        p.future.set_exception(GatewayError(503, "server_error", "the gateway is closing"))
                    return
                first_at = time.monotonic()
                while not self._stopped and not self._ready(first_at):
                    self._cv.wait(timeout=max(0.001, self.wait_s - (time.monotonic() - first_at)))
                batch, self._pending = self._pending, []
            self._answer(batch)

    def _answer(self, batch: list[_Pending]) -> None:
        self.batches.append(len(batch))
        try:
            outputs = self.engine.generate([p.request for p in batch])
            if len(outputs) != len(batch) or any(len(o) != p.request.params.n for o, p in zip(outputs, batch)):
                raise RuntimeError(f"engine returned {[len(o) for o in outputs]} completions for requests "
                                   f"with n={[p.request.params.n for p in batch]}")
        except ValueError as e:  # a request the engine refuses (e.g. messages it cannot render)
            if len(batch) == 1:
                batch[0].future.set_exception(GatewayError(400, "invalid_request_error", str(e)))
                return
            for p in batch:  # find the bad one(s) without failing the others
                self._answer([p])
            return
        except BaseException as e:  # not the program's fault: kept, raised by the runner
            self.engine_error = self.engine_error or e
            for p in batch:
                p.future.set_exception(GatewayError(500, "server_error", f"engine failed: {e!r}"))
            return
        for p, comps in zip(batch, outputs):
            p.future.set_result(list(comps))

    def shutdown(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._thread.join(timeout=5)
