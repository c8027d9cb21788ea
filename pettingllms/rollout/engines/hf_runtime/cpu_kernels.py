"""C++ kernels for the HF engine's bf16 forward on CPUs with AVX512-BF16 (source: `cpu_kernels.cpp`).

A decode step of a small model at 1-32 sequences is small matrix products over every weight plus
many tiny ops, and both run far below what the machine gives: oneDNN's bf16 GEMM reads the weights
well below memory bandwidth at these row counts, and each tiny op's fixed cost dominates its work
(`scripts/bench/bench_gemv.py` measures the products; docs/results/speed.md has the numbers).

* `gemm` over a copy that `pack` makes (`[N/16, K/2, 16, 2]`: sixteen output columns' pairs along
  K side by side): one `vdpbf16ps` multiplies a broadcast pair of x into sixteen outputs, 24 fp32
  accumulators in registers (six rows by 64 columns), each weight block read once per six rows.
  Several weights (q/k/v, gate/up) pack into one copy and one call. It replaces oneDNN's packed
  copy (same size), and runs at any number of rows, prefill included.
* `decode_attention`: one query per row against the KV cache, in one call per layer instead of
  the ~15 ops (conversions, two matmuls, scale, softmax, reshapes) the matmul attention runs,
  whose fixed cost per op dominates at these sizes.
* `rope_decode` (a decode step's rotary embedding and KV-cache write), `rms_norm` and `silu_mul`
  (SwiGLU): one call each instead of about twelve, five and three ops.
* `lora_merge`: a LoRA update's merge into a bf16 weight in one pass, instead of an fp32 delta, a
  sum and a rounding, each a pass over fp32 copies of every adapted weight.
* `top_candidates`: the sampler's temperature division, top-k over the vocabulary and row
  logsumexp in one call: one pass over the vocabulary instead of three ops over it.

Numbers: as the ops they replace compute them (bf16 products exact in fp32, fp32 sums, fp32
softmax, the same bf16 roundings) but summed in another order, so results can differ in the last
bf16 bit (the tests hold them to float64 references or to torch's ops). `vdpbf16ps` treats
denormal inputs as zero.

The source is compiled on first use (`torch.utils.cpp_extension.load_inline`, tens of seconds)
into `<cache root>/kernels/cpu_kernels_<key>/`, then loaded from there (about a second); the key
hashes the source, flags, function list, torch version and machine, so any change builds anew.
`load()` returns None, and the lean forward keeps oneDNN and the matmul attention, where the CPU
lacks AVX512-BF16 or the build fails (no compiler): the reason is logged once.
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
from functools import lru_cache
from importlib import resources
from typing import Any, Sequence

import torch

from pettingllms.utils.precision import cpu_flags  # the one cpuinfo reader; honours PETTINGLLMS_NO_CPU_BF16

log = logging.getLogger(__name__)

# -fopenmp: at::parallel_for splits the rows over torch's threads only when built with OpenMP (the
# process's libgomp, the one torch loaded, is the one used)
_CFLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-fopenmp"]

_FUNCTIONS = ["pack_pairs", "gemm_packed", "silu_mul", "rope_decode", "decode_attention", "rms_norm", "top_candidates",
              "lora_merge"]
_SOURCE_FILE = "cpu_kernels.cpp"  # package data, next to this module

_CPU_FLAGS = {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}  # what _CFLAGS let the compiler use
# Which kernel set the engine runs: auto (AVX512-BF16 where the CPU has it, else the AVX2 GEMM of
# `avx2_kernels`) or avx2 (that GEMM even here: how its tests and benchmarks run on any x86-64 box)
CHOICE_ENV = "PETTINGLLMS_CPU_KERNELS"
CHOICES = ("auto", "avx2")


def cpu_has(flags: set[str]) -> bool:
    """Whether the CPU has all these flags (precision.cpu_flags: /proc/cpuinfo, less what
    PETTINGLLMS_NO_CPU_BF16 hides)."""
    return flags <= cpu_flags()


def _cpu_has_avx512_bf16() -> bool:
    return cpu_has(_CPU_FLAGS)


def choice() -> str:
    """`PETTINGLLMS_CPU_KERNELS` (default auto); a value it does not know is a one-line error."""
    value = os.environ.get(CHOICE_ENV, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{CHOICE_ENV}={value!r}: use one of {', '.join(CHOICES)}")
    return value


@lru_cache(maxsize=None)
def _source(name: str = _SOURCE_FILE) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _build_dir(name: str, source: str, cflags: Sequence[str], functions: Sequence[str]) -> str:
    from pettingllms.utils.models import cache_root

    text = source + " ".join([*cflags, *functions]) + torch.__version__ + platform.machine()
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = cache_root() / "kernels" / f"{name}_{key}"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


def _ninja_on_path() -> None:
    """torch runs `ninja` from PATH; the pip package's binary sits next to the interpreter."""
    try:
        import ninja
    except ImportError:
        return
    folder = getattr(ninja, "BIN_DIR", "")
    if folder and folder not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")


