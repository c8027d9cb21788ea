"""Two C++ kernels for the decode steps of a few sequences on CPUs with AVX512-BF16.

At one to four sequences a decode step of a small model is matrix-vector products over every weight
plus many tiny ops, and both run far below what the machine gives:

* `gemv`: oneDNN's bf16 GEMM on such a product reads the weights at ~8-12 GB/s per core on our
  boxes, where a plain sum reads 26 (`scripts/bench/bench_gemv.py`). This runs each output row as
  `vdpbf16ps` dot products (32 bf16 pairs per instruction, fp32 accumulators) straight over the
  model's own row-major weights: no packed copy, and several weights (q/k/v, gate/up) in one call
  that writes one output.
* `decode_attention`: one query per row against the KV cache, in one call per layer instead of
  the ~15 ops (conversions, two matmuls, scale, softmax, reshapes) the matmul attention runs,
  whose fixed cost per op dominates at these sizes.

Numbers: as the ops they replace compute them (bf16 products exact in fp32, fp32 sums, fp32
softmax) but summed in another order, so results can differ in the last bf16 bit (the tests hold
both to float64 references). `vdpbf16ps` treats denormal inputs as zero.

The source is compiled on first use (`torch.utils.cpp_extension.load_inline`, about 35 s on 2
cores) into `<cache root>/kernels/`, then loaded from there (~1 s). `load()` returns None, and the
lean forward keeps oneDNN and the matmul attention, where the CPU lacks AVX512-BF16 or the build
fails (no compiler): the reason is logged once.
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
from functools import lru_cache
from typing import Any, Sequence

import torch

log = logging.getLogger(__name__)

# -fopenmp: at::parallel_for splits the rows over torch's threads only when built with OpenMP (the
# process's libgomp, the one torch loaded, is the one used)
_CFLAGS = ["-O3", "-mavx512f", "-mavx512bf16", "-fopenmp"]
MAX_ROWS = 4  # inputs with more rows than this go to the GEMM (the weights are reused across rows there)

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>
#include <algorithm>

static inline float bf16_value(uint16_t v) {
  uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

static inline at::BFloat16 to_bf16(float f) { return at::BFloat16(f); }  // round to nearest even, as .to()

// out[m, o] = sum_i x[m, i] * w[o, i] for one weight row o and M rows of x (M <= 4).
template <int M>
static void dot_row(const uint16_t* x, const uint16_t* row, int64_t k, float bias, at::BFloat16* out,
                    int64_t out_stride) {
  __m512 acc0[M], acc1[M];
  for (int m = 0; m < M; ++m) { acc0[m] = _mm512_setzero_ps(); acc1[m] = _mm512_setzero_ps(); }
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(row + i);
    __m512bh w1 = (__m512bh)_mm512_loadu_si512(row + i + 32);
    for (int m = 0; m < M; ++m) {
      acc0[m] = _mm512_dpbf16_ps(acc0[m], w0, (__m512bh)_mm512_loadu_si512(x + m * k + i));
      acc1[m] = _mm512_dpbf16_ps(acc1[m], w1, (__m512bh)_mm512_loadu_si512(x + m * k + i + 32));
    }
  }
  for (; i + 32 <= k; i += 32) {
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(row + i);
    for (int m = 0; m < M; ++m)
      acc0[m] = _mm512_dpbf16_ps(acc0[m], w0, (__m512bh)_mm512_loadu_si512(x + m * k + i));
  }
  for (int m = 0; m < M; ++m) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0[m], acc1[m]));
    for (int64_t j = i; j < k; ++j) s += bf16_value(row[j]) * bf16_value(x[m * k + j]);
    out[m * out_stride] = to_bf16(s + bias);
  }
}

// x [M, K] bf16; weights: [N_j, K] bf16 each, stacked on the output; bias: fp32 [sum N_j] or empty.
torch::Tensor gemv(torch::Tensor x, std::vector<torch::Tensor> weights, torch::Tensor bias) {
  const int64_t rows = x.size(0), k = x.size(1);
  int64_t n = 0;
  std::vector<const uint16_t*> starts;
  std::vector<int64_t> offsets;
  for (auto& w : weights) {
    offsets.push_back(n);
    starts.push_back(reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>()));
    n += w.size(0);
  }
  offsets.push_back(n);
  auto out = torch::empty({rows, n}, x.options());
  const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const float* bp = bias.numel() ? bias.data_ptr<float>() : nullptr;
  at::BFloat16* op = out.data_ptr<at::BFloat16>();
  at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    size_t j = 0;
    for (int64_t o = begin; o < end; ++o) {
      while (o >= offsets[j + 1]) ++j;
      const uint16_t* row = starts[j] + (o - offsets[j]) * k;
      const float b = bp ? bp[o] : 0.f;  // added in fp32 before the one rounding, as oneDNN does
      switch (rows) {
        case 1: dot_row<1>(xp, row, k, b, op + o, n); break;
        case 2: dot_row<2>(xp, row, k, b, op + o, n); break;
        case 3: dot_row<3>(xp, row, k, b, op + o, n); break;
        default: dot_row<4>(xp, row, k, b, op + o, n); break;
      }
    }
  });
  return out;
}

// RMSNorm of rows x [M, H] bf16 with weight [H] bf16, as the Llama norm computes it: fp32
// x * rsqrt(mean(x^2) + eps), rounded to bf16, times the weight, rounded to bf16.
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  const int64_t rows = x.size(0), h = x.size(1);
  auto out = torch::empty_like(x);
  const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  at::BFloat16* op = out.data_ptr<at::BFloat16>();
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = xp + r * h;
    float squares = 0.f;
    #pragma omp simd reduction(+:squares)
    for (int64_t i = 0; i < h; ++i) squares += bf16_value(row[i]) * bf16_value(row[i]);
    const float scale = 1.f / std::sqrt(squares / float(h) + float(eps));
    for (int64_t i = 0; i < h; ++i)
      op[r * h + i] = to_bf16(bf16_value(wp[i]) * float(to_bf16(bf16_value(row[i]) * scale)));
  }
  return out;
}

// One decode step's attention: q [B, H, D] (one query per row), k and v [B, KVH, L, D] (the cache's
// views: any strides, unit stride on D), key_mask [B, L] bool (true: attend) or empty. fp32 scores,
// softmax and weighted sum, as the engine's matmul attention computes them; -> [B, H, D] bf16.
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor key_mask,
                               double scale) {
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k.size(1), len = k.size(2), group = heads / kv_heads;
  const uint16_t* qp = reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>());
  const uint16_t* kp = reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>());
  const uint16_t* vp = reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>());
  const bool* mp = key_mask.numel() ? key_mask.data_ptr<bool>() : nullptr;
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1);
  const int64_t ks0 = k.stride(0), ks1 = k.stride(1), ks2 = k.stride(2);
  const int64_t vs0 = v.stride(0), vs1 = v.stride(1), vs2 = v.stride(2);
  const int64_t ms0 = mp ? key_mask.stride(0) : 0;
  auto out = torch::empty({batch, heads, dim}, q.options());
  at::BFloat16* op = out.data_ptr<at::BFloat16>();
  const float lowest = std::numeric_limits<float>::lowest();
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> query(dim), scores(len), o(dim);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads, h = bh % heads, j = h / group;
      for (int64_t d = 0; d < dim; ++d) query[d] = bf16_value(qp[b * qs0 + h * qs1 + d]);
      float top = lowest;
      for (int64_t t = 0; t < len; ++t) {
        const uint16_t* key = kp + b * ks0 + j * ks1 + t * ks2;
        float s = 0.f;
        #pragma omp simd reduction(+:s)
        for (int64_t d = 0; d < dim; ++d) s += query[d] * bf16_value(key[d]);
        s *= float(scale);
        if (mp && !mp[b * ms0 + t]) s = lowest;  // as masked_fill with the lowest float
        scores[t] = s;
        top = std::max(top, s);
      }
      float total = 0.f;
      for (int64_t t = 0; t < len; ++t) { scores[t] = std::exp(scores[t] - top); total += scores[t]; }
      std::fill(o.begin(), o.end(), 0.f);
      for (int64_t t = 0; t < len; ++t) {
        const float p = scores[t] / total;
        const uint16_t* value = vp + b * vs0 + j * vs1 + t * vs2;
        #pragma omp simd
        for (int64_t d = 0; d < dim; ++d) o[d] += p * bf16_value(value[d]);
      }
      for (int64_t d = 0; d < dim; ++d) op[bh * dim + d] = to_bf16(o[d]);
    }
  });
  return out;
}
"""


