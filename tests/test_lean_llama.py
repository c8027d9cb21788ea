"""The HF engine's lean Llama forward computes what the transformers forward computes: prefill under
left padding, decode steps from the cache, after weight changes, in float64 (exact up to rounding)
and bf16 (the packed GEMMs); models it does not cover keep the transformers path."""
from __future__ import annotations

import copy

import pytest
import torch

from numerics import exact_float64, forward_tol
from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams
from pettingllms.rollout.engines.hf import HFEngine
from pettingllms.rollout.engines.hf_runtime.kv_cache import buffered_cache
from pettingllms.rollout.engines.hf_runtime.lean_llama import LeanLlama
from pettingllms.rollout.engines.hf_runtime.linear import last_position
from pettingllms.utils.models import load_causal_lm

TINY = "tiny:test"


def transformers_forward(model, ids, mask, positions, cache) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=None if bool(mask.all()) else mask, position_ids=positions,
                use_cache=True, logits_to_keep=last_position(ids), past_key_values=cache)
    return out.logits[:, -1, :].float()


def run(forward, model, lengths: list[int], steps: int, seed: int = 0) -> list[torch.Tensor]:
    """Logits of a left-padded prefill (rows of the given lengths) and `steps` greedy decode steps."""
    gen = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    ids = torch.randint(3, model.config.vocab_size, (len(lengths), longest), generator=gen)
    mask = torch.zeros(len(lengths), longest, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, longest - n:] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = buffered_cache(model.config, longest + steps)
    with torch.inference_mode():
        logits = [forward(ids, mask, positions, cache)]
        next_pos = positions[:, -1:] + 1
        for _ in range(steps):
            mask = torch.cat([mask, mask.new_ones(len(lengths), 1)], dim=1)
            token = logits[-1].argmax(-1, keepdim=True)
            logits.append(forward(token, mask, next_pos, cache))
            next_pos = next_pos + 1
    return logits


def compare_in_float64(model, lean: LeanLlama, lengths: list[int], steps: int) -> None:
    """The lean and transformers forwards on the same prefill and decode steps agree up to float64
    rounding (RMSNorm kept in float64 on both sides)."""
    with exact_float64():
        want = run(lambda *a: transformers_forward(model, *a), model, lengths, steps)
        got = run(lean.forward, model, lengths, steps)
    scale = max(float(w.abs().max()) for w in want)
    tol = forward_tol(model.config, max(lengths) + steps, scale, torch.float64)
    for step, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=0, atol=tol, msg=lambda m, s=step: f"step {s}: {m}")


@pytest.mark.parametrize("lengths", [[7], [9, 4, 1], [5, 5]], ids=["one-row", "left-padded", "no-padding"])
def test_matches_transformers_in_float64(lengths) -> None:
    model = load_causal_lm(TINY, "float64")
    compare_in_float64(model, LeanLlama(model), lengths, steps=4)


def random_model(kind: str):
    """A small random model of another covered layout, float64, sdpa attention as we load models."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from pettingllms.utils.attention import use_gqa_attention

    shape = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.3)
    if kind == "qwen2":  # biases on q/k/v, untied head
        config, cls = Qwen2Config(**shape, tie_word_embeddings=False), Qwen2ForCausalLM
    else:  # Llama 3 rotary scaling, biases on every attention projection
        config, cls = LlamaConfig(**shape, attention_bias=True, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16, "rope_theta": 10000.0}), LlamaForCausalLM
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls(config).double().eval()
        for name, p in model.named_parameters():  # biases start at 0: make them matter
            if name.endswith("bias"):
                torch.nn.init.normal_(p, std=0.3)
    use_gqa_attention(model)
    return model


@pytest.mark.parametrize("kind", ["qwen2", "llama3_rope_bias"])
def test_matches_transformers_for_other_layouts(kind) -> None:
    model = random_model(kind)
    compare_in_float64(model, LeanLlama(model), [20, 6], steps=4)


def test_matches_transformers_in_bf16_with_packed_weights() -> None:
    model = load_causal_lm(TINY, "bfloat16")
    lean = LeanLlama(model)
    want = run(lambda *a: transformers_forward(model, *a), model, [12, 3], steps=3)
    got = run(lean.forward, model, [12, 3], steps=3)
    for g, w in zip(got, want):
        # bf16 keeps 8 bits: a few roundings apart at most; a wrong rotary, mask or weight is O(1)
        torch.testing.assert_close(g, w, rtol=0, atol=0.05 * float(w.abs().max()))


def test_follows_weights_changed_in_place() -> None:
    model = load_causal_lm(TINY, "float64")
    lean = LeanLlama(model)
    with exact_float64():
        run(lean.forward, model, [6, 2], steps=1)  # builds the fused copies
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight.mul_(1.5)
        model.model.layers[1].mlp.up_proj.weight.add_(0.1)
        model.lm_head.weight.mul_(0.5)
    compare_in_float64(model, lean, [6, 2], steps=2)


def test_engine_gives_the_same_completions_with_and_without_it() -> None:
    requests = [GenerationRequest([{"role": "user", "content": text}], policy="a", request_id=str(i),
                                  params=SamplingParams(n=3, temperature=0.8, top_p=0.9, max_new_tokens=12, seed=7 + i))
                for i, text in enumerate(["Count to five.", "Name a colour, then another one please."])]
    lean = HFEngine({"a": TINY}, dtype="float32")
    plain = HFEngine({"a": TINY}, dtype="float32", lean_forward=False)
    assert lean._slot("a").lean is not None and plain._slot("a").lean is None
    for a, b in zip(lean.generate(requests), plain.generate(requests)):
        for x, y in zip(a, b):
            assert x.response_ids == y.response_ids
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


def test_models_it_does_not_cover_keep_the_transformers_path() -> None:
    model = load_causal_lm(TINY, "float32")
    assert LeanLlama.supports(model)
    for change in ({"hidden_act": "gelu"}, {"mlp_bias": True}, {"model_type": "gpt2"},
                   {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}):
        other = copy.copy(model)
        other.config = copy.deepcopy(model.config)
        for key, value in change.items():
            setattr(other.config, key, value)
        assert not LeanLlama.supports(other), change
        with pytest.raises(ValueError, match="does not cover"):
            LeanLlama(other)