def build(name: str, source_file: str, cflags: Sequence[str], functions: Sequence[str], what: str) -> Any | None:
    """The compiled module of `source_file` (next to this module), built once into the cache; None,
    with the reason logged, where the build fails. `what`: the kernels, for the log line."""
    try:
        from torch.utils.cpp_extension import load_inline

        _ninja_on_path()
        source = _source(source_file)
        return load_inline(f"pettingllms_{name}", cpp_sources=source, functions=list(functions),
                           extra_cflags=list(cflags), extra_ldflags=["-fopenmp"],
                           build_directory=_build_dir(name, source, cflags, functions), verbose=False)
    except Exception as e:  # no compiler, no ninja, a toolchain without these intrinsics
        log.warning("%s could not be built (%s); oneDNN and the torch ops are used", what,
                    str(e).splitlines()[0][:200])
        return None


def _cpu_reason() -> str | None:
    """Why the kernels cannot run on this machine at all, or None."""
    if os.environ.get("PETTINGLLMS_NO_CPU_KERNELS"):
        return "off (PETTINGLLMS_NO_CPU_KERNELS is set)"
    if choice() == "avx2":
        return f"off ({CHOICE_ENV}=avx2: the AVX2 GEMM instead)"
    if platform.machine() not in ("x86_64", "AMD64") or not _cpu_has_avx512_bf16():
        return "this CPU has no AVX512-BF16"
    return None


def available() -> bool:
    """Whether `load()` can give the kernels here: the CPU has AVX512-BF16 and a C++ compiler is on
    PATH (cheap: builds nothing; a failing build still makes `load()` return None)."""
    import shutil

    return _cpu_reason() is None and shutil.which(os.environ.get("CXX", "c++")) is not None


@lru_cache(maxsize=1)
def load() -> Any | None:
    """The compiled kernel module, or None (the reason logged) where it cannot run here."""
    reason = _cpu_reason()
    if reason is not None:
        log.info("CPU decode kernels: %s; oneDNN and the matmul attention are used", reason)
        return None
    return build("cpu_kernels", _SOURCE_FILE, _CFLAGS, _FUNCTIONS, "CPU decode kernels")


def takes(weights: Sequence[torch.Tensor]) -> bool:
    """Whether `pack` takes these weights: bf16 on the CPU, row-major, one even input
    width (`gemm` multiplies pairs along it)."""
    return bool(weights) and weights[0].dim() == 2 and weights[0].shape[1] % 2 == 0 and all(
        w.dtype == torch.bfloat16 and w.dim() == 2 and w.is_contiguous() and w.device.type == "cpu"
        and w.shape[1] == weights[0].shape[1] for w in weights)


