"""min_p, repetition_penalty and enable_thinking in the engines.

The HF engine's logprobs are checked against a teacher-forced forward under the same processors
(penalty on the prompt and reply so far, temperature, min-p, top-k, top-p), written here
independently of the engine's sampler; the OpenAI engine is checked for what it sends."""
from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from numerics import forward_tol
from test_engine import TINY, _reference_logprobs, chat, engine, reference_model, req  # noqa: F401 - fixtures
from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams, prompt_ids
from pettingllms.utils.models import load_tokenizer

THINKING_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                     "{% if add_generation_prompt %}assistant:{% if enable_thinking is defined and "
                     "not enable_thinking %} <think></think>{% endif %}{% endif %}")


def _processed(logits: torch.Tensor, prompt: list[int], response: list[int], temperature: float,
               penalty: float, min_p: float) -> torch.Tensor:
    """Each position's logits after the repetition penalty (on the prompt and the reply before
    it) and, where it samples, with min-p's excluded tokens at -inf (top-k / top-p and the
    temperature are left to `_reference_logprobs`)."""
    out = logits.clone()
    for t in range(len(out)):
        seen = torch.tensor(sorted(set(prompt) | set(response[:t])))
        vals = out[t, seen]
        out[t, seen] = torch.where(vals > 0, vals / penalty, vals * penalty)
        if temperature > 0 and min_p > 0:
            scaled = out[t] / temperature
            out[t] = out[t].masked_fill(scaled < scaled.max() + math.log(min_p), float("-inf"))
    return out


@pytest.mark.parametrize("temperature,top_k,top_p,penalty,min_p", [
    (1.0, 0, 1.0, 1.3, 0.05), (0.9, 20, 0.9, 1.2, 0.1), (0.0, 0, 1.0, 1.5, 0.2)])
def test_logprobs_under_penalty_and_min_p_match_a_teacher_forced_forward(  # noqa: F811 - fixtures
        engine, reference_model, temperature, top_k, top_p, penalty, min_p):
    out = engine.generate([req("Repeat repeat repeat the word repeat", n=2, max_new_tokens=8, seed=5,
                               temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=penalty,
                               min_p=min_p)])[0]
    changed = False
    for c in out:
        ids = torch.tensor([c.prompt_ids + c.response_ids])
        with torch.no_grad():
            logits = reference_model(ids).logits[0, len(c.prompt_ids) - 1:-1].float()
        scale = max(abs(x) for x in c.logprobs) + 1.0
        tol = forward_tol(reference_model.config, ids.shape[1], scale)
        processed = _processed(logits, c.prompt_ids, c.response_ids, temperature, penalty, min_p)
        refs = _reference_logprobs(processed, temperature, top_k, top_p, boundary_tol=tol)
        for t, (options, token, got) in enumerate(zip(refs, c.response_ids, c.logprobs)):
            admissible = [v for v in options[:, token].tolist() if math.isfinite(v)]
            assert admissible, f"token {t} is outside the min-p / top-k / nucleus set"
            assert any(abs(got - v) <= tol for v in admissible), (t, got, admissible, tol)
        if temperature == 0:  # greedy picks the penalised argmax
            assert c.response_ids == processed.argmax(-1).tolist()
        plain = _reference_logprobs(logits, temperature, top_k, top_p)
        changed |= any(abs(got - p[0, tok].item()) > 1e-3 for got, p, tok in zip(c.logprobs, plain, c.response_ids))
    assert changed  # the processors moved the distribution: a test that ignored them would fail


def test_repetition_penalty_of_one_and_min_p_of_zero_change_nothing(engine):  # noqa: F811
    base = dict(n=1, max_new_tokens=4, temperature=1.0, seed=3)
    plain = engine.generate([req("same draws", **base)])[0]
    neutral = engine.generate([req("same draws", repetition_penalty=1.0, min_p=0.0, **base)])[0]
    assert [c.response_ids for c in plain] == [c.response_ids for c in neutral]
    assert [c.logprobs for c in plain] == [c.logprobs for c in neutral]


