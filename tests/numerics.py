"""Tolerances and thread counts for the numerical tests (CI runs on Intel and AMD CPUs).

Kernels sum in different orders on different CPUs and thread counts, so a tolerance
must follow from the dtype and the size of the reductions, never from what passed on
one machine. Exactness claims (two computations of the same quantity) run in float64:
rounding stays near 1e-16 while a real bug shows as an O(1e-3) or larger difference.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch

# Numerical tests run under both: 1 and 2 threads split reductions differently.
THREADS = (1, 2)


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """torch.set_num_threads(n) for the block; the previous count comes back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def sum_tol(dtype: torch.dtype, n_terms: int, scale: float) -> float:
    """n * eps * scale: the first-order worst-case rounding of an n-term sum whose terms are
    at most `scale` in size (Higham, Accuracy and Stability, eq. 3.5), in any summation order."""
    return float(n_terms * torch.finfo(dtype).eps * scale)


def assert_close_by_size(actual: torch.Tensor, expected: torch.Tensor, n_terms: int) -> None:
    """Equal up to the rounding of `n_terms`-term reductions at the size of `expected`."""
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=0, atol=sum_tol(expected.dtype, n_terms, scale))


def pairwise_tol(dtype: torch.dtype, sizes: tuple[int, ...], scale: float) -> float:
    """Rounding of a chain of reductions of the given sizes, each summed pairwise / in blocks as
    torch's CPU kernels do (|error| <= ceil(log2 n) * eps * scale each), at values of size `scale`.
    For fp32 comparisons between two code paths (batched vs single, cached vs full)."""
    steps = sum(max(1, math.ceil(math.log2(max(n, 2)))) for n in sizes)
    return float(steps * torch.finfo(dtype).eps * scale)


@contextlib.contextmanager
def exact_float64() -> Iterator[None]:
    """Keep the tiny Llama (and Qwen2) in float64 end to end: their RMSNorm upcasts to float32 on
    purpose (for bf16), which in a float64 run rounds to float32 precision and hides the claim
    under test."""
    from unittest import mock

    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    with mock.patch.object(LlamaRMSNorm, "forward", forward), mock.patch.object(Qwen2RMSNorm, "forward", forward):
        yield


def forward_tol(config, seq_len: int, scale: float, dtype: torch.dtype = torch.float32) -> float:
    """Two forward passes of one model that differ only in batching, padding or KV caching: each
    layer reduces over hidden size (norm, projections), MLP width and sequence (attention); the
    head over the vocabulary (log-softmax). `scale` is the largest |logprob| compared."""
    layer = (config.hidden_size, config.hidden_size, config.intermediate_size, seq_len)
    sizes = layer * int(config.num_hidden_layers) + (int(config.vocab_size),)
    return pairwise_tol(dtype, sizes, scale)
