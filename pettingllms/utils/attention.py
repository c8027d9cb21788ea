"""Attention for every model we load: transformers' sdpa, with grouped-query heads left to the kernel,
and small attentions as two plain matmuls.

transformers' sdpa attention repeats K/V to every query head (`repeat_kv`, a copy) whenever an
attention mask is given, i.e. for any batch whose rows differ in length: in the rollout engine a
copy of the whole KV cache per layer per decode step, in training a copy (and its backward) per
layer. torch's SDPA kernels (torch >= 2.5) take the shared heads as they are (`enable_gqa`) and
compute the same numbers (bit-identical forward on CPU). Models that do not run sdpa keep their
own attention.

torch's CPU flash kernel is built for long sequences: on the small score matrices of a decode step
(one query) or of a short response trained on its prompt's cache, it is several times slower than
scores = q k^T, softmax, p v as plain batched matmuls, and its backward more so
(`scripts/bench/bench_attention.py`). Those run in fp32 (scores, softmax and the weighted sum, as
the kernel accumulates), with the query heads of each K/V head folded into the matmul's rows, so
no K/V is copied per head either. Large attentions stay on the kernel, which never materialises
the scores.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

GQA_ATTENTION = "pettingllms_sdpa_gqa"

# The matmul path is taken when a row's score matrix has at most this many entries (queries x keys;
# a decode step with up to this many cached tokens, training on short responses) ...
SMALL_SCORES_GRAD = 32768  # with autograd: the kernel's backward is the slow part
SMALL_SCORES_NO_GRAD = 8192  # forward only (prefill of a long prompt stays on the kernel)
# ... and the whole batch's scores fit in this many fp32 entries (16 MiB; autograd keeps them).
SMALL_SCORES_TOTAL = 1 << 22


def _matmul_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      mask: torch.Tensor | None, scale: float, causal: bool) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v in (at least) fp32 -> [B, Lq, H, D] in the query's dtype."""
    b, heads, lq, d = query.shape
    kv_heads, lk = key.shape[1], key.shape[2]
    group = heads // kv_heads
    acc = torch.promote_types(query.dtype, torch.float32)  # fp32, or fp64 where the model is
    q = query.reshape(b, kv_heads, group * lq, d).to(acc)  # the heads sharing a K/V head as rows
    scores = torch.matmul(q, key.to(acc).transpose(-1, -2)).view(b, kv_heads, group, lq, lk) * scale
    if causal:  # no mask given: query i sees keys up to i + (lk - lq)
        mask = torch.ones(lq, lk, dtype=torch.bool, device=query.device).tril(lk - lq)
    if mask is not None:  # [B or 1, 1 or H, Lq or 1, Lk] -> broadcast over [B, K/V heads, group, Lq, Lk]
        while mask.dim() < 4:
            mask = mask.unsqueeze(0)
        mask = (mask.unsqueeze(2) if mask.shape[1] == 1 else
                mask.reshape(mask.shape[0], kv_heads, group, *mask.shape[2:]))
        if mask.dtype == torch.bool:  # a finite fill: a fully masked (padding) row stays finite
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask.to(acc)
    probs = torch.softmax(scores, dim=-1).view(b, kv_heads, group * lq, lk)
    out = torch.matmul(probs, value.to(acc)).view(b, heads, lq, d)
    return out.transpose(1, 2).to(query.dtype).contiguous()


def _is_small(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    per_row = query.shape[2] * key.shape[2]
    grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    return (per_row <= (SMALL_SCORES_GRAD if grad else SMALL_SCORES_NO_GRAD)
            and per_row * query.shape[0] * query.shape[1] <= SMALL_SCORES_TOTAL)


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
           scale: float, causal: bool, dropout: float = 0.0) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v -> [B, Lq, H, D]: small attentions without dropout on CPU as
    `_matmul_attention`, the rest on torch's SDPA kernel with grouped-query heads left to it."""
    if dropout == 0.0 and query.device.type == "cpu" and _is_small(query, key, value) \
            and query.shape[1] % key.shape[1] == 0:
        return _matmul_attention(query, key, value, mask, scale, causal)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scale,
                                         is_causal=causal, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous()


def _gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, but grouped-query heads always go to the kernel (enable_gqa),
    and small attentions without dropout to `_matmul_attention`."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return attend(query, key, value, attention_mask, scale, causal, dropout if module.training else 0.0), None


def use_gqa_attention(model: Any) -> bool:
    """Switch a model that runs transformers' sdpa attention to `_gqa_attention` (same masks)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    if GQA_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(GQA_ATTENTION, _gqa_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(GQA_ATTENTION, sdpa_mask)
    model.set_attn_implementation(GQA_ATTENTION)
    return True
