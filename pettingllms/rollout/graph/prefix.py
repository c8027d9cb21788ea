"""Multi-turn calls keep their earlier ids.

A framework's chat loop sends an agent's earlier messages again, with the reply it got and a new
message. Rendering that conversation afresh and tokenising it would put ids in the new prompt that
the engine never sampled (the reply's text can tokenise differently from how it was generated), so
the samples of one chat would disagree about their shared history. Instead, when a call extends an
earlier call of the same agent in the same execution, its prompt is

    the earlier call's prompt ids + the ids the engine sampled for the reply + the new part's tokens

This holds only where the chat template renders the earlier conversation as a prefix of the new
one: the new prompt's text must begin with the earlier prompt's text and then the reply exactly as
sampled (decoded with its special tokens, e.g. the end-of-turn token the engine stopped on).
Otherwise the call is rendered afresh and counted as a miss (`graph/prefix_misses`): a template that
rewrites earlier turns (Qwen3 drops earlier reasoning), a reply cut at a stop string (its text
lacks the stop string the ids hold), an earlier prompt that was truncated, an extension that would
be, or an engine that takes no prompt ids (rollout.engine=openai).

A call "extends" an earlier one when its messages begin with that call's messages followed by an
assistant message whose text is one of that call's replies (surrounding whitespace aside: a
framework that strips the reply still counts, and then misses on the text check).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

from pettingllms.rollout.engines.base import Completion, GenerationRequest, render_chat


@dataclass
class Prompt:
    """How a call's prompt is made."""
    ids: list[int] | None  # set: send these ids (the call keeps an earlier call's); None: the engine renders
    text: str | None  # the prompt as the template renders it (None: no tokenizer here)
    extends: int | None = None  # the `order` of the earlier call this one extends
    kept: bool | None = None  # None: extends nothing; True: earlier ids kept; False: a miss


class PrefixKeeper:
    """Builds prompts for the gateway's calls from the engine's own tokenizers (`engine.tokenizer(policy)`;
    an engine without one keeps no ids)."""

    def __init__(self, engine: Any, max_prompt_tokens: int | None = None) -> None:
        self._tokenizer = getattr(engine, "tokenizer", None)
        self.max_prompt_tokens = max_prompt_tokens or getattr(engine, "max_prompt_tokens", None)
        self._lock = threading.Lock()  # one tokenizer, many server threads

    def tokenizer(self, policy: str) -> Any:
        return self._tokenizer(policy) if callable(self._tokenizer) else None

    def prompt(self, calls: Sequence[Any], agent: str, request: GenerationRequest) -> Prompt:
        """The prompt of `request` by `agent`, given the execution's answered `calls` (broker.Call)."""
        earlier = extended_call(calls, agent, request.messages)
        tok = self.tokenizer(request.policy)
        if tok is None:
            return Prompt(None, None, *((earlier[0].order, False) if earlier else (None, None)))
        with self._lock:
            text = render_chat(tok, request)
            if earlier is None:
                return Prompt(None, text)
            call, i = earlier
            comp: Completion = call.completions[i]
            reply = tok.decode(comp.response_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            head = None if call.prompt_text is None else call.prompt_text + reply
            if head is None or not text.startswith(head):
                return Prompt(None, text, call.order, False)
            ids = [*comp.prompt_ids, *comp.response_ids,
                   *tok(text[len(head):], add_special_tokens=False)["input_ids"]]
        if self.max_prompt_tokens and len(ids) > self.max_prompt_tokens:  # the engine would cut its start
            return Prompt(None, text, call.order, False)
        return Prompt(ids, text, call.order, True)

    def confirmed(self, prompt: Prompt, policy: str, engine_ids: list[int]) -> str | None:
        """The prompt's text if the ids the engine used are exactly that text's (a later call may
        then extend it), else None (truncated, or the engine renders differently from us)."""
        if prompt.text is None:
            return None
        if prompt.ids is None:
            with self._lock:
                expected = self.tokenizer(policy)(prompt.text, add_special_tokens=False)["input_ids"]
        else:
            expected = prompt.ids
        return prompt.text if list(engine_ids) == list(expected) else None


def extended_call(calls: Sequence[Any], agent: str, messages: list[dict[str, Any]]) -> tuple[Any, int] | None:
    """(the latest earlier call of `agent` that `messages` extend, the index of its reply they resend)."""
    for call in sorted(calls, key=lambda c: c.order, reverse=True):
        m = len(call.messages)
        if call.agent != agent or len(messages) <= m or messages[:m] != call.messages:
            continue
        said = messages[m]
        if said.get("role") != "assistant" or not isinstance(said.get("content"), str):
            continue
        for i, comp in enumerate(call.completions):
            if said["content"].strip() == comp.text.strip():
                return call, i
    return None
