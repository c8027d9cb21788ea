"""The HF engine's products on the transformers path: the same numbers, fewer copies.

* `pack_linears`: bf16 linear layers on CPU run oneDNN's GEMM on a weight pre-packed into its
  blocked layout (bit-identical results; the decode's small-batch GEMMs and the LM head run
  faster). A weight is repacked on first use after it changed (weight sync): its version
  counter says so. Costs one packed copy of the linear weights in memory. The lean forward
  (`lean_llama`) packs its fused weights with `pack_weight` where our kernels do not run.
* `last_position`: the prefill's `logits_to_keep` as an index tensor, so that the LM head sees
  the last position as a contiguous [B, 1, H] block. A slice is a strided view, which torch's
  matmul cannot fold into one GEMM: it expands the head's weight to [B, H, V] instead (a copy of
  the whole vocabulary matrix per prompt in the batch).

(Models load with `pettingllms.utils.attention`'s grouped-query SDPA, which skips the copy of the
cache to every query head that transformers' sdpa path makes under a padding mask.)
"""
from __future__ import annotations

import types

import torch


def last_position(ids: torch.Tensor) -> int | torch.Tensor:
    """`logits_to_keep` for a forward over `ids`: the last position, as an index tensor when the
    forward covers several positions (see the module docstring)."""
    length = ids.shape[1]
    return 1 if length == 1 else torch.tensor([length - 1], device=ids.device)


def mkldnn_bf16() -> bool:
    """Whether this torch build has oneDNN's bf16 GEMM (what packed weights run on)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 [out, in] weight in oneDNN's blocked layout (a layout change, not a rounding)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 32)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x W^T + b with W from `pack_weight`."""
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _packed_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w = self.weight
    key = (w.data_ptr(), w._version)
    if self._packed_key != key:
        self._packed = pack_weight(w)
        self._packed_key = key
    return packed_linear(x, self._packed, self.bias)


def pack_linears(model: torch.nn.Module) -> int:
    """Route the model's bf16 CPU `nn.Linear` layers through `_packed_linear`; returns how many.
    Nothing changes where this torch build has no oneDNN bf16 GEMM."""
    if not mkldnn_bf16():
        return 0
    count = 0
    for mod in model.modules():
        w = getattr(mod, "weight", None)
        if type(mod) is torch.nn.Linear and w is not None and w.dtype == torch.bfloat16 and w.device.type == "cpu":
            mod._packed_key = None
            mod.forward = types.MethodType(_packed_linear, mod)
            count += 1
    return count
