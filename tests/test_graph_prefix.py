"""Multi-turn calls keep their earlier ids (pettingllms/rollout/graph/prefix.py), on the embedded
model's tokenizer and chat template (tiny:test's): a reply whose ids a fresh tokenisation would not
give, ended on the end-of-turn token; which calls count as extending an earlier one; a template that
rewrites earlier turns (Qwen3-style reasoning dropped), an extension the engine would truncate, a
truncated earlier prompt, and an engine with no tokenizer all fall back to fresh rendering as misses.
The whole path (the official `openai` client, the gateway, the HF engine, the samples) runs in the
L3 case of tests/test_graph_training.py."""
from __future__ import annotations

import copy

import pytest

from pettingllms.rollout.engines.base import Completion, GenerationRequest, render_chat
from pettingllms.rollout.graph.broker import Call
from pettingllms.rollout.graph.prefix import PrefixKeeper, Prompt
from pettingllms.utils.models import load_tokenizer

def fresh_ids(tok, messages):
    return tok(render_chat(tok, GenerationRequest(messages=messages)), add_special_tokens=False)["input_ids"]


class TokenizerOnly:
    """An engine as PrefixKeeper sees it: the policy's tokenizer and the prompt cap."""

    def __init__(self, tok, max_prompt_tokens=1024):
        self.tok, self.max_prompt_tokens = tok, max_prompt_tokens

    def tokenizer(self, policy):
        return self.tok


def answered(tok, messages, reply_ids, order=0):
    """A call as the broker records it, its reply sampled as `reply_ids`."""
    prompt = fresh_ids(tok, messages)
    comp = Completion("r", "p", 0, prompt, reply_ids, [0.0] * len(reply_ids),
                      tok.decode(reply_ids, skip_special_tokens=True), "stop")
    return Call("solver", 0, order, messages, [comp], prompt_text=render_chat(tok, GenerationRequest(messages=messages)))


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:test")


def test_a_reply_that_ended_on_its_end_of_turn_token(tok):
    first = [{"role": "user", "content": "Say hello."}]
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    # ids a tokenizer would not produce for this text (" hel" + "lo", not " hello"): the engine's stay
    reply = tok(" hel", add_special_tokens=False)["input_ids"] + tok("lo", add_special_tokens=False)["input_ids"]
    call = answered(tok, first, reply + [eot])
    new = first + [{"role": "assistant", "content": " hello"}, {"role": "user", "content": "Sure?"}]
    prompt = PrefixKeeper(TokenizerOnly(tok)).prompt([call], "solver", GenerationRequest(new, policy="p"))
    assert prompt.kept and prompt.extends == 0
    rest = "\n<|im_start|>user\nSure?<|im_end|>\n<|im_start|>assistant\n"
    assert prompt.ids == call.completions[0].prompt_ids + reply + [eot] + tok(rest, add_special_tokens=False)["input_ids"]
    assert prompt.ids != fresh_ids(tok, new) and tok.decode(prompt.ids) == prompt.text
    # another agent's call, or a conversation that changed an earlier message, extends nothing
    keeper = PrefixKeeper(TokenizerOnly(tok))
    assert keeper.prompt([call], "verifier", GenerationRequest(new, policy="p")).kept is None
    edited = [{"role": "user", "content": "What is 6 x 8?"}] + new[1:]
    assert keeper.prompt([call], "solver", GenerationRequest(edited, policy="p")).kept is None


def test_a_template_that_rewrites_earlier_turns_falls_back(tok):
    tok = copy.deepcopy(tok)  # a Qwen3-style template: earlier replies lose their reasoning
    tok.chat_template = (
        "{% for m in messages %}{% set c = m.content.split('</think>')[-1] if m.role == 'assistant' "
        "else m.content %}<|im_start|>{{ m.role }}\n{{ c }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    first = [{"role": "user", "content": "6 x 7?"}]
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    for text, kept in (("<think>six sevens</think>42", False), ("42", True)):
        call = answered(tok, first, tok(text, add_special_tokens=False)["input_ids"] + [eot])
        new = first + [{"role": "assistant", "content": text}, {"role": "user", "content": "Sure?"}]
        prompt = PrefixKeeper(TokenizerOnly(tok)).prompt([call], "solver", GenerationRequest(new, policy="p"))
        assert prompt.kept is kept and prompt.extends == 0
        assert (prompt.ids is None) is not kept  # a miss: the engine renders the messages afresh


def test_an_engine_without_a_tokenizer_keeps_nothing(tok):
    first = [{"role": "user", "content": "6 x 7?"}]
    call = answered(tok, first, tok("42", add_special_tokens=False)["input_ids"])
    new = first + [{"role": "assistant", "content": "42"}, {"role": "user", "content": "Sure?"}]
    prompt = PrefixKeeper(object()).prompt([call], "solver", GenerationRequest(new, policy="p"))
    assert (prompt.ids, prompt.kept, prompt.extends) == (None, False, 0)  # counted as a miss


def test_truncation_falls_back(tok):
    first = [{"role": "user", "content": "6 x 7?"}]
    call = answered(tok, first, tok("42", add_special_tokens=False)["input_ids"])
    new = first + [{"role": "assistant", "content": "42"}, {"role": "user", "content": "and " * 50}]
    keeper = PrefixKeeper(TokenizerOnly(tok, max_prompt_tokens=len(fresh_ids(tok, new)) - 1))
    prompt = keeper.prompt([call], "solver", GenerationRequest(new, policy="p"))
    assert (prompt.ids, prompt.kept) == (None, False)  # the engine would cut its start
    # the engine cut a prompt: its text is not kept, so nothing can extend it
    assert keeper.confirmed(prompt, "p", fresh_ids(tok, new)[1:]) is None
    assert keeper.confirmed(prompt, "p", fresh_ids(tok, new)) == prompt.text
    assert keeper.confirmed(Prompt([1, 2], "x"), "p", [1, 2]) == "x"
