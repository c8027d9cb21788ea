"""`model.dtype=auto`: the compute dtype the hardware is fast at.

bf16 where the hardware has native bf16 arithmetic: a CPU with AVX512-BF16 or AMX-BF16 (the
`avx512_bf16` / `amx_bf16` flags of /proc/cpuinfo), or a CUDA GPU that supports bf16 (Ampere and
newer). Elsewhere float32: on a CPU without bf16 instructions (AVX2 + FMA only, e.g. AMD Zen 2)
torch's bf16 GEMMs take a slow path, several times slower than its fp32 ones (issue 29 measured
11 vs 67 GFLOP/s on such a box), and a CUDA GPU without bf16 (V100, T4) would need fp16, which the
local and ray backends refuse (no GradScaler).

One resolver for every place that loads or runs the model in `model.dtype`: the rollout engines,
the policy workers' frozen LoRA base, logprobs and reference model, verl's mixed precision and the
pre-flight plan. An explicit dtype (bfloat16, float32, ...) is returned unchanged. Each distinct
choice is logged once per process, with its reason.

`PETTINGLLMS_NO_CPU_BF16=1` makes this process act as if the CPU had no bf16 instructions
(`cpu_flags` leaves them out, so auto picks float32 and the AVX512-BF16 decode kernels stay off):
the way to run the suite on a bf16 box as it runs on an AVX2-only one.
"""
from __future__ import annotations

import logging
import os
from typing import Optional

import torch

log = logging.getLogger(__name__)

AUTO = "auto"
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo names of native bf16 arithmetic
NO_CPU_BF16_ENV = "PETTINGLLMS_NO_CPU_BF16"  # set: pretend the CPU lacks BF16_CPU_FLAGS
_said: set[tuple[str, str]] = set()


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's `flags` line (Linux x86); empty when there is none (other systems).
    Without the bf16 flags when PETTINGLLMS_NO_CPU_BF16 is set."""
    flags: frozenset[str] = frozenset()
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    flags = frozenset(value.split())
                    break
    except OSError:
        pass
    if os.environ.get(NO_CPU_BF16_ENV, "") not in ("", "0"):
        flags = flags - set(BF16_CPU_FLAGS)
    return flags


def choose_dtype(device: str | torch.device = "cpu", flags: Optional[frozenset[str]] = None,
                 cuda_bf16: Optional[bool] = None) -> tuple[str, str]:
    """(dtype, why) for `auto` on `device`. `flags`: the CPU's flags (default: read /proc/cpuinfo);
    `cuda_bf16`: whether the GPU supports bf16 (default: ask torch; assumed when no GPU is visible
    here, as when planning for a cluster from a CPU-only head node)."""
    kind = torch.device(device).type
    if kind == "cuda":
        if cuda_bf16 is None:
            cuda_bf16 = torch.cuda.is_bf16_supported() if torch.cuda.is_available() else True
        if cuda_bf16:
            return "bfloat16", "CUDA GPU with bf16 support"
        return "float32", "CUDA GPU without bf16 support (fp16 is refused on the local/ray backends)"
    if kind != "cpu":
        return "float32", f"device type {kind!r}: no bf16 rule for it, float32 is the safe choice"
    flags = cpu_flags() if flags is None else flags
    native = [f for f in BF16_CPU_FLAGS if f in flags]
    if native:
        return "bfloat16", f"CPU has native bf16 ({', '.join(native)})"
    return "float32", ("CPU has no native bf16 (no avx512_bf16/amx_bf16 flag): torch's bf16 GEMMs "
                       "would take a slow path, so weights and compute are float32")


def resolve_dtype(name: str | torch.dtype, device: str | torch.device = "cpu", *,
                  flags: Optional[frozenset[str]] = None, cuda_bf16: Optional[bool] = None) -> str:
    """`model.dtype` as a concrete dtype name for `device`: `auto` chosen by `choose_dtype` (and
    logged once per process per choice), anything else returned as given."""
    if isinstance(name, torch.dtype):
        return str(name).removeprefix("torch.")
    if str(name).lower() != AUTO:
        return str(name)
    dtype, why = choose_dtype(device, flags, cuda_bf16)
    key = (torch.device(device).type, dtype)  # cuda:0 and cuda:1 say it once
    if key not in _said:
        _said.add(key)
        log.info("model.dtype=auto: %s on %s (%s)", dtype, key[0], why)
    return dtype
