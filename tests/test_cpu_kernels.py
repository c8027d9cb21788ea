"""The CPU kernels: the bf16 GEMM over packed weights (any rows), SwiGLU and the decode-step attention compute what a float64 reference computes up to bf16 output
rounding (several weights and a bias in one call; the
cache's strided views, padding masks, grouped-query heads), the lean forward's routing, and the
fallback to oneDNN and the matmul attention where the kernels cannot run."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pettingllms.rollout.engines.hf import HFEngine
from pettingllms.rollout.engines.hf_runtime import cpu_kernels
from pettingllms.rollout.engines.hf_runtime.lean_llama import LeanLlama, _Linear
from pettingllms.utils.models import load_causal_lm

KERNEL = cpu_kernels.load()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="no AVX512-BF16 CPU or no C++ toolchain here")


def reference(x, weights, bias):
    out = x.double() @ torch.cat(weights).double().T
    return out + bias.double() if bias is not None else out


@needs_kernel
@pytest.mark.parametrize("rows", [1, 3, 6, 7, 13, 40])
@pytest.mark.parametrize("width", [576, 100, 2], ids=["k576", "k100", "k2"])
def test_gemm_matches_a_float64_reference(rows, width) -> None:
    gen = torch.Generator().manual_seed(rows * 1000 + width)
    # 7 + 64 + 130 = 201 columns: weight boundaries inside a 16-column block, a partial last block,
    # and 13 blocks (three 64-column tasks and one of 16)
    weights = [torch.randn(n, width, generator=gen).to(torch.bfloat16) for n in (7, 64, 130)]
    bias = torch.randn(201, generator=gen).to(torch.bfloat16)
    x = torch.randn(rows, width, generator=gen).to(torch.bfloat16)
    packed = cpu_kernels.pack(KERNEL, weights)
    assert packed.shape == (13, width // 2, 16, 2)
    for b in (bias, None):
        got = cpu_kernels.gemm(KERNEL, x, packed, 201, b)
        want = reference(x, weights, b)
        assert got.dtype == torch.bfloat16 and got.shape == (rows, 201)
        torch.testing.assert_close(got.double(), want, rtol=2 ** -8, atol=1e-3 * width ** 0.5)
    with pytest.raises(ValueError, match="bf16 GEMM takes"):
        cpu_kernels.gemm(KERNEL, x, packed, 209, None)  # more columns than were packed
    with pytest.raises(ValueError, match="pack takes"):
        cpu_kernels.pack(KERNEL, [torch.randn(4, 5).to(torch.bfloat16)])  # odd width


@needs_kernel
@pytest.mark.parametrize("rows", [1, 9])
def test_silu_mul_rounds_as_torch_does(rows) -> None:
    gen = torch.Generator().manual_seed(rows)
    y = (torch.randn(rows, 2 * 1536, generator=gen) * 4).to(torch.bfloat16)
    want = F.silu(y[:, :1536]) * y[:, 1536:]
    got = cpu_kernels.silu_mul(KERNEL, y)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, 1536)
    # the same two bf16 roundings; exp in another implementation can move the first by one step
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=1e-30)


@needs_kernel
def test_rope_decode_rotates_as_the_llama_forward_and_writes_the_cache_column() -> None:
    gen = torch.Generator().manual_seed(3)
    b, heads, kv_heads, d, capacity = 3, 6, 2, 64, 9
    y = (torch.randn(b, (heads + 2 * kv_heads) * d, generator=gen) * 3).to(torch.bfloat16)
    angles = torch.randn(b, d // 2, generator=gen) * 50
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    kbuf = torch.zeros(b, kv_heads, capacity + 2, d, dtype=torch.bfloat16)[:, :, 2:]  # a strided view
    vbuf = torch.zeros(b, kv_heads, capacity, d, dtype=torch.bfloat16)
    q = cpu_kernels.rope_decode(KERNEL, y, cos, sin, heads, kv_heads, kbuf, vbuf, 4)
    # the lean forward's torch ops, in bf16
    qk = y[:, :(heads + kv_heads) * d].view(b, heads + kv_heads, d)
    half = d // 2
    want = qk * cos[:, None] + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin[:, None]
    assert torch.equal(q, want[:, :heads])  # the same three roundings: bit for bit
    assert torch.equal(kbuf[:, :, 4], want[:, heads:])
    assert torch.equal(vbuf[:, :, 4], y[:, (heads + kv_heads) * d:].view(b, kv_heads, d))
    others = [c for c in range(capacity) if c != 4]
    assert not kbuf[:, :, others].any() and not vbuf[:, :, others].any()  # nothing else written
    with pytest.raises(ValueError, match="rope_decode takes"):
        cpu_kernels.rope_decode(KERNEL, y, cos, sin, heads, kv_heads, kbuf, vbuf, capacity)


@needs_kernel
@pytest.mark.parametrize("count", [1, 64, 1024])
def test_top_candidates_match_torch(count) -> None:
    gen = torch.Generator().manual_seed(count)
    logits = torch.randn(5, 49157, generator=gen) * 4  # a vocabulary that is no multiple of 16
    logits[1] /= 4
    logits[1, 100:200] = 7.5  # the row's 100 largest, tied across the cut: the lower ids stay
    logits[2, :50] = float("-inf")
    divisor = torch.tensor([0.7, 1.0, 0.3, 2.0, 1.0])
    values, ids, lse = cpu_kernels.top_candidates(KERNEL, logits, divisor, count)
    scaled = logits / divisor[:, None]
    want_values, _ = scaled.topk(count, dim=-1)
    assert torch.equal(values, want_values)  # the same divisions, the same order
    assert torch.equal(scaled.gather(1, ids), values)
    for r in range(5):  # largest first; among equal values the lower id first
        pairs = list(zip((-values[r]).tolist(), ids[r].tolist()))
        assert pairs == sorted(pairs)
        assert len(set(ids[r].tolist())) == count
    if count < 100:
        assert ids[1].tolist() == list(range(100, 100 + count))
    # two fp32 sums of V exp terms in different orders (ours: 16 lanes of V/16 terms each): the
    # logsumexp moves by their relative error, at most about (V/16) fp32 epsilons
    torch.testing.assert_close(lse, scaled.logsumexp(-1), rtol=0, atol=(49157 / 16) * 2 ** -24)
    with pytest.raises(ValueError, match="top_candidates takes"):
        cpu_kernels.top_candidates(KERNEL, logits.double(), divisor, count)


@needs_kernel
def test_the_engine_samples_the_same_with_and_without_the_candidates_kernel() -> None:
    """The truncated draw through top_candidates picks the tokens the torch path picks."""
    from pettingllms.rollout.engines.hf_runtime.sampling import _draw_truncated, _Scaled

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 4000, generator=gen) * 3
    divisor = torch.full((16,), 0.7)
    top_k = torch.tensor([4000] * 8 + [40] * 8)
    top_p = torch.tensor([0.95] * 4 + [0.5] * 4 + [2.0] * 4 + [0.9] * 4)
    min_p = torch.tensor([0.0] * 12 + [0.05] * 4)
    uniforms = torch.rand(16, generator=gen)
    got = _draw_truncated(_Scaled(logits, divisor, KERNEL), top_k, top_p, min_p, uniforms)
    want = _draw_truncated(_Scaled(logits, divisor), top_k, top_p, min_p, uniforms)
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-5)


@needs_kernel
def _attention_reference(q, k, v, key_mask, scale):
    """softmax(q k^T * scale) v in float64, grouped-query heads, masked keys left out."""
    group = q.shape[1] // k.shape[1]
    kk = k.double().repeat_interleave(group, dim=1)
    vv = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("bhd,bhld->bhl", q.double(), kk) * scale
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))
    return torch.einsum("bhl,bhld->bhd", scores.softmax(-1), vv)


@needs_kernel
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "left-padding"])
@pytest.mark.parametrize("batch,heads,kv_heads,length,d", [(1, 9, 3, 70, 64), (3, 4, 4, 5, 16), (4, 8, 2, 33, 128)])
def test_decode_attention_matches_a_float64_reference(batch, heads, kv_heads, length, d, padded) -> None:
    gen = torch.Generator().manual_seed(batch * 100 + length)
    capacity = length + 7
    q = torch.randn(batch, 1, heads + kv_heads, d, generator=gen).to(torch.bfloat16)[:, 0, :heads]  # a strided view
    kbuf = torch.randn(batch, kv_heads, capacity, d, generator=gen).to(torch.bfloat16)
    vbuf = torch.randn(batch, kv_heads, capacity, d, generator=gen).to(torch.bfloat16)
    k, v = kbuf[:, :, :length], vbuf[:, :, :length]  # the cache's views: room to grow after them
    key_mask = None
    if padded:  # row r starts r columns late; every row keeps at least its last key
        key_mask = torch.ones(batch, length, dtype=torch.bool)
        for r in range(batch):
            key_mask[r, :min(r, length - 1)] = False
    got = cpu_kernels.decode_attention(KERNEL, q, k, v, key_mask, 0.125)
    want = _attention_reference(q, k, v, key_mask, 0.125)
    assert got.dtype == torch.bfloat16 and got.shape == (batch, heads, d)
    torch.testing.assert_close(got.double(), want, rtol=2 ** -8, atol=1e-3)


@needs_kernel
@pytest.mark.parametrize("rows", [1, 5])
def test_rms_norm_matches_the_llama_norm(rows) -> None:
    gen = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, 576, generator=gen) * 3).to(torch.bfloat16)
    weight = torch.randn(576, generator=gen).to(torch.bfloat16)
    xf = x.float()
    want = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16)
    got = cpu_kernels.rms_norm(KERNEL, x, weight, 1e-5)
    assert got.dtype == torch.bfloat16
    # the same two bf16 roundings; an fp32 sum of squares in another order can move the first
    # rounding by one bf16 step, and the second by one more: 2 steps of 2^-7 (relative) at most
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=0)
    with pytest.raises(ValueError, match="rms_norm takes"):
        cpu_kernels.rms_norm(KERNEL, x, weight.float(), 1e-5)


@needs_kernel
@pytest.mark.parametrize("rows, width", [(37, 70), (4, 576), (1, 16)])
def test_lora_merge_rounds_base_plus_the_product(rows, width) -> None:
    """bf16(base + B A): within the bf16 rounding (2^-8 relative: 8 significant bits) of the float64
    value, plus the fp32 sum's error (r products and the base summed in order: (r + 1) 2^-24 of the
    sum of magnitudes), in place or not; `LoraFactor.merge` takes it with the kernel, and torch's
    fp32 delta (the same bound) without."""
    from pettingllms.rollout.engines.weights import LoraFactor

    gen = torch.Generator().manual_seed(rows + width)
    r = 16
    base = torch.randn(rows, width, generator=gen).to(torch.bfloat16)
    a, b = torch.randn(r, width, generator=gen), torch.randn(rows, r, generator=gen) * 0.05
    out = torch.empty_like(base)
    cpu_kernels.lora_merge(KERNEL, base, b, a, out)
    exact = base.double() + b.double() @ a.double()
    magnitude = base.double().abs() + b.double().abs() @ a.double().abs()
    bound = 2 ** -8 * exact.abs() + (1 + 2 ** -8) * (r + 1) * 2 ** -24 * magnitude
    assert ((out.double() - exact).abs() <= bound).all()
    in_place = base.clone()
    cpu_kernels.lora_merge(KERNEL, in_place, b, a, in_place)
    assert torch.equal(in_place, out)
    factor = LoraFactor(a / 2, b, 2.0)  # the scaling goes onto B, as the kernel expects it
    assert torch.equal(factor.merge(base, torch.empty_like(base), KERNEL), out)
    torch_merged = factor.merge(base, torch.empty_like(base))
    assert ((torch_merged.double() - exact).abs() <= bound).all()
    with pytest.raises(ValueError, match="lora_merge takes"):
        cpu_kernels.lora_merge(KERNEL, base, b, a, out.float())


@needs_kernel
def test_refuses_inputs_it_does_not_take() -> None:
    packed = cpu_kernels.pack(KERNEL, [torch.randn(8, 32).to(torch.bfloat16)])
    for x in (torch.randn(5, 32), torch.randn(1, 16).to(torch.bfloat16), torch.randn(0, 32).to(torch.bfloat16)):
        with pytest.raises(ValueError, match="bf16 GEMM takes"):
            cpu_kernels.gemm(KERNEL, x, packed, 8, None)
    assert not cpu_kernels.takes([torch.randn(8, 32)])  # fp32
    q, kv = torch.zeros(1, 4, 16, dtype=torch.bfloat16), torch.zeros(1, 3, 5, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="decode attention takes"):  # 4 heads over 3 K/V heads
        cpu_kernels.decode_attention(KERNEL, q, kv, kv, None, 1.0)
    q24, kv24 = torch.zeros(1, 4, 24, dtype=torch.bfloat16), torch.zeros(1, 2, 5, 24, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="decode attention takes"):  # head size not a multiple of 16
        cpu_kernels.decode_attention(KERNEL, q24, kv24, kv24, None, 1.0)
    with pytest.raises(ValueError, match="key_mask must be"):
        cpu_kernels.decode_attention(KERNEL, q, kv[:, :2], kv[:, :2], torch.ones(1, 4, dtype=torch.bool), 1.0)
    assert not cpu_kernels.takes([torch.randn(32, 8).to(torch.bfloat16).T])  # not row-major
    with pytest.raises(ValueError, match="silu_mul takes"):
        cpu_kernels.silu_mul(KERNEL, torch.zeros(2, 5, dtype=torch.bfloat16))


class _Spy:
    """Stands in for the compiled module: records calls, computes the reference."""

    def __init__(self):
        self.calls = []

    def pack_pairs(self, weights):
        return torch.cat(weights)  # the spy's "packed" copy: the weights themselves

    def gemm_packed(self, x, packed, n, bias):
        self.calls.append(x.shape[0])
        out = x.float() @ packed[:n].float().T
        return (out + bias if bias.numel() else out).to(torch.bfloat16)


def test_lean_linear_runs_every_row_count_through_the_kernel() -> None:
    spy = _Spy()
    weights = [torch.randn(16, 32).to(torch.bfloat16), torch.randn(8, 32).to(torch.bfloat16)]
    bias = torch.randn(24).to(torch.bfloat16)
    linear = _Linear(weights, [bias[:16], bias[16:]], spy)
    assert linear.weight is None  # no oneDNN copy next to the kernel's
    for rows in (1, 4, 12):
        spy.calls.clear()
        x = torch.randn(1, rows, 32).to(torch.bfloat16)
        out = linear(x)
        assert out.shape == (1, rows, 24) and spy.calls == [rows]
        want = x.float() @ torch.cat(weights).float().T + bias.float()
        torch.testing.assert_close(out.float(), want.to(torch.bfloat16).float())
    assert _Linear([torch.randn(16, 32)], [None], spy).kernel is None  # fp32 weights: never
    assert _Linear([torch.randn(16, 31).to(torch.bfloat16)], [None], spy).kernel is None  # odd width


def test_falls_back_where_it_cannot_run(monkeypatch) -> None:
    monkeypatch.setattr(cpu_kernels, "_cpu_has_avx512_bf16", lambda: False)
    assert cpu_kernels.load.__wrapped__() is None and not cpu_kernels.available()
    monkeypatch.setattr(cpu_kernels, "_cpu_has_avx512_bf16", lambda: True)
    monkeypatch.setenv("PETTINGLLMS_NO_CPU_KERNELS", "1")
    assert cpu_kernels.load.__wrapped__() is None and not cpu_kernels.available()
    monkeypatch.delenv("PETTINGLLMS_NO_CPU_KERNELS")
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert not cpu_kernels.available()
    monkeypatch.delenv("CXX")

    def broken(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", broken)
    assert cpu_kernels.load.__wrapped__() is None  # logged, not raised


def test_engine_option_turns_it_off() -> None:
    on = HFEngine({"a": "tiny:test"}, dtype="bfloat16")
    off = HFEngine({"a": "tiny:test"}, dtype="bfloat16", cpu_kernels=False)
    assert off._slot("a").lean.kernel is None
    assert on._slot("a").lean.kernel is KERNEL


@needs_kernel
def test_lean_decode_with_the_kernel_stays_close_to_onednn() -> None:
    from test_lean_llama import run

    model = load_causal_lm("tiny:test", "bfloat16")
    with_kernel, without = LeanLlama(model), LeanLlama(model, kernels=False)
    got = run(with_kernel.forward, model, [9, 5, 2], steps=4)
    want = run(without.forward, model, [9, 5, 2], steps=4)
    assert with_kernel.kernel is KERNEL and without.kernel is None
    # prefill (its LM head runs on 3 rows: the kernel) and decode steps of 3 rows: a few bf16
    # roundings apart at most; a wrong weight or offset is O(1)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0.05 * float(w.abs().max()))
