"""The HF rollout engine: batching, sampling, logprobs, stop handling, policies and weight swaps."""
from __future__ import annotations

import json
import math
from unittest import mock

import pytest
import torch
from omegaconf import OmegaConf

from numerics import forward_tol
from pettingllms.config.schema import ModelConfig, PolicyConfig, RolloutConfig
from pettingllms.config.validate import validate
from pettingllms.errors import ConfigError
from pettingllms.rollout.engines import build_engine, engine_policies
from pettingllms.rollout.engines.base import Completion, GenerationRequest, SamplingParams
from pettingllms.rollout.engines.hf import HFEngine
from pettingllms.utils.models import load_causal_lm, load_tokenizer, resolve_model_path, tiny_model

TINY = "tiny:test"


def close_logprobs(engine: HFEngine, a: Completion, b_logprobs: list[float]) -> bool:
    """Same tokens scored by two fp32 forwards that batch, pad or cache differently."""
    scale = max([abs(x) for x in a.logprobs + list(b_logprobs)] or [0.0])
    tol = forward_tol(engine._slot(a.policy).model.config, len(a.prompt_ids) + len(a.response_ids), scale)
    return a.logprobs == pytest.approx(list(b_logprobs), abs=tol)


def chat(text: str, system: str = "You are a careful solver.") -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def req(text: str, policy: str = "a", rid: str = "", **params) -> GenerationRequest:
    return GenerationRequest(chat(text), policy=policy, params=SamplingParams(**params), request_id=rid)


@pytest.fixture(scope="module")
def engine() -> HFEngine:
    return HFEngine({"a": TINY}, dtype="float32")


@pytest.fixture(scope="module")
def reference_model():
    return load_causal_lm(TINY, "float32")


def test_generate_shapes_and_prompt(engine: HFEngine) -> None:
    requests = [req("What is 2+3?", rid="r0", n=3, max_new_tokens=6, temperature=1.0),
                req("A much longer question " * 5, rid="r1", n=2, max_new_tokens=4, temperature=0.7)]
    out = engine.generate(requests)
    tok = engine.tokenizer("a")
    assert [len(cs) for cs in out] == [3, 2]
    for r, cs in zip(requests, out):
        expected_prompt = tok(tok.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True),
                              add_special_tokens=False)["input_ids"]
        assert [c.index for c in cs] == list(range(r.params.n))
        for c in cs:
            assert c.request_id == r.request_id and c.policy == "a"
            assert c.prompt_ids == expected_prompt
            assert 1 <= len(c.response_ids) == len(c.logprobs) <= r.params.max_new_tokens
            assert all(math.isfinite(x) and x <= 0 for x in c.logprobs)
            assert c.text == tok.decode(c.response_ids, skip_special_tokens=True)
            if c.finish_reason == "length":
                assert len(c.response_ids) == r.params.max_new_tokens
            else:
                assert c.finish_reason == "stop" and c.response_ids[-1] in tok.all_special_ids
    assert engine.generate([]) == []


def test_seeds_reproducible_and_independent_of_batch(engine: HFEngine) -> None:
    base = dict(n=2, max_new_tokens=8, temperature=1.0, top_p=0.95)
    alone = engine.generate([req("seeded question", seed=7, **base)])[0]
    again = engine.generate([req("seeded question", seed=7, **base)])[0]
    mixed = engine.generate([req("another prompt, longer than the first one", seed=1, **base),
                             req("seeded question", seed=7, **base), req("x", seed=3, **base)])[1]
    other = engine.generate([req("seeded question", seed=8, **base)])[0]
    assert [c.response_ids for c in alone] == [c.response_ids for c in again]
    assert [c.response_ids for c in alone] == [c.response_ids for c in mixed]
    for a, m in zip(alone, mixed):  # same tokens; logprobs up to the batched forward's rounding
        assert close_logprobs(engine, a, m.logprobs)
    assert alone[0].response_ids != alone[1].response_ids  # the n copies differ
    assert [c.response_ids for c in alone] != [c.response_ids for c in other]
    # without a request seed the engine seed and call order decide: a new call differs
    unseeded = [engine.generate([req("seeded question", **base)])[0][0].response_ids for _ in range(2)]
    assert unseeded[0] != unseeded[1]


