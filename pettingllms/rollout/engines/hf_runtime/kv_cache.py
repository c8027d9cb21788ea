"""The HF engine's KV cache: transformers' `DynamicCache` whose full-attention layers keep their
keys and values in a buffer with room to grow (`BufferedLayer`).

transformers' `DynamicLayer` appends a token with `torch.cat`, a copy of the layer's whole cache
in every layer at every step; here a step writes one column: the same numbers, without the copy.
Finished rows leave the batch (`batch_select_indices`), left padding that no remaining row needs
goes (`drop_front`), and the lean forward (`lean_llama`) writes a decode step's keys and values
straight into the next column (`append_column`).
"""
from __future__ import annotations

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
