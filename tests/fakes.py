"""Test doubles shared by the test suite: a scripted engine, a toy two-agent env, a config.

Keep this API stable; other tests import it.

ScriptedEngine(script)   a RolloutEngine whose completions come from `script(request)`
                         (a list of texts). A request with n = K gets the first K
                         texts (cycled); the j-th identical request in one call
                         continues from text j*n, so K flat episodes at the same
                         state get different texts. Every call and output is kept
                         (`calls`, `outputs`), tokens are fake but stable.
ToySumEnv                agents ("proposer", "finisher"): the proposer says an integer
                         x, the finisher (who sees x) says y; team reward 1 when
                         x + y == problem["target"]. Local reward 1 for a parsable
                         integer. "quit" from the proposer ends the episode at once.
toy_script(table)        a script for ToySumEnv: table[(agent, turn)] -> texts.
make_cfg(**sections)     the schema config with overrides, e.g. rollout={"k": 3}.
"""
from __future__ import annotations

import copy
import json
import random
import re
import time
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from omegaconf import OmegaConf

from pettingllms.config.validate import validate
from pettingllms.envs.base import MultiAgentEnv, StepResult
from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine
from pettingllms.rollout.engines.weights import WeightUpdate

EOS_ID = 0


def fake_tokenize(text: str) -> list[int]:
    """One id per character; stable across runs (no hashing)."""
    return [ord(ch) % 50_000 + 1 for ch in text]


def fake_logprobs(ids: Sequence[int], seed: int) -> list[float]:
    rng = random.Random(seed)
    return [-round(rng.uniform(0.01, 3.0), 4) for _ in ids]


class ScriptedEngine(RolloutEngine):
    def __init__(self, script: Callable[[GenerationRequest], Sequence[str]]) -> None:
        self.script = script
        self.calls: list[list[GenerationRequest]] = []
        self.outputs: list[list[list[Completion]]] = []
        self.loaded: list[tuple[str, Any]] = []

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        self.calls.append(copy.deepcopy(requests))
        seen: Counter = Counter()
        result = []
        for req in requests:
            key = (req.policy, json.dumps(req.messages, sort_keys=True))
            occurrence = seen[key]
            seen[key] += 1
            texts = list(self.script(req))
            if not texts:
                raise ValueError(f"script gave no texts for request {req.request_id}")
            prompt_ids = fake_tokenize("\n".join(f"{m['role']}: {m['content']}" for m in req.messages))
            comps = []
            for i in range(req.params.n):
                text = texts[(occurrence * req.params.n + i) % len(texts)]
                response_ids = fake_tokenize(text) + [EOS_ID]
                comps.append(Completion(
                    request_id=req.request_id, policy=req.policy, index=i, prompt_ids=prompt_ids,
                    response_ids=response_ids,
                    logprobs=fake_logprobs(response_ids, (req.params.seed or 0) + i),
                    text=text, finish_reason="stop"))
            result.append(comps)
        self.outputs.append(copy.deepcopy(result))
        return result

    def update_weights(self, update: WeightUpdate) -> None:
        self.loaded.append((update.policy, update.tensors))


_INT = re.compile(r"\s*(-?\d+)\s*")


def _parse_int(text: str) -> int | None:
    m = _INT.fullmatch(text)
    return int(m.group(1)) if m else None


class ToySumEnv(MultiAgentEnv):
    name = "toy_sum"
    agents = ("proposer", "finisher")

    def __init__(self, max_turns: int = 2, delay_s: float = 0.0, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        self.delay_s = delay_s  # random sleep per step, to shake thread timing

    def reset(self, problem: dict[str, Any], seed: int) -> None:
        self.problem = dict(problem)
        self.target = int(problem["target"])
        self.turn = 0
        self.x_text: str | None = None
        self.y_text: str | None = None
        self.quit = False
        self.history: list[tuple[str, str]] = []

    @staticmethod
    def system_prompt(agent: str) -> str:
        return f"You are the {agent}. Reply with one integer."

    def observation(self, agent: str) -> list[dict[str, str]]:
        text = f"TURN {self.turn}. Target {self.target}."
        if agent == "proposer" and self.history:
            x, y = self.history[-1]
            text += f" Last round: {x} + {y}."
        if agent == "finisher":
            text += f" Your partner proposed {self.x_text}."
        return [{"role": "system", "content": self.system_prompt(agent)}, {"role": "user", "content": text}]

    def step(self, agent: str, action: str) -> StepResult:
        if self.delay_s:
            time.sleep(random.random() * self.delay_s)
        if agent == "proposer":
            self.x_text, self.y_text = action, None
            self.quit = action.strip() == "quit"
        elif agent == "finisher":
            self.y_text = action
        else:
            raise KeyError(agent)
        return StepResult(local_reward=1.0 if _parse_int(action) is not None else 0.0, info={"len": len(action)})

    @property
    def done(self) -> bool:
        return self.quit or self.team_reward() >= 1.0 or self.turn >= self.max_turns

    def team_reward(self) -> float:
        x = _parse_int(self.x_text or "")
        y = _parse_int(self.y_text or "")
        return 1.0 if x is not None and y is not None and x + y == self.target else 0.0

    def end_turn(self) -> None:
        self.history.append((str(self.x_text), str(self.y_text)))
        super().end_turn()

    def render(self) -> str:
        return f"x={self.x_text} y={self.y_text}"


def parse_toy_request(req: GenerationRequest) -> tuple[str, int]:
    """(agent, turn) of a ToySumEnv request."""
    agent = re.match(r"You are the (\w+)\.", req.messages[0]["content"]).group(1)
    turn = int(re.match(r"TURN (\d+)\.", req.messages[1]["content"]).group(1))
    return agent, turn


def toy_script(table: Mapping[tuple[str, int], Sequence[str]], default: Sequence[str] = ("0",)
               ) -> Callable[[GenerationRequest], Sequence[str]]:
    def script(req: GenerationRequest) -> Sequence[str]:
        return table.get(parse_toy_request(req), default)
    return script


def make_cfg(**sections: Any):
    """The full schema config with per-section overrides, e.g. make_cfg(rollout={"k": 3})."""
    return validate(OmegaConf.create(sections))