def _reference_logprobs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                        boundary_tol: float = 0.0) -> list[torch.Tensor]:
    """Log-probs of the distribution the engine should sample from, written independently:
    temperature, keep the top_k largest, keep the smallest prefix (by probability) whose mass
    reaches top_p, renormalise. Greedy (temperature 0) uses the plain softmax.

    One [options, vocab] tensor per position. There is one option unless the mass before some
    token lies within `boundary_tol` of top_p: then rounding alone decides whether that token is
    in the nucleus (the engine's KV-cached forward and this full forward differ by about that
    much), and the distributions with and without it are both admissible."""
    if temperature == 0:
        return [row[None] for row in torch.log_softmax(logits, -1)]
    out = []
    for row in logits / temperature:
        keep = torch.ones_like(row, dtype=torch.bool)
        if top_k > 0:
            keep &= row >= torch.topk(row, top_k).values[-1]
        nuclei = [keep]
        if top_p < 1:
            probs = torch.softmax(row.masked_fill(~keep, float("-inf")), -1)
            sorted_probs, order = probs.sort(descending=True)
            before = sorted_probs.cumsum(0) - sorted_probs  # mass of the strictly more likely tokens
            near = ((before - top_p).abs() <= boundary_tol).nonzero().flatten().tolist()
            counts = {int((before < top_p).sum()), *near, *(i + 1 for i in near)} - {0}
            nuclei = []
            for count in sorted(counts):
                nucleus = torch.zeros_like(keep)
                nucleus[order[:count]] = True
                nuclei.append(nucleus & keep)
        out.append(torch.stack([torch.log_softmax(row.masked_fill(~n, float("-inf")), -1) for n in nuclei]))
    return out


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 20, 1.0), (1.3, 0, 0.8), (0.8, 50, 0.9), (0.0, 0, 1.0)])
def test_logprobs_match_teacher_forced_forward(engine: HFEngine, reference_model, temperature, top_k, top_p) -> None:
    """The engine's logprobs equal a teacher-forced forward pass over prompt + response.

    Tolerance from `forward_tol` (about 1e-4 nats here): both sides run the same fp32 weights,
    but the engine computes position t from a KV cache one token at a time while the reference
    runs the whole sequence at once, so they sum in different orders. A wrong distribution
    (missing temperature, no renormalisation after top-k/top-p, an off-by-one position) is off
    by 1e-2 or more.
    """
    out = engine.generate([req("Teacher forcing check", n=2, max_new_tokens=10, temperature=temperature,
                               top_k=top_k, top_p=top_p, seed=11)])[0]
    for c in out:
        ids = torch.tensor([c.prompt_ids + c.response_ids])
        with torch.no_grad():
            logits = reference_model(ids).logits[0, len(c.prompt_ids) - 1:-1].float()
        tokens = torch.tensor(c.response_ids)
        scale = max(abs(x) for x in c.logprobs) + 1.0  # +1: the nucleus masses are at most 1
        tol = forward_tol(reference_model.config, len(c.prompt_ids) + len(c.response_ids), scale)
        refs = _reference_logprobs(logits, temperature, top_k, top_p, boundary_tol=tol)
        for t, (options, token, got) in enumerate(zip(refs, c.response_ids, c.logprobs)):
            admissible = [v for v in options[:, token].tolist() if math.isfinite(v)]
            assert admissible, f"token {t} is outside the top-k / nucleus"
            assert any(abs(got - v) <= tol for v in admissible), (t, got, admissible, tol)
        plain = torch.log_softmax(logits / (temperature or 1.0), -1).gather(1, tokens[:, None]).squeeze(1)
        if top_k or top_p < 1:  # renormalised values are larger than the untruncated ones
            assert all(e > p + 1e-3 for e, p in zip(c.logprobs, plain.tolist()))
        if temperature == 0:
            assert c.response_ids == logits.argmax(-1).tolist()


def _generate_counting_rows(engine: HFEngine, requests):
    """engine.generate(requests), and the batch size of every forward it ran (prefill first)."""
    batch_sizes: list[int] = []
    forward = engine._forward

    def counting(slot, ids, *args):
        batch_sizes.append(ids.shape[0])
        return forward(slot, ids, *args)

    with mock.patch.object(engine, "_forward", counting):
        return engine.generate(requests), batch_sizes


