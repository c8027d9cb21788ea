"""This box's ceilings for decoding, measured in the run that is judged against them, and the
roofline arithmetic (scripts/bench/bench_engine.py --roofline, scripts/bench/vs_trl.py).

One decode step of a batch of B sequences reads every weight once and does 2 FLOPs per weight per
sequence, so tokens/s <= min(B * bandwidth / weight_bytes, gemm_rate / (2 * params)). Below
COMPUTE_ROWS sequences only the first term is used: a GEMM of a few rows is itself bound by reading
its weights, so its measured "rate" is no compute ceiling. The KV cache's reads and attention's
FLOPs are left out (small next to the weights at bench lengths): the ceiling is a little high,
never low. The weights are counted at 2 bytes each (bf16, the smallest this project stores them
in) and the GEMM rate is the faster of fp32 and bf16 on this box at the batch's shape: the box's
best, whatever dtype the engine under test happened to run.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

BF16_BYTES = 2
COMPUTE_ROWS = 8  # from this batch on, the GEMM rate bounds decoding too
REFERENCE_ROWS = 256  # a large-batch GEMM, measured as the box's near-peak rate for reference


def read_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    """Memory read rate (bytes/s) with torch's current threads: the best of `repeats` sums over a
    buffer far larger than the caches."""
    buf = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    buf.sum()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    return buf.numel() * 4 / best


def gemm_rate(rows: int, k: int, n: int, dtype: torch.dtype, seconds: float = 0.3) -> float:
    """FLOP/s of `F.linear(x[rows, k], w[n, k])` in `dtype` with torch's current threads: the best of
    three windows of `seconds / 3` (a shared box's neighbours slow some windows, not the hardware)."""
    x, w = torch.randn(rows, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    with torch.inference_mode():
        torch.nn.functional.linear(x, w)
        best = 0.0
        for _ in range(3):
            count, t0 = 0, time.perf_counter()
            while count < 2 or time.perf_counter() - t0 < seconds / 3:
                torch.nn.functional.linear(x, w)
                count += 1
            best = max(best, 2 * rows * k * n * count / (time.perf_counter() - t0))
    return best


def ceiling(batch: int, params: int, weight_bytes: float, bandwidth: float,
            flops_rate: float | None) -> tuple[float, str]:
    """(tokens/s the box allows a decode of `batch` sequences, "memory" or "compute": the bound).
    `flops_rate` None (batches under COMPUTE_ROWS): memory only."""
    memory = batch * bandwidth / weight_bytes
    if flops_rate is None:
        return memory, "memory"
    compute = flops_rate / (2 * params)
    return (memory, "memory") if memory <= compute else (compute, "compute")


@dataclass
class ModelShape:
    params: int  # stored once: tied embeddings count once, as the lm_head reads them
    hidden: int
    intermediate: int

    @classmethod
    def of_folder(cls, folder: str | Path) -> "ModelShape":
        """From a HF folder's safetensors headers and config.json (reads no weights)."""
        from safetensors import safe_open

        folder = Path(folder)
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ValueError(f"{folder}: no .safetensors files to count parameters from")
        params = 0
        for f in files:
            with safe_open(str(f), "pt") as fh:
                params += sum(math.prod(fh.get_slice(name).get_shape()) for name in fh.keys())
        config = json.loads((folder / "config.json").read_text())
        return cls(params, int(config["hidden_size"]), int(config["intermediate_size"]))


@dataclass
class Roofline:
    """The box's ceilings for one model: bandwidth (bytes/s) and GEMM FLOP/s per dtype per batch."""
    shape: ModelShape
    bandwidth: float
    gemm: dict[str, dict[int, float]]

    @classmethod
    def measure(cls, shape: ModelShape, batches: list[int], mib: int = 256, seconds: float = 0.3) -> "Roofline":
        """Bandwidth, then F.linear at the model's largest projection ([B, hidden] x [intermediate,
        hidden]) in fp32 and bf16 for each batch B >= COMPUTE_ROWS and for REFERENCE_ROWS."""
        rows = sorted({b for b in batches if b >= COMPUTE_ROWS} | {REFERENCE_ROWS})
        gemm = {name: {b: gemm_rate(b, shape.hidden, shape.intermediate, dtype, seconds) for b in rows}
                for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
        return cls(shape, read_bandwidth(mib), gemm)

    def best_gemm(self, batch: int) -> tuple[float, str] | None:
        """(FLOP/s, dtype) of the faster GEMM at `batch` rows; None under COMPUTE_ROWS."""
        if batch < COMPUTE_ROWS:
            return None
        if batch not in self.gemm["float32"]:
            raise ValueError(f"batch {batch}: no GEMM rate measured for it")
        return max((rates[batch], name) for name, rates in self.gemm.items())

    def tok_s(self, batch: int) -> tuple[float, str]:
        best = self.best_gemm(batch)
        return ceiling(batch, self.shape.params, self.shape.params * BF16_BYTES, self.bandwidth,
                       None if best is None else best[0])

    def call_tok_s(self, batch: int, generated: int, prompt_tokens: int) -> float:
        """The ceiling of a whole generate call in generated tokens/s: `tok_s(batch)` counts the decode
        only, while the call also prefills its prompts, 2 FLOPs per weight per prompt token at the box's
        best large-batch GEMM rate (the fastest a prefill can go, so this ceiling too is high, never low)."""
        prefill_s = prompt_tokens * 2 * self.shape.params / self.best_gemm(REFERENCE_ROWS)[0]
        return generated / (prefill_s + generated / self.tok_s(batch)[0])

    def describe(self) -> list[str]:
        lines = [f"roofline: {self.shape.params / 1e6:.1f}M params = {self.shape.params * BF16_BYTES / 1e6:.0f} MB "
                 f"in bf16, read bandwidth {self.bandwidth / 1e9:.1f} GB/s, {torch.get_num_threads()} threads"]
        for b in sorted(self.gemm["float32"]):
            lines.append(f"roofline: GEMM [{b}x{self.shape.hidden}]x[{self.shape.hidden}x{self.shape.intermediate}] "
                         f"fp32 {self.gemm['float32'][b] / 1e9:.1f}, bf16 {self.gemm['bfloat16'][b] / 1e9:.1f} GFLOP/s"
                         + (" (reference)" if b == REFERENCE_ROWS else ""))
        return lines

    def as_dict(self) -> dict:
        return {"params": self.shape.params, "bandwidth_gb_s": round(self.bandwidth / 1e9, 2),
                "gemm_gflops": {name: {str(b): round(r / 1e9, 1) for b, r in rates.items()}
                                for name, rates in self.gemm.items()},
                "memory_tok_s_per_sequence": round(self.tok_s(1)[0], 1)}
