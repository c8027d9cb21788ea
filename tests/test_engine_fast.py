"""The HF engine's decode-speed pieces (rollout/engines/hf_runtime/, utils/attention.py) compute what
the plain transformers path computes, and rollout.engine=auto picks by its documented rule."""
from __future__ import annotations

import importlib.util
from unittest import mock

import pytest
import torch
from omegaconf import OmegaConf

from numerics import exact_float64, forward_tol
from pettingllms.config.schema import RolloutConfig
from pettingllms.config.validate import validate
from pettingllms.rollout.engines import AUTO_VLLM_BELOW, auto_engine
from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams
from pettingllms.rollout.engines.hf import HFEngine
from pettingllms.rollout.engines.hf_runtime.kv_cache import buffered_cache, drop_front
from pettingllms.rollout.engines.hf_runtime.linear import last_position, pack_linears
from pettingllms.utils.attention import GQA_ATTENTION, use_gqa_attention
from pettingllms.utils.models import load_causal_lm

TINY = "tiny:test"


def test_buffered_cache_layers_hold_what_dynamic_layers_hold() -> None:
    from transformers import DynamicCache

    model = load_causal_lm(TINY, "float64")
    g = torch.Generator().manual_seed(0)
    plain, buffered = DynamicCache(config=model.config), buffered_cache(model.config, capacity=3)
    rows = 4
    for step, n in enumerate((5, 1, 1, 1, 1)):  # prefill, then decode steps past the initial capacity
        k = torch.randn(rows, 2, n, 8, generator=g, dtype=torch.float64)
        v = torch.randn(rows, 2, n, 8, generator=g, dtype=torch.float64)
        a = plain.update(k, v, 0)
        b = buffered.update(k, v, 0)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
        if step == 2:  # a finished row leaves the batch
            keep = torch.tensor([0, 2, 3])
            plain.batch_select_indices(keep)
            buffered.batch_select_indices(keep)
            rows = 3
    assert drop_front(buffered, 2)
    plain.layers[0].keys, plain.layers[0].values = plain.layers[0].keys[:, :, 2:], plain.layers[0].values[:, :, 2:]
    assert torch.equal(buffered.layers[0].keys, plain.layers[0].keys)
    k = torch.randn(3, 2, 1, 8, generator=g, dtype=torch.float64)
    assert torch.equal(buffered.update(k, k, 0)[0], plain.update(k, k, 0)[0])
    assert buffered.get_seq_length(0) == plain.get_seq_length(0) == 8
    assert not drop_front(DynamicCache(config=model.config), 1)  # plain layers are left alone


def test_append_column_gives_room_that_the_views_include() -> None:
    """The decode kernels write a token's key/value in place: the column `append_column` gives
    is the one a plain `update` would have appended, past the initial capacity too."""
    from transformers import DynamicCache

    model = load_causal_lm(TINY, "float64")
    g = torch.Generator().manual_seed(1)
    plain, buffered = DynamicCache(config=model.config), buffered_cache(model.config, capacity=4)
    k = torch.randn(2, 2, 3, 8, generator=g, dtype=torch.float64)
    plain.update(k, k, 0)
    buffered.update(k, k, 0)
    layer = buffered.layers[0]
    for step in range(4):  # columns 3, 4 (grows), 5, 6
        k = torch.randn(2, 2, 1, 8, generator=g, dtype=torch.float64)
        kbuf, vbuf, col = layer.append_column()
        assert col == 3 + step
        kbuf[:, :, col], vbuf[:, :, col] = k[:, :, 0], -k[:, :, 0]
        want_k, want_v = plain.update(k, -k, 0)
        assert torch.equal(layer.keys, want_k) and torch.equal(layer.values, want_v)


