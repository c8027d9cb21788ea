"""The environment seam: a multi-agent, turn-based, deep-copyable env.

Envs are plain Python objects with no global state and no I/O except through
`pettingllms.sandbox`. The rollout strategies deep-copy them to score candidate
actions on branches, so everything an env holds must survive `copy.deepcopy`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class StepResult:
    local_reward: float  # this agent's own reward for this action
    info: dict[str, Any] = field(default_factory=dict)


class MultiAgentEnv(ABC):
    """Agents act in `agents` order each turn; the strategy drives turns.

    Subclasses set `name`, `agents` and `max_turns`, and implement the methods.
    `turn` counts completed turns; the strategy calls `end_turn()` after the last
    agent of a turn has acted.
    """

    name: str = ""
    agents: tuple[str, ...] = ()
    map_sizes: tuple[int, ...] = ()  # puzzle sides env.map_size may pick (its data module's sized_data_name)

    def __init__(self, max_turns: int = 3, **options: Any) -> None:
        if options:
            raise TypeError(f"{type(self).__name__} got unknown options: {sorted(options)}")
        self.max_turns = max_turns
        self.turn = 0
        self.problem: dict[str, Any] = {}

    @abstractmethod
    def reset(self, problem: dict[str, Any], seed: int) -> None:
        """Start an episode on `problem` (one dataset row). Must set self.turn = 0."""

    @abstractmethod
    def observation(self, agent: str) -> list[dict[str, str]]:
        """Chat messages for `agent` now: its role system prompt plus what it may see."""

    @abstractmethod
    def step(self, agent: str, action: str) -> StepResult:
        """Apply `agent`'s action (raw model text; may be garbage) and return its local reward."""

    @property
    @abstractmethod
    def done(self) -> bool:
        """True once the episode has ended (task solved, agents agree, or max_turns reached)."""

    @abstractmethod
    def team_reward(self) -> float:
        """Team reward of the current state (task success, usually in [0, 1])."""

    @property
    def success(self) -> bool:
        return self.team_reward() >= 1.0

    def end_turn(self) -> None:
        self.turn += 1

    def render(self) -> str:
        """Text view of the state, for prompts and traces."""
        return ""


ENV_REGISTRY: dict[str, Callable[..., MultiAgentEnv]] = {}


def register_env(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        ENV_REGISTRY[name] = cls
        cls.name = name
        return cls
    return deco
