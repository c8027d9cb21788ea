"""Seeding and RNG-state capture, so that a seed fixes a run and a resume continues it exactly.

`capture_rng_state()` returns only lists, ints, floats, strings and tensors, so the state can be
stored with `torch.save` and read back with `torch.load(..., weights_only=True)`.
"""
from __future__ import annotations

import hashlib
import os
import random
from typing import Any

import numpy as np
import torch


def set_seed(seed: int, deterministic: bool = False) -> None:
    """Seed python, numpy and torch (all devices); optionally ask torch for deterministic kernels."""
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        # cuBLAS needs this workspace setting for deterministic matmuls; harmless on CPU.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        if torch.backends.cudnn.is_available():
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False


def _digest(parts: tuple[Any, ...]) -> int:
    """A stable 64-bit number from any printable parts (python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest(), "little")


def derive_seed(*parts: Any) -> int:
    """A stable 63-bit seed from any printable parts: generators, data orders, weight init."""
    return _digest(parts) & (2**63 - 1)


def sampling_seed(*parts: Any) -> int:
    """A stable seed below 2**31 - 1 from any printable parts: what engines take as a request's
    sampling seed (vLLM and OpenAI-compatible servers want a 32-bit signed int)."""
    return _digest(parts) % (2**31 - 1)


def capture_rng_state() -> dict[str, Any]:
    """Snapshot python, numpy and torch (CPU and CUDA) generator states."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {"kind": kind, "keys": [int(k) for k in keys], "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    # This process's CUDA generator only, on its current device, and only once CUDA is in use here:
    # get_rng_state_all() would make a CUDA context on every visible GPU (the ranks' GPUs too).
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
        state["cuda"] = {"device": int(device), "state": torch.cuda.get_rng_state(device)}
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore a snapshot made by `capture_rng_state` (CUDA states only where CUDA is present)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], np.asarray(n["keys"], dtype=np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        if isinstance(cuda, dict):
            if cuda["device"] < torch.cuda.device_count():
                torch.cuda.set_rng_state(cuda["state"], cuda["device"])
        else:  # older checkpoints: one state per visible GPU
            torch.cuda.set_rng_state_all(cuda)
