"""Multi-turn calls keep their earlier ids (pettingllms/rollout/graph/prefix.py).

Through the gateway: a chat loop written with the official `openai` client, answered by the HF
engine on tiny:test (the embedded model's tokenizer and chat template): each call that resends the
conversation begins with the earlier call's prompt ids and the ids the engine sampled, and still
reads as the conversation the template renders; an extension the engine would truncate is
rendered afresh and counted as a miss. Without a model: a reply that ended on the end-of-turn
token, a template that rewrites earlier turns (Qwen3-style reasoning dropped), and an engine with
no tokenizer."""
from __future__ import annotations

import copy

import openai
import pytest

from pettingllms.rollout.engines.base import Completion, GenerationRequest, render_chat
from pettingllms.rollout.graph.broker import Call, CallBroker
from pettingllms.rollout.graph.gateway import Gateway
from pettingllms.rollout.graph.prefix import PrefixKeeper
from pettingllms.utils.models import load_tokenizer

MAX_PROMPT = 160


@pytest.fixture(scope="module")
def served():
    from pettingllms.rollout.engines.hf import HFEngine

    engine = HFEngine({"p": "tiny:test"}, dtype="float32", max_prompt_tokens=MAX_PROMPT)
    broker = CallBroker(engine, {"solver": "p"}, {"max_new_tokens": 6, "temperature": 1.0}, wait_s=0.01)
    gateway = Gateway(broker)
    yield engine, broker, gateway
    gateway.close()
    broker.shutdown()


def chat_loop(gateway, ex, user_turns):
    """The usual framework loop: resend everything, the reply, then the next user message."""
    client = openai.OpenAI(base_url=f"{gateway.url}/agents/solver/v1", api_key=ex.token, max_retries=0)
    chat = [{"role": "system", "content": "You are the solver."}]
    for text in user_turns:
        chat.append({"role": "user", "content": text})
        reply = client.chat.completions.create(model="m", messages=chat).choices[0].message.content
        chat.append({"role": "assistant", "content": reply})


def fresh_ids(tok, messages):
    return tok(render_chat(tok, GenerationRequest(messages=messages)), add_special_tokens=False)["input_ids"]


def test_a_chat_loop_keeps_the_ids_it_was_sampled_with(served):
    engine, broker, gateway = served
    tok = engine.tokenizer("p")
    ex = broker.open("q/graph0", seed=3, max_calls=10, max_tokens=10**6)
    chat_loop(gateway, ex, ["What is 2 + 2?", "Check it.", "Final answer?"])
    calls = broker.close(ex)
    assert [c.extends for c in calls] == [None, 0, 1] and (ex.prefix_kept, ex.prefix_misses) == (2, 0)
    for prev, call in zip(calls, calls[1:]):
        before, now = prev.completions[0], call.completions[0]
        head = before.prompt_ids + before.response_ids  # the ids the engine sampled, not a re-tokenisation
        assert now.prompt_ids[:len(head)] == head
        rest = render_chat(tok, GenerationRequest(messages=call.messages))[len(prev.prompt_text) + len(
            tok.decode(before.response_ids, skip_special_tokens=False)):]
        assert now.prompt_ids[len(head):] == tok(rest, add_special_tokens=False)["input_ids"]
        # still the conversation the template renders, token for token as text
        assert tok.decode(now.prompt_ids, skip_special_tokens=False) == render_chat(
            tok, GenerationRequest(messages=call.messages))
    assert calls[0].completions[0].prompt_ids == fresh_ids(tok, calls[0].messages)


def test_an_extension_the_engine_would_truncate_is_a_miss(served):
    engine, broker, gateway = served
    tok = engine.tokenizer("p")
    ex = broker.open("q/graph1", seed=4, max_calls=10, max_tokens=10**6)
    chat_loop(gateway, ex, ["What is 2 + 2?", "and " * MAX_PROMPT, "Final answer?"])
    calls = broker.close(ex)
    # the second call would pass max_prompt_tokens: rendered afresh (and cut); the third extends a cut prompt
    assert [c.extends for c in calls] == [None, None, None] and (ex.prefix_kept, ex.prefix_misses) == (0, 2)
    assert calls[1].completions[0].prompt_ids == fresh_ids(tok, calls[1].messages)[-MAX_PROMPT:]
    assert calls[1].prompt_text is None  # not the rendered text any more: nothing may extend it


class TokenizerOnly:
    """An engine as PrefixKeeper sees it: the policy's tokenizer and the prompt cap."""
    max_prompt_tokens = 1024

    def __init__(self, tok):
        self.tok = tok

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
