"""The HF engine's GEMM on x86-64 CPUs with AVX2 + FMA but no bf16 arithmetic (source:
`avx2_kernels.cpp`).

There torch's bf16 `F.linear` takes a slow path (issue 29 measured 11 GFLOP/s against fp32's 67 on
a 2-core Zen 2), yet a decode step at a few rows is bound by reading the weights, and bf16 weights
are half the bytes of fp32 ones. This GEMM reads bf16 weights and computes in fp32: a packed copy
(`[N/8, K/2, 8, 2]`: eight output columns' pairs along K side by side) whose every 32-byte load one
shift and one mask widen into the eight columns' fp32 weights at two k's, fp32 FMAs into two
accumulators per row and column block, the bias added in fp32, one rounding at the end.

* `pack(kernel, weights)` / `gemm(kernel, x, packed, n, bias)`: as `cpu_kernels.pack` / `gemm`
  (the same module functions, so the lean forward's `_Linear` runs either), but x may be bf16
  (the result is rounded to bf16: a bf16 model's numbers) or fp32 (an fp32 result: bf16 weights
  held in memory, everything else fp32).

Numbers: bf16 x bf16 products are exact in fp32, so a bf16 x gives oneDNN's bf16 GEMM's numbers up
to the order of the fp32 sums (the last bf16 bit can differ); an fp32 x gives fp32 products
rounded once each (FMA). The tests hold both to a float64 reference.

The lean forward runs it for every product of a bf16 model where the AVX512-BF16 kernels
(`cpu_kernels`) do not run: the CPU lacks AVX512-BF16, or `PETTINGLLMS_CPU_KERNELS=avx2` asks for
this GEMM (how it is tested and benchmarked on any x86-64 box). The other decode ops stay torch's
there. Built and cached as `cpu_kernels` builds its module; `load()` returns None, the reason
logged, where the CPU lacks AVX2/FMA or the build fails.
"""
from __future__ import annotations

import logging
import os
import platform
from functools import lru_cache
from typing import Any, Sequence

import torch

from pettingllms.rollout.engines.hf_runtime import cpu_kernels

log = logging.getLogger(__name__)

_CFLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]  # -fopenmp: at::parallel_for's threads (see cpu_kernels)
_FUNCTIONS = ["pack_pairs", "gemm_packed"]
_SOURCE_FILE = "avx2_kernels.cpp"
_CPU_FLAGS = {"avx2", "fma"}


def _cpu_reason() -> str | None:
    """Why this GEMM cannot run on this machine, or None."""
    if os.environ.get("PETTINGLLMS_NO_CPU_KERNELS"):
        return "off (PETTINGLLMS_NO_CPU_KERNELS is set)"
    if platform.machine() not in ("x86_64", "AMD64") or not cpu_kernels.cpu_has(_CPU_FLAGS):
        return "this CPU has no AVX2 + FMA"
    return None


@lru_cache(maxsize=1)
def load() -> Any | None:
    """The compiled module (`pack_pairs`, `gemm_packed`), or None (the reason logged)."""
    reason = _cpu_reason()
    if reason is not None:
        log.info("AVX2 GEMM kernel: %s; oneDNN is used", reason)
        return None
    return cpu_kernels.build("avx2_kernels", _SOURCE_FILE, _CFLAGS, _FUNCTIONS, "AVX2 GEMM kernel")


def takes(weights: Sequence[torch.Tensor]) -> bool:
    """Whether `pack` takes these weights (as `cpu_kernels.takes`: bf16, row-major, one even K)."""
    return cpu_kernels.takes(weights)


def pack(kernel: Any, weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """The weights stacked on the output dimension in `gemm`'s layout (a copy: [ceil(N / 8), K / 2,
    8, 2] bf16, zero-padded)."""
    if not takes(weights):
        raise ValueError("pack takes row-major bf16 CPU weights [N_j, K] with one even K")
    return kernel.pack_pairs(list(weights))


def gemm(kernel: Any, x: torch.Tensor, packed: torch.Tensor, n: int, bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] bf16 or fp32 (M >= 1) times the `n`-column weight `pack` made, plus bias -> [M, n]
    in x's dtype (fp32 sums, one rounding)."""
    k = packed.shape[1] * 2
    if x.dim() != 2 or x.dtype not in (torch.bfloat16, torch.float32) or x.shape[1] != k or x.shape[0] < 1 \
            or not 0 < n <= packed.shape[0] * 8 or x.device.type != "cpu":
        raise ValueError(f"AVX2 GEMM takes [M >= 1, {k}] bf16 or fp32 CPU inputs and 1..{packed.shape[0] * 8} "
                         f"columns, got {list(x.shape)} {x.dtype}, n={n}")
    b = bias.float().contiguous() if bias is not None else x.new_empty(0, dtype=torch.float32)
    return kernel.gemm_packed(x.contiguous(), packed, int(n), b)
