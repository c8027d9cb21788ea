"""Per-token costs of the HF engine's decode loop, out of the way (pettingllms/rollout/engines/hf.py).

Each piece computes the same numbers as the plain transformers path and only skips a copy:

* `BufferedLayer`: a KV-cache layer whose keys/values are views of a buffer with room to grow.
  transformers' `DynamicLayer` appends a token with `torch.cat`, a copy of the layer's whole
  cache in every layer at every step; here a step writes one column.
* (models load with `pettingllms.utils.attention`'s grouped-query SDPA, which skips the copy of
  the cache to every query head that transformers' sdpa path makes under a padding mask)
* `last_position`: the prefill's `logits_to_keep` as an index tensor, so that the LM head sees
  the last position as a contiguous [B, 1, H] block. A slice is a strided view, which torch's
  matmul cannot fold into one GEMM: it expands the head's weight to [B, H, V] instead (a copy of
  the whole vocabulary matrix per prompt in the batch).
* `pack_linears`: bf16 linear layers on CPU run oneDNN's GEMM on a weight pre-packed into its
  blocked layout (bit-identical results; the decode's small-batch GEMMs and the LM head run
  faster). A weight is repacked on first use after it changed (weight sync): its version
  counter says so. Costs one packed copy of the linear weights in memory.
"""
from __future__ import annotations

import types
from typing import Any

import torch

class BufferedLayer:
    """Mixin body for a transformers `DynamicLayer` subclass (built by `buffered_cache`)."""

    capacity = 0  # columns to allocate up front (prompt + new tokens); grows by doubling

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._len = 0
            self._kbuf = self._vbuf = None
        n = self._len + key_states.shape[-2]
        if self._kbuf is None or n > self._kbuf.shape[-2]:
            self._grow(key_states, value_states, max(n, self.capacity, 2 * self._len))
        self._kbuf[:, :, self._len:n].copy_(key_states)
        self._vbuf[:, :, self._len:n].copy_(value_states)
        self._len = n
        self._views()
        return self.keys, self.values

    def append_column(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Room for one more token, to be written in place: (key buffer, value buffer, column).
        The layer's keys/values already include that column."""
        col = self._len
        if col + 1 > self._kbuf.shape[-2]:
            self._grow(self._kbuf, self._vbuf, max(col + 1, 2 * col))
        self._len = col + 1
        self._views()
        return self._kbuf, self._vbuf, col

    def _grow(self, k: torch.Tensor, v: torch.Tensor, cols: int) -> None:
        kb = k.new_empty((*k.shape[:2], cols, k.shape[-1]))
        vb = v.new_empty((*v.shape[:2], cols, v.shape[-1]))
        if self._len:
            kb[:, :, :self._len].copy_(self._kbuf[:, :, :self._len])
            vb[:, :, :self._len].copy_(self._vbuf[:, :, :self._len])
        self._kbuf, self._vbuf = kb, vb

    def _views(self) -> None:
        self.keys = self._kbuf[:, :, :self._len]
        self.values = self._vbuf[:, :, :self._len]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized and self._len:
            self._kbuf, self._vbuf = self._kbuf[indices], self._vbuf[indices]
            self._views()

    def drop_front(self, first: int) -> None:
        """Forget the first `first` columns (left padding no remaining row needs)."""
        if self.is_initialized and self._len:
            self._kbuf, self._vbuf = self._kbuf[:, :, first:], self._vbuf[:, :, first:]
            self._len -= first
            self._views()


def buffered_cache(config: Any, capacity: int) -> Any:
    """A transformers DynamicCache whose full-attention layers are buffered (sliding-window and
    other special layers stay as transformers builds them)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layer_cls = type("BufferedDynamicLayer", (BufferedLayer, DynamicLayer), {"capacity": int(capacity)})
    cache = DynamicCache(config=config)
    cache.layers = [layer_cls() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def drop_front(cache: Any, first: int) -> bool:
    """Drop the first `first` cache columns in every layer; False (nothing changed) unless every
    layer is buffered."""
    if not all(isinstance(layer, BufferedLayer) for layer in cache.layers):
        return False
    for layer in cache.layers:
        layer.drop_front(first)
    return True


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