def test_requests_with_the_same_prompt_share_one_prefill() -> None:
    """A rollout sends its K candidates as K requests with one prompt: the prompt is prefilled
    once, and each request still gets what it gets alone (its own seed stream; float64, so that
    the batch's shape cannot move a draw by rounding)."""
    engine = HFEngine({"a": TINY}, dtype="float64")
    requests = [req("the same prompt", rid=str(i), n=1, max_new_tokens=6, temperature=1.0, seed=10 + i)
                for i in range(3)] + [req("another prompt", rid="3", n=2, max_new_tokens=6, temperature=1.0, seed=7)]
    shared, batch_sizes = _generate_counting_rows(engine, requests)
    assert batch_sizes[0] == 2 and batch_sizes[1] == 5  # two distinct prompts, five rows
    alone = [engine.generate([r])[0] for r in requests]
    for s_cs, a_cs in zip(shared, alone):
        assert [c.response_ids for c in s_cs] == [c.response_ids for c in a_cs]
    assert len({tuple(cs[0].response_ids) for cs in shared[:3]}) > 1  # own seeds, not one copy


def test_dropping_finished_rows_changes_nothing(engine: HFEngine) -> None:
    """Rows finishing at different steps leave the batch; results equal batch-of-1 runs and a run
    that keeps every row in the batch to the end."""
    requests = [req("short", rid="0", n=2, max_new_tokens=3, temperature=1.0, seed=1),
                req("a somewhat longer prompt to force left padding", rid="1", n=1, max_new_tokens=12,
                    temperature=0.9, top_k=40, seed=2),
                req("middle length prompt", rid="2", n=2, max_new_tokens=7, temperature=0.0)]
    dropped, batch_sizes = _generate_counting_rows(engine, requests)
    assert batch_sizes[0] == 3 and batch_sizes[1] == 5 and batch_sizes[-1] == 1  # prefill once per prompt
    keep_all = HFEngine({"a": TINY}, dtype="float32", drop_finished=False).generate(requests)
    single = [engine.generate([r])[0] for r in requests]
    for d_cs, k_cs, s_cs in zip(dropped, keep_all, single):
        for d, k, s in zip(d_cs, k_cs, s_cs):
            assert d.response_ids == k.response_ids == s.response_ids
            assert d.finish_reason == k.finish_reason == s.finish_reason
            assert close_logprobs(engine, d, s.logprobs) and close_logprobs(engine, d, k.logprobs)


def test_stop_strings(engine: HFEngine) -> None:
    tok = engine.tokenizer("a")
    free = engine.generate([req("stop string check", max_new_tokens=16, temperature=0.0)])[0][0]
    full = tok.decode(free.response_ids, skip_special_tokens=True)
    start = len(tok.decode(free.response_ids[:3], skip_special_tokens=True))
    stop = full[start:start + 3]
    assert len(stop) == 3 and full.find(stop) == start
    stopped = engine.generate([req("stop string check", max_new_tokens=16, temperature=0.0,
                                   stop=["@@never@@", stop])])[0][0]
    needed = next(m for m in range(1, 17) if stop in tok.decode(free.response_ids[:m], skip_special_tokens=True))
    assert stopped.finish_reason == "stop"
    assert stopped.text == full[:start]
    assert stopped.response_ids == free.response_ids[:needed]  # kept up to the completing token
    assert close_logprobs(engine, stopped, free.logprobs[:needed])


def test_eos_finishes_with_stop(engine: HFEngine) -> None:
    free = engine.generate([req("eos check", max_new_tokens=6, temperature=0.0)])[0][0]
    slot = engine._slot("a")
    saved = set(slot.eos_ids)
    slot.eos_ids.add(free.response_ids[2])  # pretend the third greedy token is an end token
    try:
        ended = engine.generate([req("eos check", max_new_tokens=6, temperature=0.0)])[0][0]
    finally:
        slot.eos_ids.clear()
        slot.eos_ids.update(saved)
    first_end = free.response_ids.index(free.response_ids[2])
    assert ended.finish_reason == "stop"
    assert ended.response_ids == free.response_ids[:first_end + 1]


