"""The rollout-engine seam: plain data in, plain data out.

Every backend (in-process HF transformers, vLLM, an OpenAI-compatible server)
implements `RolloutEngine`. Requests and completions are plain dataclasses
(`to_dict`/`from_dict`), so an engine can live in another process (a Ray actor,
a server) without the caller changing. Weight sync is one typed record per policy
(`weights.WeightUpdate`: adapter tensors for LoRA, full weights for full fine-tuning).
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping

from pettingllms.rollout.engines.weights import WeightUpdate


@dataclass
class SamplingParams:
    n: int = 1  # completions per request, all from the same prompt
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None


@dataclass
class GenerationRequest:
    messages: list[dict[str, str]]  # chat messages; the role's system prompt comes first
    policy: str = "default"  # which policy (model or adapter) generates
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GenerationRequest":
        d = dict(d)
        d["params"] = SamplingParams(**d.get("params", {}))
        return cls(**d)


@dataclass
class Completion:
    request_id: str
    policy: str
    index: int  # 0..n-1 within its request
    prompt_ids: list[int]
    response_ids: list[int]  # every generated token, including a final EOS / stop token
    logprobs: list[float]  # one per response token, under the distribution sampled from
    text: str  # decoded response, special tokens and any matched stop string removed
    finish_reason: str  # "stop" (EOS or stop string) or "length"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Completion":
        return cls(**d)


class RolloutEngine(ABC):
    """Generates completions for batches of chat requests, possibly for several policies."""

    @abstractmethod
    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        """Return, for each request in order, its `params.n` completions."""

    @abstractmethod
    def update_weights(self, update: WeightUpdate) -> None:
        """Make subsequent generation for `update.policy` use its new weights: an adapter
        (update.kind == "lora") over the policy's base, or a full set of weights ("full")."""

    def close(self) -> None:  # engines holding processes or servers release them here
        pass
