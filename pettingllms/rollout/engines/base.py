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
    min_p: float = 0.0  # drop tokens less likely than min_p x the most likely one; 0 disables
    repetition_penalty: float = 1.0  # tokens in the prompt or reply so far: logit / p if > 0, else x p
    enable_thinking: bool | None = None  # Qwen3-style templates' thinking switch; None: the template's default


@dataclass
class GenerationRequest:
    # chat messages; the role's system prompt comes first. Content is a string, or a list of parts
    # (records.ContentPart: text, or an image for vision-language models)
    messages: list[dict[str, Any]]
    policy: str = "default"  # which policy (model or adapter) generates
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = ""
    # set: the prompt's token ids, used instead of rendering `messages` (which then hold the same
    # conversation as text). The graph gateway sets them for a chat that extends an earlier call,
    # so that the earlier prompt and the ids the engine sampled stay as they were. Engines that
    # only take messages (openai) refuse them.
    prompt_ids: list[int] | None = None

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


def prompt_ids(tok: Any, request: GenerationRequest, max_prompt_tokens: int) -> list[int]:
    """The request's prompt ids (left-truncated): its `prompt_ids` if set, else its chat messages
    rendered by the model's chat template (`render_chat`) and tokenised."""
    if request.prompt_ids is not None:
        ids = [int(t) for t in request.prompt_ids]
        if not ids:
            raise ValueError(f"request {request.request_id!r} has empty prompt_ids")
        return ids[-max_prompt_tokens:]
    ids = tok(render_chat(tok, request), add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"request {request.request_id!r} renders to an empty prompt")
    return list(ids[-max_prompt_tokens:])  # keep the end: it holds the latest turn


def render_chat(tok: Any, request: GenerationRequest) -> str:
    """The request's chat messages as the prompt text the model reads: its chat template with the
    generation prompt (a plain transcript for base models without one)."""
    messages = request.messages
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, list))
            for m in messages):
        raise ValueError(f"request {request.request_id!r}: messages must be a non-empty list of "
                         "{'role': str, 'content': str or a list of parts}")
    if any(isinstance(m["content"], list) for m in messages):
        raise ValueError(f"request {request.request_id!r} has image parts, which this engine does not take "
                         "for this model: use a vision-language model (e.g. model.path=tiny:vl) on "
                         "rollout.engine=hf")
    thinking = request.params.enable_thinking
    if thinking is not None and "enable_thinking" not in (tok.chat_template or ""):
        raise ValueError(f"request {request.request_id!r}: enable_thinking={thinking} but this model's chat "
                         "template has no enable_thinking switch (Qwen3-style templates do); leave it null")
    if tok.chat_template:
        extra = {} if thinking is None else {"enable_thinking": bool(thinking)}
        return tok.apply_chat_template([dict(m) for m in messages], tokenize=False, add_generation_prompt=True,
                                       **extra)
    # base models without a chat template: a plain transcript
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


def check_params(request: GenerationRequest) -> None:
    """One clear error for sampling params no engine can honour."""
    p = request.params
    problems = []
    if p.n < 1:
        problems.append(f"n={p.n} (needs >= 1)")
    if p.max_new_tokens < 1:
        problems.append(f"max_new_tokens={p.max_new_tokens} (needs >= 1)")
    if p.temperature < 0:
        problems.append(f"temperature={p.temperature} (needs >= 0)")
    if not 0 < p.top_p <= 1:
        problems.append(f"top_p={p.top_p} (needs 0 < top_p <= 1)")
    if p.top_k < 0:
        problems.append(f"top_k={p.top_k} (needs >= 0)")
    if not 0 <= p.min_p < 1:
        problems.append(f"min_p={p.min_p} (needs 0 <= min_p < 1)")
    if not p.repetition_penalty > 0:
        problems.append(f"repetition_penalty={p.repetition_penalty} (needs > 0)")
    if p.enable_thinking is not None and not isinstance(p.enable_thinking, bool):
        problems.append(f"enable_thinking={p.enable_thinking!r} (true, false or None)")
    if isinstance(p.stop, str) or not all(isinstance(s, str) and s for s in p.stop):
        problems.append("stop must be a list of non-empty strings")
    if problems:
        raise ValueError(f"request {request.request_id!r}: bad sampling params: {'; '.join(problems)}")
