"""Attention for every model we load: transformers' sdpa, with grouped-query heads left to the kernel.

transformers' sdpa attention repeats K/V to every query head (`repeat_kv`, a copy) whenever an
attention mask is given, i.e. for any batch whose rows differ in length: in the rollout engine a
copy of the whole KV cache per layer per decode step, in training a copy (and its backward) per
layer. torch's SDPA kernels (torch >= 2.5) take the shared heads as they are (`enable_gqa`) and
compute the same numbers (bit-identical forward on CPU). Models that do not run sdpa keep their
own attention.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

GQA_ATTENTION = "pettingllms_sdpa_gqa"


def _gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, but grouped-query heads always go to the kernel (enable_gqa)."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=causal,
                                         enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


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