def test_long_prompts_are_left_truncated() -> None:
    eng = HFEngine({"a": TINY}, dtype="float32", max_prompt_tokens=16)
    tok = eng.tokenizer("a")
    r = req("word " * 100, max_new_tokens=2, temperature=0.0)
    full = tok(tok.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True),
               add_special_tokens=False)["input_ids"]
    c = eng.generate([r])[0][0]
    assert len(full) > 16 and c.prompt_ids == full[-16:]


def test_policies_share_a_model_and_swap_weights(tmp_path) -> None:
    eng = HFEngine({"a": TINY, "b": TINY, "c": "tiny:other"}, dtype="float32")
    assert eng._slot("a") is eng._slot("b") and eng._slot("c") is not eng._slot("a")
    probe = lambda p: eng.generate([req("policy probe", policy=p, max_new_tokens=6, temperature=0.0)])[0][0]
    a0, b0, c0 = probe("a"), probe("b"), probe("c")
    assert a0.response_ids == b0.response_ids != c0.response_ids
    ptrs = {n: t.data_ptr() for n, t in eng._slot("a").params.items()}

    other, _ = tiny_model(seed=1)  # full state dict of another model, then its generation
    other.save_pretrained(tmp_path / "other")
    load_tokenizer(TINY).save_pretrained(tmp_path / "other")
    expected = HFEngine({"x": str(tmp_path / "other")}, dtype="float32").generate(
        [req("policy probe", policy="x", max_new_tokens=6, temperature=0.0)])[0][0]
    eng.load_weights("b", other.state_dict())
    mixed = eng.generate([req("policy probe", policy=p, max_new_tokens=6, temperature=0.0) for p in "abab"])
    assert [m[0].response_ids for m in mixed] == [a0.response_ids, expected.response_ids] * 2
    assert probe("c").response_ids == c0.response_ids

    # a partial state dict changes only the named tensors of that policy
    norm = eng._slot("a").params["model.norm.weight"]
    eng.load_weights("a", {"model.norm.weight": torch.full_like(norm, 3.0)})  # sharper logits
    assert probe("a").logprobs != pytest.approx(a0.logprobs, abs=1e-3)
    assert probe("b").response_ids == expected.response_ids
    eng.load_weights("a", {"model.norm.weight": torch.ones_like(norm)})  # tiny init has ones
    assert close_logprobs(eng, probe("a"), a0.logprobs)
    assert {n: t.data_ptr() for n, t in eng._slot("a").params.items()} == ptrs  # copied in place

    with pytest.raises(KeyError, match="no tensor named"):
        eng.load_weights("a", {"nope.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape"):
        eng.load_weights("a", {"model.norm.weight": torch.zeros(3)})
    with pytest.raises(ValueError, match="unknown policy"):
        eng.load_weights("zzz", {})


def test_single_policy_load_weights_writes_through(engine: HFEngine) -> None:
    before = engine.generate([req("write through", max_new_tokens=5, temperature=0.0)])[0][0]
    norm = engine._slot("a").params["model.norm.weight"]
    saved = norm.detach().clone()
    engine.load_weights("a", {"model.norm.weight": saved * 4})
    try:
        changed = engine.generate([req("write through", max_new_tokens=5, temperature=0.0)])[0][0]
    finally:
        engine.load_weights("a", {"model.norm.weight": saved})
    assert changed.logprobs != pytest.approx(before.logprobs, abs=1e-3)  # sharper logits


@pytest.mark.parametrize("bad,match", [
    (dict(policy="nobody"), "unknown policy"),
    (dict(params=SamplingParams(n=0)), "n=0"),
    (dict(params=SamplingParams(top_p=0.0)), "top_p"),
    (dict(params=SamplingParams(temperature=-1)), "temperature"),
    (dict(params=SamplingParams(stop="abc")), "stop"),
    (dict(messages=[{"role": "user"}]), "messages"),
    (dict(messages="hello"), "messages"),
])
def test_bad_requests_give_clear_errors(engine: HFEngine, bad, match) -> None:
    fields = dict(messages=chat("q"), policy="a", params=SamplingParams(max_new_tokens=2))
    fields.update(bad)
    with pytest.raises(ValueError, match=match):
        engine.generate([GenerationRequest(**fields)])


def test_records_round_trip_through_json(engine: HFEngine) -> None:
    r = req("round trip", rid="rt-1", n=2, max_new_tokens=3, temperature=0.9, top_k=5, top_p=0.9,
            stop=["\n"], seed=4)
    r2 = GenerationRequest.from_dict(json.loads(json.dumps(r.to_dict())))
    assert r2 == r
    out = engine.generate([r2.to_dict()])[0]  # plain dicts are accepted too (process boundaries)
    for c in out:
        assert Completion.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def _build(cfg, policies=None):
    """build_engine as the trainer calls it: the config's blocks, the policy set from `policies`."""
    return build_engine(cfg.rollout, cfg.model, device="cpu", seed=int(cfg.seed),
                        policies=policies or engine_policies(cfg.policies, cfg.model.path))


def test_build_engine_from_config() -> None:
    cfg = validate(OmegaConf.create({"model": {"path": TINY, "dtype": "float32"},
                                     "rollout": {"engine_options": {"max_batch_size": 4}}}))
    eng = _build(cfg)
    assert isinstance(eng, HFEngine) and eng.max_batch_size == 4 and list(eng._policy_slot) == ["shared"]
    assert eng._slot("shared").lean is not None  # the tiny Llama runs the lean forward by default
    off = validate(OmegaConf.create({"model": {"path": TINY, "dtype": "float32"},
                                     "rollout": {"engine_options": {"lean_forward": False}}}))
    assert _build(off)._slot("shared").lean is None
    assert _build(cfg, policies={"p1": TINY, "p2": TINY})._slot("p1") is not None
    bad = {"rollout": {"engine_options": {"gpu_memory": 0.5}}}
    with pytest.raises(ConfigError, match="unknown option 'rollout.engine_options.gpu_memory' for engine 'hf'"):
        validate(OmegaConf.create(bad))  # refused when the config loads
    unchecked = validate(OmegaConf.create({}))
    OmegaConf.set_struct(unchecked, False)
    unchecked.rollout.engine_options = bad["rollout"]["engine_options"]
    with pytest.raises(ValueError, match="gpu_memory"):  # and by the builder, for unchecked configs
        _build(unchecked)
    for name in ("vllm", "openai"):  # their settings live in typed blocks, rollout.vllm / rollout.openai
        with pytest.raises(ConfigError, match=f"for engine '{name}'"):
            validate(OmegaConf.create({"rollout": {"engine": name, "engine_options": {"x": 1}}}))
        unchecked.rollout.engine = name
        with pytest.raises(ValueError, match=f"engine '{name}' takes rollout.{name}"):
            _build(unchecked)
    with pytest.raises(ConfigError, match="invalid value 'hff' for 'rollout.engine' \\(did you mean 'hf'\\?\\)"):
        validate(OmegaConf.create({"rollout": {"engine": "hff"}}))


def test_build_engine_takes_plain_blocks() -> None:
    """The blocks are read by attribute only: dataclass instances work as the config's nodes do."""
    eng = build_engine(RolloutConfig(engine_options={"max_batch_size": 3}), ModelConfig(path=TINY, dtype="float32"),
                       device="cpu", seed=5, policies={"a": TINY})
    assert isinstance(eng, HFEngine) and eng.max_batch_size == 3 and eng.seed == 5 and eng.device.type == "cpu"
    assert engine_policies({}, TINY) == {"shared": TINY}
    assert engine_policies({"a": PolicyConfig(), "b": PolicyConfig(base="other")}, TINY) == {"a": TINY, "b": "other"}
    cfg = validate(OmegaConf.create({"policies": {"a": {}, "b": {"base": TINY}}}))  # the config's nodes
    assert engine_policies(cfg.policies, "m") == {"a": "m", "b": TINY}


@pytest.mark.slow
def test_embedded_model_answers_two_plus_three() -> None:
    eng = HFEngine({"shared": "embedded:smollm2-135m-instruct"})
    c = eng.generate([GenerationRequest([{"role": "user", "content": "What is 2+3?"}], policy="shared",
                                        params=SamplingParams(temperature=0.0, max_new_tokens=32))])[0][0]
    assert "5" in c.text, c.text
    assert c.finish_reason == "stop" and c.response_ids[-1] == eng.tokenizer("shared").convert_tokens_to_ids("<|im_end|>")
    assert resolve_model_path("embedded:smollm2-135m-instruct") == eng._slot("shared").path