def _cpu_has_avx512_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "avx512_bf16" in line.split() for line in f)
    except OSError:
        return False


def _build_dir() -> str:
    from pettingllms.utils.models import cache_root

    key = hashlib.sha256((_SOURCE + " ".join(_CFLAGS) + torch.__version__ + platform.machine()).encode()).hexdigest()[:16]
    folder = cache_root() / "kernels" / f"cpu_kernels_{key}"
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


def _cpu_reason() -> str | None:
    """Why the kernels cannot run on this machine at all, or None."""
    if os.environ.get("PETTINGLLMS_NO_CPU_KERNELS"):
        return "off (PETTINGLLMS_NO_CPU_KERNELS is set)"
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
    try:
        from torch.utils.cpp_extension import load_inline

        _ninja_on_path()
        return load_inline("pettingllms_cpu_kernels", cpp_sources=_SOURCE, functions=["gemv", "decode_attention", "rms_norm"],
                           extra_cflags=_CFLAGS, extra_ldflags=["-fopenmp"], build_directory=_build_dir(),
                           verbose=False)
    except Exception as e:  # no compiler, no ninja, a toolchain without these intrinsics
        log.warning("CPU decode kernels could not be built (%s); oneDNN and the matmul attention are used",
                    str(e).splitlines()[0][:200])
        return None


