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
there.

A float32 model whose weights are all bf16 values (a bf16 checkpoint that `model.dtype=auto` loaded
as float32 on a CPU without bf16 arithmetic; `holds_bf16`) runs the same GEMM on fp32 inputs and
the fp32 decode ops of the same file (`rms_norm_f32`, `silu_mul_f32`, `rope_decode_f32`,
`decode_attention_f32`): the weights a decode step streams are half the bytes, every product and
sum is fp32, and a decode step's layers run in one C++ call (`decode_layers_f32`, those ops in the
per-layer loop's order, the same numbers) instead of dozens of torch ops a layer (issue 29: at one
row those ops, then the calls themselves, were a large part of the step).

Built and cached as `cpu_kernels` builds its module; `load()` returns None, the reason
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
from pettingllms.utils import precision

log = logging.getLogger(__name__)

# -fopenmp: at::parallel_for's threads (see cpu_kernels); -ffp-contract=off: the fp32 ops round a product
# and a sum apart, as torch does (the GEMM's FMAs are written as such)
_CFLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-ffp-contract=off"]
_FUNCTIONS = ["pack_pairs", "gemm_packed", "rms_norm_f32", "silu_mul_f32", "rope_decode_f32", "decode_attention_f32",
              "decode_layers_f32"]
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


def attention_takes(head_dim: int) -> bool:
    """Whether `decode_attention_f32` runs at this head size (eight lanes along it, at most 256)."""
    return head_dim % 8 == 0 and 0 < head_dim <= 256


_said_held: set[bool] = set()


def holds_bf16(model: Any) -> bool:
    """Whether the lean forward holds this model's GEMM weights in bf16 and runs the fp32 decode ops:
    a float32 CPU model, every projection and head weight a bf16 value (the low 16 bits of each
    fp32 zero: nothing is lost), the CPU without bf16 arithmetic (or `PETTINGLLMS_CPU_KERNELS=avx2`),
    and this module built. Logged once per process."""
    embed = model.model.embed_tokens.weight
    if embed.dtype != torch.float32 or embed.device.type != "cpu":
        return False
    native = any(f in precision.cpu_flags() for f in precision.BF16_CPU_FLAGS)
    if native and cpu_kernels.choice() != "avx2":
        return False
    weights = [m.weight for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and (".layers." in f".{name}" or name.endswith("lm_head"))]
    exact = bool(weights) and all(not bool((w.detach().view(torch.int32) & 0xFFFF).any()) for w in weights)
    held = exact and load() is not None
    if held not in _said_held:
        _said_held.add(held)
        if held:
            log.info("HF engine: float32 model with its GEMM weights held in bf16 (all are bf16 values; the CPU "
                     "has no bf16 arithmetic): the AVX2 GEMM and fp32 decode ops")
        elif not exact:
            log.info("HF engine: float32 model whose weights are not all bf16 values: its GEMMs stay float32")
    return held


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