def pack(kernel: Any, weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """The weights (`takes`) stacked on the output dimension, in `gemm`'s layout (a copy:
    [ceil(N / 16), K / 2, 16, 2] bf16, zero-padded)."""
    if not takes(weights):
        raise ValueError("pack takes row-major bf16 CPU weights [N_j, K] with one even K")
    return kernel.pack_pairs(list(weights))


def gemm(kernel: Any, x: torch.Tensor, packed: torch.Tensor, n: int, bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] bf16 (any M >= 1) times the `n`-column weight `pack` made, plus bias -> [M, n] bf16."""
    k = packed.shape[1] * 2
    if x.dim() != 2 or x.dtype != torch.bfloat16 or x.shape[1] != k or not 0 < n <= packed.shape[0] * 16 \
            or x.shape[0] < 1:
        raise ValueError(f"bf16 GEMM takes [M >= 1, {k}] bf16 inputs and 1..{packed.shape[0] * 16} columns, got "
                         f"{list(x.shape)} {x.dtype}, n={n}")
    b = bias.float().contiguous() if bias is not None else x.new_empty(0, dtype=torch.float32)
    return kernel.gemm_packed(x.contiguous(), packed, int(n), b)


def lora_merge(kernel: Any, base: torch.Tensor, b: torch.Tensor, a: torch.Tensor, out: torch.Tensor) -> None:
    """out = base + b @ a rounded to bf16, in place (`LoraFactor.merge` calls it): base and out
    [N, K] bf16 (out may be base), b [N, r] and a [r, K] fp32, the LoRA scaling already in b."""
    n, k = base.shape
    if not (base.dtype == out.dtype == torch.bfloat16 and b.dtype == a.dtype == torch.float32
            and out.shape == base.shape and b.shape[0] == n and a.shape == (b.shape[1], k)
            and all(t.is_contiguous() and t.device.type == "cpu" for t in (base, b, a, out))):
        raise ValueError("lora_merge takes contiguous CPU base, out [N, K] bf16, b [N, r] and a [r, K] fp32")
    kernel.lora_merge(base, b, a, out)
    # The kernel writes through the data pointer; torch's in-place ops also bump the version
    # counter, which is how copies made from `out` (the lean forward's packed weights) see a change.
    torch.autograd.graph.increment_version(out)


def silu_mul(kernel: Any, y: torch.Tensor) -> torch.Tensor:
    """SwiGLU of bf16 rows y [M, 2I] (gate | up): silu(gate) * up -> [M, I] bf16, rounded as
    torch's bf16 ops round."""
    if y.dim() != 2 or y.dtype != torch.bfloat16 or y.shape[1] % 2:
        raise ValueError(f"silu_mul takes bf16 [M, 2I], got {list(y.shape)} {y.dtype}")
    return kernel.silu_mul(y.contiguous())


def rope_decode(kernel: Any, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int,
                kbuf: torch.Tensor, vbuf: torch.Tensor, col: int) -> torch.Tensor:
    """A decode step's rotary embedding and cache write: y [B, (H + 2 KVH) D] bf16 (fused q/k/v),
    cos/sin [B, D] bf16 -> rotated q [B, H, D]; rotated k and v written to column `col` of kbuf /
    vbuf [B, KVH, C, D] (unit stride on D)."""
    b, d = cos.shape
    if y.dtype != torch.bfloat16 or tuple(y.shape) != (b, (heads + 2 * kv_heads) * d) or d % 2 \
            or cos.dtype != torch.bfloat16 or sin.shape != cos.shape or sin.dtype != torch.bfloat16 \
            or any(t.dtype != torch.bfloat16 or tuple(t.shape[:2]) != (b, kv_heads) or t.shape[3] != d
                   or t.stride(-1) != 1 for t in (kbuf, vbuf)) or not 0 <= col < min(kbuf.shape[2], vbuf.shape[2]):
        raise ValueError("rope_decode takes bf16 y [B, (H + 2 KVH) D], cos/sin [B, D] and cache buffers "
                         f"[B, KVH, C, D] with 0 <= col < C; got y {list(y.shape)}, cos {list(cos.shape)}, "
                         f"k {list(kbuf.shape)}, col {col}")
    return kernel.rope_decode(y.contiguous(), cos.contiguous(), sin.contiguous(), int(heads), int(kv_heads),
                              kbuf, vbuf, int(col))


def top_candidates(kernel: Any, logits: torch.Tensor, divisor: torch.Tensor,
                   count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For fp32 logits [B, V] divided by divisor [B]: the `count` largest scaled values per row,
    largest first, their ids (int64), and each row's logsumexp over all V scaled values."""
    if logits.dim() != 2 or logits.dtype != torch.float32 or divisor.shape != logits.shape[:1] \
            or divisor.dtype != torch.float32 or not 0 < count <= logits.shape[1]:
        raise ValueError(f"top_candidates takes fp32 logits [B, V], an fp32 divisor [B] and 0 < count <= V; "
                         f"got {list(logits.shape)} {logits.dtype}, {list(divisor.shape)}, count {count}")
    values, ids, lse = kernel.top_candidates(logits.contiguous(), divisor.contiguous(), int(count))
    return values, ids, lse


def attention_takes(head_dim: int) -> bool:
    """Whether `decode_attention` runs at this head size (sixteen lanes along it, at most 256)."""
    return head_dim % 16 == 0 and 0 < head_dim <= 256


def decode_attention(kernel: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     key_mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v for one query per row: query [B, H, D], key/value
    [B, KVH, L, D] (H a multiple of KVH; any strides with unit stride on D), key_mask [B, L] bool
    (True: attend) or None -> [B, H, D] bf16."""
    b, heads, d = query.shape
    if (query.dtype, key.dtype, value.dtype) != (torch.bfloat16,) * 3 or key.shape != value.shape \
            or key.shape[0] != b or key.shape[3] != d or heads % key.shape[1] or not attention_takes(d) \
            or min(query.stride(-1), key.stride(-1), value.stride(-1)) != 1:
        raise ValueError(f"decode attention takes bf16 q [B, H, D] and k/v [B, KVH, L, D] with unit stride on D "
                         f"(D a multiple of 16, at most 256), "
                         f"got {list(query.shape)}, {list(key.shape)}, {list(value.shape)}")
    mask = key_mask.to(torch.bool).contiguous() if key_mask is not None else torch.empty(0, dtype=torch.bool)
    if key_mask is not None and tuple(mask.shape) != (b, key.shape[2]):
        raise ValueError(f"key_mask must be [B, L] = {[b, key.shape[2]]}, got {list(mask.shape)}")
    return kernel.decode_attention(query, key, value, mask, float(scale))


def rms_norm(kernel: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The Llama RMSNorm of bf16 rows x [M, H] with a bf16 weight [H] -> [M, H] bf16."""
    if x.dim() != 2 or x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16 or weight.shape != x.shape[1:]:
        raise ValueError(f"rms_norm takes bf16 x [M, H] and weight [H], got {list(x.shape)} {x.dtype}, "
                         f"{list(weight.shape)} {weight.dtype}")
    return kernel.rms_norm(x.contiguous(), weight.contiguous(), float(eps))