def takes(weights: Sequence[torch.Tensor]) -> bool:
    """Whether `gemv` runs on these weights: bf16 on the CPU, row-major, one input width."""
    return bool(weights) and all(w.dtype == torch.bfloat16 and w.dim() == 2 and w.is_contiguous()
                                 and w.device.type == "cpu" and w.shape[1] == weights[0].shape[1] for w in weights)


def gemv(kernel: Any, x: torch.Tensor, weights: Sequence[torch.Tensor], bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] bf16 (1 <= M <= MAX_ROWS) times the weights (`takes`) stacked on the output
    dimension, plus bias -> [M, sum N] bf16."""
    if not 1 <= x.shape[0] <= MAX_ROWS or x.dim() != 2 or x.dtype != torch.bfloat16 or x.shape[1] != weights[0].shape[1]:
        raise ValueError(f"bf16 GEMV takes [1..{MAX_ROWS}, {weights[0].shape[1]}] bf16 inputs, got "
                         f"{list(x.shape)} {x.dtype}")
    b = bias.float().contiguous() if bias is not None else x.new_empty(0, dtype=torch.float32)
    return kernel.gemv(x.contiguous(), list(weights), b)


def decode_attention(kernel: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     key_mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v for one query per row: query [B, H, D], key/value
    [B, KVH, L, D] (H a multiple of KVH; any strides with unit stride on D), key_mask [B, L] bool
    (True: attend) or None -> [B, H, D] bf16."""
    b, heads, d = query.shape
    if (query.dtype, key.dtype, value.dtype) != (torch.bfloat16,) * 3 or key.shape != value.shape \
            or key.shape[0] != b or key.shape[3] != d or heads % key.shape[1] \
            or min(query.stride(-1), key.stride(-1), value.stride(-1)) != 1:
        raise ValueError(f"decode attention takes bf16 q [B, H, D] and k/v [B, KVH, L, D] with unit stride on D, "
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
