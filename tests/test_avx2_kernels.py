"""The AVX2 + FMA GEMM over bf16-stored weights (`hf_runtime.avx2_kernels`): within the rounding
its dtypes allow of a float64 reference (bf16 or fp32 inputs, several weights and a bias, partial
column blocks, 1-16 rows, 1 and 2 threads), bf16 outputs rounded as torch rounds, the kernel
choice (`PETTINGLLMS_CPU_KERNELS`), and the lean forward running its products through it. Runs on
any x86-64 CPU with AVX2 + FMA, AVX512-BF16 ones included."""
from __future__ import annotations

import pytest
import torch

from numerics import THREADS, num_threads
from pettingllms.rollout.engines.hf_runtime import avx2_kernels, cpu_kernels
from pettingllms.rollout.engines.hf_runtime.lean_llama import LeanLlama
from pettingllms.utils import precision
from pettingllms.utils.models import load_causal_lm

KERNEL = avx2_kernels.load()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="no AVX2 + FMA CPU or no C++ toolchain here")


def bound(x: torch.Tensor, w: torch.Tensor, want: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    """Per output: an fp32 sum of K products in any order is off by at most K eps32 sum|x w|
    (Higham eq. 3.5; bf16 x bf16 products are exact, fp32 x bf16 ones add one rounding each, inside
    that bound with K + 1), plus half an ulp of the output dtype for its one rounding."""
    k = x.shape[1]
    sums = (k + 1) * torch.finfo(torch.float32).eps * (x.double().abs() @ w.double().abs().T)
    eps = torch.finfo(out).eps
    return sums * (1 + eps) + eps / 2 * want.abs()


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7, 13, 16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gemm_matches_a_float64_reference(rows, dtype) -> None:
    gen = torch.Generator().manual_seed(rows)
    # output widths 201, 213, 200: weight boundaries inside an 8-column block, partial last blocks,
    # and 2, 3 and 1 blocks left after the 32-column tasks
    for width, parts in ((576, (7, 64, 130)), (100, (3, 210)), (2, (200,))):
        weights = [torch.randn(n, width, generator=gen).to(torch.bfloat16) for n in parts]
        w = torch.cat(weights)
        n = w.shape[0]
        bias = torch.randn(n, generator=gen)
        x = torch.randn(rows, width, generator=gen).to(dtype)
        packed = avx2_kernels.pack(KERNEL, weights)
        assert packed.shape == ((n + 7) // 8, width // 2, 8, 2)
        for b in (bias, None):
            want = x.double() @ w.double().T + (b.double() if b is not None else 0)
            for threads in THREADS:
                with num_threads(threads):
                    got = avx2_kernels.gemm(KERNEL, x, packed, n, b)
                assert got.dtype == dtype and got.shape == (rows, n)
                err = (got.double() - want).abs()
                assert bool((err <= bound(x, w, want, dtype)).all()), f"worst error {float(err.max())}"


@needs_kernel
def test_a_rows_numbers_do_not_depend_on_its_batch() -> None:
    """Whatever tile a row lands in (2 to 16 rows: tiles of up to six, split evenly), its sums run in
    the same order, so a row's numbers are the same in every batch of two or more (sampling stays
    reproducible as rows finish and leave). One row alone takes the one-row tile, whose two FMA
    chains a block sum the pairs' halves apart: the last bit may differ there."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(70, 96, generator=gen).to(torch.bfloat16)
    packed = avx2_kernels.pack(KERNEL, [w])
    x = torch.randn(17, 96, generator=gen)
    pairs = torch.cat([avx2_kernels.gemm(KERNEL, x[i:i + 2], packed, 70, None)[:1] for i in range(16)])
    for rows in range(2, 17):
        assert torch.equal(avx2_kernels.gemm(KERNEL, x[:rows], packed, 70, None), pairs[:rows]), rows


@needs_kernel
def test_bf16_outputs_round_as_torch_does() -> None:
    """K = 2: the kernel's sum (x0 w0 + x1 w1) + bias is torch's fp32 sum in the same order, so the
    bf16 results must be torch's roundings bit for bit: ties to even, infinities, NaN."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(12, 2, generator=gen).to(torch.bfloat16)
    x[0] = x[1] = x[2] = 1.0
    x[3, 0] = float("nan")
    x[4, 0] = 3e38  # overflows to inf
    w = torch.randn(9, 2, generator=gen).to(torch.bfloat16)
    w[0] = torch.tensor([1.0, 2 ** -8])  # 1 + 2^-8: a tie, rounds down to 1
    w[1] = torch.tensor([1.0, 3 * 2 ** -8])  # 1 + 3 * 2^-8: a tie, rounds up to even
    w[2, 0] = 3e38
    bias = torch.randn(9, generator=gen) * 1e-3
    bias[:2] = 0
    got = avx2_kernels.gemm(KERNEL, x, avx2_kernels.pack(KERNEL, [w]), 9, bias)
    xf, wf = x.float(), w.float()
    want = ((xf[:, :1] * wf[:, 0] + xf[:, 1:] * wf[:, 1]) + bias).to(torch.bfloat16)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert float(got[0, 0]) == 1.0 and float(got[0, 1]) == 1 + 2 ** -6
    assert torch.isnan(got[3]).all() and torch.isinf(got[4, 2])


@needs_kernel
def test_refuses_inputs_it_does_not_take() -> None:
    packed = avx2_kernels.pack(KERNEL, [torch.randn(8, 32).to(torch.bfloat16)])
    for x, n in ((torch.randn(2, 30), 8), (torch.randn(2, 32).double(), 8), (torch.randn(2, 32), 9),
                 (torch.randn(0, 32), 8)):
        with pytest.raises(ValueError, match="AVX2 GEMM takes"):
            avx2_kernels.gemm(KERNEL, x, packed, n, None)
    for weights in ([torch.randn(4, 32)], [torch.randn(4, 5).to(torch.bfloat16)],
                    [torch.randn(32, 8).to(torch.bfloat16).T]):  # fp32, odd width, not row-major
        with pytest.raises(ValueError, match="pack takes"):
            avx2_kernels.pack(KERNEL, weights)


def test_the_choice_and_where_it_cannot_run(monkeypatch) -> None:
    monkeypatch.setenv(cpu_kernels.CHOICE_ENV, "avx2")
    assert cpu_kernels.load.__wrapped__() is None and not cpu_kernels.available()  # the AVX512 set steps aside
    monkeypatch.setenv(cpu_kernels.CHOICE_ENV, "avx1024")
    with pytest.raises(ValueError, match="PETTINGLLMS_CPU_KERNELS='avx1024': use one of auto, avx2"):
        cpu_kernels.load.__wrapped__()
    monkeypatch.delenv(cpu_kernels.CHOICE_ENV)
    monkeypatch.setattr(cpu_kernels, "cpu_has", lambda flags: False)
    assert avx2_kernels.load.__wrapped__() is None  # no AVX2: logged, not raised
    monkeypatch.setattr(cpu_kernels, "cpu_has", lambda flags: True)
    monkeypatch.setenv("PETTINGLLMS_NO_CPU_KERNELS", "1")
    assert avx2_kernels.load.__wrapped__() is None
    monkeypatch.delenv("PETTINGLLMS_NO_CPU_KERNELS")

    def broken(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", broken)
    assert avx2_kernels.load.__wrapped__() is None  # a failed build is logged, not raised


@needs_kernel
def test_lean_forward_runs_its_products_through_it(monkeypatch) -> None:
    from test_lean_llama import run

    monkeypatch.setenv(cpu_kernels.CHOICE_ENV, "avx2")
    monkeypatch.setattr(cpu_kernels, "load", cpu_kernels.load.__wrapped__)  # reads the setting anew
    model = load_causal_lm("tiny:test", "bfloat16")
    lean, plain = LeanLlama(model), LeanLlama(model, kernels=False)
    assert lean.kernel is None and lean.gemm is KERNEL and plain.gemm is None
    got = run(lean.forward, model, [9, 5, 2], steps=3)
    assert all(lean.layers[0][i].kernel is KERNEL for i in (1, 2, 4, 5)) and lean.head.kernel is KERNEL
    want = run(plain.forward, model, [9, 5, 2], steps=3)
    # prefill and decode of 3 rows against oneDNN's bf16 GEMM: the same products, fp32 sums in
    # another order, so a few bf16 roundings apart at most; a wrong weight or offset is O(1)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0.05 * float(w.abs().max()))
    assert LeanLlama(load_causal_lm("tiny:test", "float32")).gemm is None  # fp32 weights keep MKL


def bf16_valued(model):
    """The model with every weight rounded to bf16, kept in fp32: a bf16 checkpoint loaded as fp32."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model


@needs_kernel
def test_fp32_decode_ops_match_torch() -> None:
    """rms_norm_f32, silu_mul_f32, rope_decode_f32 and decode_attention_f32 against the lean forward's
    torch ops in fp32: the rotary products and sums round as torch's (bit-equal), the others sum in
    another order (and e^x to about 2 ulp), so a few fp32 ulps of their scale apart."""
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(3, 576, generator=gen), torch.randn(576, generator=gen)
    want = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    torch.testing.assert_close(KERNEL.rms_norm_f32(x, w, 1e-5), want, rtol=1e-5, atol=1e-6)
    y = torch.randn(3, 2 * 100, generator=gen) * 8  # 100: a tail of 4 after 8-lane steps; |g| up to ~40
    y[0, 0], y[0, 1] = -95.0, 95.0  # e^-g past fp32's range both ways
    want = torch.nn.functional.silu(y[:, :100]) * y[:, 100:]
    torch.testing.assert_close(KERNEL.silu_mul_f32(y), want, rtol=1e-5, atol=1e-6)

    b, heads, kv_heads, d, cap, col = 2, 9, 3, 64, 40, 5
    fused = torch.randn(b, (heads + 2 * kv_heads) * d, generator=gen)
    cos, sin = torch.randn(b, d, generator=gen), torch.randn(b, d, generator=gen)
    kbuf = torch.zeros(b, cap, kv_heads, d).transpose(1, 2)  # a strided view, as the cache's can be
    vbuf = torch.zeros(b, kv_heads, cap, d)
    q = KERNEL.rope_decode_f32(fused, cos, sin, heads, kv_heads, kbuf, vbuf, col)
    qk = fused[:, :(heads + kv_heads) * d].view(b, heads + kv_heads, d)
    rotated = qk * cos[:, None] + torch.cat((-qk[..., d // 2:], qk[..., :d // 2]), -1) * sin[:, None]
    assert torch.equal(q, rotated[:, :heads]) and torch.equal(kbuf[:, :, col], rotated[:, heads:])
    assert torch.equal(vbuf[:, :, col], fused[:, (heads + kv_heads) * d:].view(b, kv_heads, d))
    assert not kbuf[:, :, col + 1].any() and not vbuf[:, :, :col].any()  # only that column written

    length = 13  # not a multiple of 8: the padded tail of the scores
    keys, values = torch.randn(b, kv_heads, length, d, generator=gen), torch.randn(b, kv_heads, length, d, generator=gen)
    query = torch.randn(b, heads, d, generator=gen)
    mask = torch.rand(b, length, generator=gen) > 0.3
    mask[:, 0] = True
    for key_mask in (mask, torch.empty(0, dtype=torch.bool)):
        got = KERNEL.decode_attention_f32(query, keys, values, key_mask.contiguous(), 0.125)
        scores = (query[:, :, None] @ keys.repeat_interleave(heads // kv_heads, 1).transpose(-1, -2)) * 0.125
        if key_mask.numel():
            scores = scores.masked_fill(~key_mask[:, None, None], float("-inf"))
        want = (scores.softmax(-1) @ values.repeat_interleave(heads // kv_heads, 1))[:, :, 0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_a_bf16_valued_fp32_model_is_held_in_bf16(monkeypatch) -> None:
    """A float32 model whose weights are all bf16 values runs its products through the AVX2 GEMM
    (weights held in bf16: nothing lost) and its decode steps through the fp32 ops, its prefill
    through torch's fp32 GEMM; the logits are the exact fp32 path's up to fp32 sums in another
    order. A weight off the bf16 grid, or a bf16 model, keeps the other paths."""
    from test_lean_llama import run

    monkeypatch.setenv(cpu_kernels.CHOICE_ENV, "avx2")  # the rule as on a CPU without bf16 arithmetic
    model = bf16_valued(load_causal_lm("tiny:test", "float32"))
    held, plain = LeanLlama(model), LeanLlama(model, kernels=False)
    assert held.f32 is KERNEL and held.gemm is KERNEL and plain.f32 is None and plain.gemm is None
    got = run(held.forward, model, [9, 5, 2], steps=3)
    assert all(held.layers[0][i].held for i in (1, 2, 4, 5)) and held.head.held
    assert held.layers[0][1].pairs.dtype == torch.bfloat16 and held.layers[0][1].weight is None
    # a decode step's layers in one call (decode_layers_f32) give the per-layer loop's numbers exactly
    one_call, held.step_args = held.step_args, None
    assert one_call is not None
    per_layer = run(held.forward, model, [9, 5, 2], steps=3)
    held.step_args = one_call
    assert all(torch.equal(g, p) for g, p in zip(got, per_layer))
    want = run(plain.forward, model, [9, 5, 2], steps=3)
    for g, w in zip(got, want):  # a wrong weight, offset or cache column is O(1)
        torch.testing.assert_close(g, w, rtol=0, atol=1e-4 * float(w.abs().max()))
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] += 2 ** -20  # one weight off the grid
    assert LeanLlama(model).f32 is None
    assert LeanLlama(load_causal_lm("tiny:test", "bfloat16")).f32 is None  # bf16 compute stays bf16
    monkeypatch.delenv(cpu_kernels.CHOICE_ENV)
    if any(f in precision.cpu_flags() for f in precision.BF16_CPU_FLAGS):  # where bf16 is native, auto loads bf16
        assert not avx2_kernels.holds_bf16(bf16_valued(load_causal_lm("tiny:test", "float32")))