def test_gqa_attention_equals_transformers_sdpa_under_a_padding_mask() -> None:
    model = load_causal_lm(TINY, "float64")
    cfg = model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads  # the tiny model has grouped heads
    assert cfg._attn_implementation == GQA_ATTENTION  # every model we load gets it
    ids = torch.randint(3, cfg.vocab_size, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding, as the engine batches prompts
    mask[1, :1] = 0
    with exact_float64(), torch.no_grad():
        ours = model(input_ids=ids, attention_mask=mask).logits
        model.set_attn_implementation("sdpa")
        plain = model(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    scale = float(plain[real].abs().max())
    torch.testing.assert_close(ours[real], plain[real], rtol=0,
                               atol=forward_tol(cfg, ids.shape[1], scale, torch.float64))
    eager = load_causal_lm(TINY, "float64")
    eager.set_attn_implementation("eager")
    assert not use_gqa_attention(eager)  # only sdpa models switch


def test_last_position_is_a_contiguous_index_for_prefill() -> None:
    assert last_position(torch.zeros(4, 1, dtype=torch.long)) == 1
    keep = last_position(torch.zeros(4, 7, dtype=torch.long))
    hidden = torch.randn(4, 7, 5)
    picked = hidden[:, keep, :]
    assert picked.is_contiguous() and torch.equal(picked, hidden[:, -1:, :])


def _bf16_linear_supported() -> bool:
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


@pytest.mark.skipif(not _bf16_linear_supported(), reason="this CPU has no oneDNN bf16 GEMM")
def test_packed_linears_match_plain_and_follow_weight_updates() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 48, bias=True).to(torch.bfloat16)
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    plain = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert pack_linears(torch.nn.Sequential(layer)) == 1
    with torch.inference_mode():
        got = layer(x)
    # both are bf16 GEMMs with fp32 accumulation over 64 terms, then one bf16 rounding
    torch.testing.assert_close(got.float(), plain.float(), rtol=2 * torch.finfo(torch.bfloat16).eps, atol=0)
    with torch.no_grad():
        layer.weight.mul_(-1)  # an in-place change (weight sync) must reach the packed copy
    with torch.inference_mode():
        flipped = layer(x)
    expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(flipped.float(), expected.float(), rtol=2 * torch.finfo(torch.bfloat16).eps, atol=0)


@pytest.mark.skipif(not _bf16_linear_supported(), reason="this CPU has no oneDNN bf16 GEMM")
def test_bf16_engine_after_weight_sync_generates_as_a_fresh_engine(tmp_path) -> None:
    req = [GenerationRequest([{"role": "user", "content": "Count: one two"}], policy="a",
                             params=SamplingParams(temperature=0.0, max_new_tokens=6))]
    engine = HFEngine({"a": TINY}, dtype="bfloat16")
    engine.generate(req)  # packs the weights
    model = engine._slot("a").model
    new = {n: (p.detach().float() * 1.5).to(torch.bfloat16) for n, p in model.named_parameters() if "proj" in n}
    engine.load_weights("a", new)
    after = engine.generate(req)[0][0]
    fresh = HFEngine({"a": TINY}, dtype="bfloat16")
    fresh.load_weights("a", new)  # before its first generate: packs the new weights
    again = fresh.generate(req)[0][0]
    assert after.response_ids == again.response_ids and after.logprobs == again.logprobs


def test_bf16_engine_after_a_lora_sync_generates_with_the_merged_weights() -> None:
    """A LoRA update merged (by our kernel where it runs) after the engine has generated, with no
    sleep in between: the next generation uses the merged weights, as a fresh engine that got the
    update before its first generation does (the packed copies follow the version counters)."""
    from policy_helpers import TINY as POLICY_MODEL, make_cfg, make_samples
    from pettingllms.trainer.assemble import build_policy_set

    worker = build_policy_set(make_cfg(lora=True, dtype="bfloat16"), ["solo"]).workers["shared"]
    worker.update(make_samples("solo", [1.0, -1.0, 0.5], seed=9), 0)
    update = worker.weight_update()
    req = [GenerationRequest([{"role": "user", "content": "Count: one two"}], policy="shared",
                             params=SamplingParams(temperature=0.7, max_new_tokens=6, seed=4))]
    engine = HFEngine({"shared": POLICY_MODEL}, dtype="bfloat16")
    before = engine.generate(req)[0][0]  # packs the base weights
    engine.update_weights(update)
    after = engine.generate(req)[0][0]
    fresh = HFEngine({"shared": POLICY_MODEL}, dtype="bfloat16")
    fresh.update_weights(update)
    want = fresh.generate(req)[0][0]
    assert (after.response_ids, after.logprobs) == (want.response_ids, want.logprobs)
    assert after.logprobs != before.logprobs


def test_sleep_frees_merged_lora_weights_and_gives_them_back_unchanged() -> None:
    """While asleep, a one-policy model keeps no LoRA-merged weight (the next sync rewrites them):
    generating after it merges them again from the same factors, bit for bit; a new update after
    it generates as a fresh engine with that update; an update that does not fit still changes
    nothing. A model that serves two policies keeps its weights."""
    from policy_helpers import TINY as POLICY_MODEL, make_cfg, make_samples
    from pettingllms.trainer.assemble import build_policy_set
    from pettingllms.rollout.engines.weights import WeightUpdate

    worker = build_policy_set(make_cfg(lora=True, dtype="bfloat16"), ["solo"]).workers["shared"]
    req = [GenerationRequest([{"role": "user", "content": "Count: one two"}], policy="shared",
                             params=SamplingParams(temperature=0.7, max_new_tokens=6, seed=4))]
    engine = HFEngine({"shared": POLICY_MODEL}, dtype="bfloat16")
    worker.update(make_samples("solo", [1.0, -1.0, 0.5], seed=9), 0)
    first = worker.weight_update()
    engine.update_weights(first)
    before = engine.generate(req)[0][0]
    slot = engine._slot("shared")
    merged = {k: slot.params[k].detach().clone() for k in slot.merged}
    engine.sleep()
    assert set(slot.released) == set(merged) and all(slot.params[k].numel() == 0 for k in merged)
    again = engine.generate(req)[0][0]
    assert not slot.released and all(torch.equal(slot.params[k], v) for k, v in merged.items())
    assert (again.response_ids, again.logprobs) == (before.response_ids, before.logprobs)

    engine.sleep()
    last_b = [k for k in first.tensors if k.endswith(".lora_B.weight")][-1]
    bad = dict(first.tensors, **{last_b: torch.zeros(first.tensors[last_b].shape[0] + 1,
                                                     first.tensors[last_b].shape[1])})
    with pytest.raises(ValueError, match="does not fit"):
        engine.update_weights(WeightUpdate("shared", "lora", bad, first.lora_config, version=2))
    assert engine.generate(req)[0][0].logprobs == before.logprobs
    engine.sleep()
    worker.update(make_samples("solo", [-1.0, 1.0, 0.5], seed=10), 1)
    second = worker.weight_update()
    engine.update_weights(second)
    fresh = HFEngine({"shared": POLICY_MODEL}, dtype="bfloat16")
    fresh.update_weights(second)
    got, want = engine.generate(req)[0][0], fresh.generate(req)[0][0]
    assert (got.response_ids, got.logprobs) == (want.response_ids, want.logprobs)

    two = HFEngine({"a": POLICY_MODEL, "b": POLICY_MODEL}, dtype="bfloat16")
    two.update_weights(WeightUpdate("a", "lora", second.tensors, second.lora_config, version=1))
    two.sleep()
    assert not two._slot("a").released


def test_sleep_drops_the_packed_copies_and_the_next_generate_rebuilds_them() -> None:
    """What the trainer's update may use: the lean forward's packed weights go while the engine
    sleeps, and generation after it is the same as before."""
    req = [GenerationRequest([{"role": "user", "content": "Count: one two"}], policy="a",
                             params=SamplingParams(temperature=0.7, max_new_tokens=6, seed=3))]
    engine = HFEngine({"a": TINY}, dtype="bfloat16")
    before = engine.generate(req)[0][0]
    lean = engine._slot("a").lean
    assert lean.layers and lean.head is not None
    engine.sleep()
    assert lean.layers == [] and lean.head is None
    after = engine.generate(req)[0][0]
    assert lean.layers and (after.response_ids, after.logprobs) == (before.response_ids, before.logprobs)
    plain = HFEngine({"a": TINY}, dtype="bfloat16", lean_forward=False)
    plain.generate(req)
    packed = [m for m in plain._slot("a").model.modules() if getattr(m, "_packed_key", None) is not None]
    assert packed or not _bf16_linear_supported()
    plain.sleep()
    assert all(m._packed is None and m._packed_key is None for m in packed)
    assert plain.generate(req)[0][0].response_ids


def _rollout(batch: int, k: int, **rollout):
    """The validated `rollout` block of an engine=auto config."""
    cfg = validate(OmegaConf.create({"model": {"path": TINY}, "rollout": {"engine": "auto", "batch_size": batch,
                                                                          "k": k, **rollout}}))
    return cfg.rollout


def test_auto_engine_rule(monkeypatch) -> None:
    from pettingllms.rollout.engines.hf_runtime import cpu_kernels

    assert auto_engine(_rollout(8, 4))[0] == "hf"  # the training bench's 32 sequences per call
    assert auto_engine(_rollout(AUTO_VLLM_BELOW, 1))[0] == "hf"
    with mock.patch.object(importlib.util, "find_spec", lambda name, *a: object()), \
            mock.patch.object(torch.cuda, "is_available", lambda: False):
        monkeypatch.setattr(cpu_kernels, "available", lambda: True)  # hf's CPU kernels beat vLLM at any size
        assert auto_engine(_rollout(1, 1))[0] == "hf"
        assert "decode kernels" in auto_engine(_rollout(1, 1))[1]
    monkeypatch.setattr(cpu_kernels, "available", lambda: False)  # the rule measured without them
    with mock.patch.object(importlib.util, "find_spec", lambda name, *a: object()):
        assert auto_engine(_rollout(1, 1)) == ("vllm", "1 sequences per call (< 8: vLLM decodes faster at small batches)")
        assert auto_engine(_rollout(1, 1, engine_options={"max_batch_size": 4}))[0] == "hf"  # hf's options
        assert auto_engine(RolloutConfig(batch_size=1, k=1))[0] == "vllm"  # a plain dataclass block reads the same
    with mock.patch.object(importlib.util, "find_spec", lambda name, *a: None):
        assert auto_engine(_rollout(1, 1)) == ("hf", "vllm is not installed")
    with mock.patch.object(importlib.util, "find_spec", lambda name, *a: object()):
        lora = {"shared": 16}  # the LoRA policies, as the trainer passes them to build_engine
        with mock.patch.object(torch.cuda, "is_available", lambda: False):
            assert auto_engine(_rollout(1, 1), lora)[0] == "hf"  # vLLM's CPU LoRA path is the slow one
        with mock.patch.object(torch.cuda, "is_available", lambda: True):
            assert auto_engine(_rollout(1, 1), lora)[0] == "vllm"


def test_auto_builds_hf_for_training_sized_calls() -> None:
    from pettingllms.config.schema import ModelConfig
    from pettingllms.rollout.engines import build_engine

    engine = build_engine(_rollout(4, 4, engine_options={"max_batch_size": 4}), ModelConfig(path=TINY),
                          device="cpu", seed=0, policies={"shared": TINY})
    assert isinstance(engine, HFEngine)
