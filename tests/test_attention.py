"""The small-attention matmul path (utils/attention.py) computes what torch's SDPA kernel and the
plain formula compute: forward and gradients, under padding masks, causal, decode and fully masked
rows; and it is taken only where its rule says."""
from __future__ import annotations

import contextlib
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from pettingllms.utils import attention as A

HEADS, KV_HEADS, DIM = 6, 2, 8


class _Module(torch.nn.Module):
    is_causal = True


def _inputs(batch: int, lq: int, lk: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    # queries as transformers makes them: [B, Lq, H, D] transposed to [B, H, Lq, D] (not contiguous)
    q = torch.randn(batch, lq, HEADS, DIM, generator=g, dtype=torch.float64).transpose(1, 2)
    k = torch.randn(batch, KV_HEADS, lk, DIM, generator=g, dtype=torch.float64)
    v = torch.randn(batch, KV_HEADS, lk, DIM, generator=g, dtype=torch.float64)
    return [t.detach().requires_grad_() for t in (q, k, v)]


def _reference(q, k, v, mask, causal):
    """softmax(q k^T / sqrt(D) + mask) v with K/V repeated per query head: [B, Lq, H, D]."""
    group = HEADS // KV_HEADS
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) * DIM ** -0.5
    lq, lk = q.shape[2], k.shape[2]
    if causal:
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool else scores + mask
    return (torch.softmax(scores, -1) @ v).transpose(1, 2)


def _padding_mask(batch: int, lq: int, lk: int, pads: list[int]) -> torch.Tensor:
    """[B, 1, Lq, Lk] bool: causal over the last Lq keys, left padding of pads[b] keys."""
    mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq).expand(batch, 1, lq, lk).clone()
    for b, p in enumerate(pads):
        mask[b, :, :, :p] = False
    return mask


def _run(q, k, v, mask, force_kernel: bool):
    limits = dict(SMALL_SCORES_GRAD=0, SMALL_SCORES_NO_GRAD=0) if force_kernel else {}
    with mock.patch.multiple(A, **limits) if limits else contextlib.nullcontext():
        out, _ = A._gqa_attention(_Module(), q, k, v, mask)
    return out


CASES = {  # batch, queries, keys, left padding per row (None: no mask, causal)
    "decode, padding": (3, 1, 7, [2, 0, 5]),
    "response on a prompt cache, padding": (3, 4, 9, [3, 0, 1]),
    "prefill, padding": (2, 6, 6, [2, 0]),
    "prefill, causal, no mask": (2, 5, 5, None),
    # transformers always passes a mask here; the kernel's is_causal would align the
    # triangle top-left, the matmul path aligns it to the cache's end like the mask does
    "chunk after a cache, causal, no mask": (2, 3, 8, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matmul_path_equals_the_kernel_and_the_formula_with_gradients(case: str) -> None:
    batch, lq, lk, pads = CASES[case]
    mask = _padding_mask(batch, lq, lk, pads) if pads is not None else None
    causal = mask is None
    grad_out = torch.randn(batch, lq, HEADS, DIM, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    # rows that see no key at all (padding queries of a left-padded prefill) are the kernel's
    # own business (it writes zeros, the formula a uniform average); nothing reads them
    seen = torch.ones(batch, lq, dtype=torch.bool) if mask is None else mask[:, 0].any(-1)
    grad_out = grad_out * seen[:, :, None, None]
    results = {}
    for how in ("matmul", "kernel", "formula"):
        q, k, v = _inputs(batch, lq, lk)
        out = _reference(q, k, v, mask, causal) if how == "formula" else _run(q, k, v, mask, how == "kernel")
        out.backward(grad_out)
        results[how] = (out.detach()[seen], q.grad, k.grad, v.grad)
    others = ("formula", "kernel") if lq == lk or mask is not None else ("formula",)
    for other in others:
        for got, want in zip(results["matmul"], results[other]):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_fully_masked_rows_stay_finite_in_value_and_gradient() -> None:
    """A padding query row that sees no key (left padding in a prefill) must not poison the batch."""
    q, k, v = _inputs(2, 4, 4)
    mask = _padding_mask(2, 4, 4, [2, 0])
    mask[0, :, 0, :] = False  # row 0's first query sees nothing at all
    out = _run(q, k, v, mask, force_kernel=False)
    out[1].sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    torch.testing.assert_close(out[1], _reference(q, k, v, mask, False)[1].detach(), rtol=0, atol=1e-12)


def test_float_additive_masks_and_half_precision_accumulate_in_fp32() -> None:
    q, k, v = _inputs(2, 3, 5)
    bool_mask = _padding_mask(2, 3, 5, [1, 0])
    additive = torch.zeros(bool_mask.shape, dtype=torch.float64).masked_fill(~bool_mask, float("-inf"))
    with torch.no_grad():
        torch.testing.assert_close(_run(q, k, v, additive, False), _reference(q, k, v, bool_mask, False),
                                   rtol=0, atol=1e-12)
        bf = [t.detach().to(torch.bfloat16) for t in (q, k, v)]
        out = _run(*bf, bool_mask, False)
        want = _reference(*(t.double() for t in bf), bool_mask, False)
    assert out.dtype == torch.bfloat16
    # fp32 accumulation, one bf16 rounding of the result: within half a bf16 ulp (2^-8 relative) plus fp32 noise
    torch.testing.assert_close(out.double(), want, rtol=2 ** -8, atol=1e-6)


def test_the_kernel_keeps_large_attentions() -> None:
    calls = []
    real = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    with mock.patch.object(A.F, "scaled_dot_product_attention", counting), torch.no_grad():
        q, k, v = _inputs(1, 1, 300)  # a decode step: matmuls
        A._gqa_attention(_Module(), q, k, v, None)
        assert calls == []
        q, k, v = _inputs(1, 128, 128)  # a 128-token prefill, no grad: 16384 scores a row > 8192
        A._gqa_attention(_Module(), q, k, v, None)
        assert len(calls) == 1
    with mock.patch.object(A.F, "scaled_dot_product_attention", counting):
        q, k, v = _inputs(1, 128, 128)  # the same with autograd: the kernel's backward is the slow one
        A._gqa_attention(_Module(), q, k, v, None)
        assert len(calls) == 1
        q, k, v = _inputs(1, 512, 512)  # too large with autograd too
        A._gqa_attention(_Module(), q, k, v, None)
        assert len(calls) == 2