def test_enable_thinking_reaches_the_chat_template_and_is_refused_without_a_switch(engine):  # noqa: F811
    tok = copy.copy(load_tokenizer(TINY))
    tok.chat_template = THINKING_TEMPLATE

    def rendered(thinking):
        ids = prompt_ids(tok, GenerationRequest(chat("hi"), params=SamplingParams(enable_thinking=thinking)), 512)
        return tok.decode(ids)

    assert rendered(False).endswith("<think></think>")
    assert not rendered(True).endswith("</think>") and rendered(None) == rendered(True)
    # the tiny model's own template has no switch: one clear line, not a silently ignored flag
    with pytest.raises(ValueError, match="no enable_thinking switch"):
        engine.generate([req("q", max_new_tokens=2, enable_thinking=False)])


@pytest.mark.parametrize("bad,match", [(dict(min_p=1.0), "min_p"), (dict(repetition_penalty=0.0), "repetition_penalty"),
                                       (dict(enable_thinking="no"), "enable_thinking")])
def test_bad_new_params_give_clear_errors(engine, bad, match):  # noqa: F811
    with pytest.raises(ValueError, match=match):
        engine.generate([req("q", max_new_tokens=2, **bad)])


class _Client:
    """Stands in for openai.OpenAI's chat endpoint: records each call; answers or raises."""

    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[dict] = []
        self.error = error
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **kw):
        self.sent.append(kw)
        if self.error is not None:
            raise self.error
        choice = SimpleNamespace(index=0, logprobs=SimpleNamespace(content=[SimpleNamespace(logprob=-0.5)]),
                                 token_ids=[7], message=SimpleNamespace(content="ok"), finish_reason="stop")
        return SimpleNamespace(prompt_token_ids=[1, 2], choices=[choice])


def _openai(client):
    from pettingllms.rollout.engines.openai import OpenAIEngine

    eng = OpenAIEngine.__new__(OpenAIEngine)
    eng.client, eng.seed, eng._calls, eng.models = client, 0, 0, {"p": "m"}
    eng.options = SimpleNamespace(base_url="http://server/v1")
    return eng


def test_openai_engine_sends_the_new_fields_as_vllm_extensions_and_names_them_when_refused():
    client = _Client()
    params = SamplingParams(min_p=0.1, repetition_penalty=1.2, enable_thinking=False, max_new_tokens=4)
    _openai(client)._one(GenerationRequest(chat("q"), policy="p", params=params), 0, 0)
    extra = client.sent[0]["extra_body"]
    assert extra["min_p"] == 0.1 and extra["repetition_penalty"] == 1.2
    assert extra["chat_template_kwargs"] == {"enable_thinking": False}
    _openai(client)._one(GenerationRequest(chat("q"), policy="p", params=SamplingParams(max_new_tokens=4)), 0, 0)
    assert set(client.sent[1]["extra_body"]) == {"return_token_ids"}  # defaults send nothing new

    refusal = RuntimeError("Error code: 400 - unknown field")
    refusal.status_code = 400
    with pytest.raises(ValueError, match="refused a request with chat_template_kwargs, min_p, repetition_penalty"):
        _openai(_Client(refusal))._one(GenerationRequest(chat("q"), policy="p", params=params), 0, 0)


def test_vllm_engine_passes_min_p_and_repetition_penalty():
    pytest.importorskip("vllm")
    from pettingllms.rollout.engines.vllm import VLLMEngine

    params = SamplingParams(min_p=0.1, repetition_penalty=1.2, max_new_tokens=4, seed=1)
    sp = VLLMEngine._sampling(SimpleNamespace(seed=0), GenerationRequest(chat("q"), params=params), 0, 0, [])
    assert (sp.min_p, sp.repetition_penalty) == (0.1, 1.2)


def test_request_dicts_carry_the_new_fields(engine):  # noqa: F811
    """Ray actors send requests as dicts: the new fields survive the round trip."""
    d = GenerationRequest(chat("q"), policy="a", params=SamplingParams(max_new_tokens=3, repetition_penalty=1.4,
                                                                       min_p=0.2, seed=1))
    assert GenerationRequest.from_dict(d.to_dict()) == d
    out = engine.generate([d.to_dict()])[0]
    assert len(out) == 1 and len(out[0].logprobs) == len(out[0].response_ids) >= 1
