"""C++ kernels for the HF engine's bf16 forward on CPUs with AVX512-BF16.

A decode step of a small model at 1-32 sequences is small matrix products over every weight plus
many tiny ops, and both run far below what the machine gives (`scripts/bench/bench_gemv.py`,
2 cores): oneDNN's bf16 GEMM reads the weights at 11-16 GB/s at 1-16 rows where a plain sum reads
30, and reaches 220 GFLOP/s at 32 rows where a large matmul reaches ~390.

* `gemm` over a copy that `pack` makes (`[N/16, K/2, 16, 2]`: sixteen output columns' pairs along
  K side by side): one `vdpbf16ps` multiplies a broadcast pair of x into sixteen outputs, 24 fp32
  accumulators in registers (six rows by 64 columns), each weight block read once per six rows.
  Several weights (q/k/v, gate/up) pack into one copy and one call. It replaces oneDNN's packed
  copy (same size), and runs at any number of rows: 1.3-2.1x oneDNN at 1-32 rows, even at 64-256
  (prefill) on our box.
* `decode_attention`: one query per row against the KV cache, in one call per layer instead of
  the ~15 ops (conversions, two matmuls, scale, softmax, reshapes) the matmul attention runs,
  whose fixed cost per op dominates at these sizes.
* `rope_decode` (a decode step's rotary embedding and KV-cache write), `rms_norm` and `silu_mul`
  (SwiGLU): one call each instead of about twelve, five and three ops.
* `lora_merge`: a LoRA update's merge into a bf16 weight in one pass (the weight sync's fp32
  delta, sum and rounding were three passes over fp32 copies of every adapted weight).
* `top_candidates`: the sampler's temperature division, top-k over the vocabulary and row
  logsumexp in one call (torch's `topk` alone took ~1.6 ms at 32 rows).

Numbers: as the ops they replace compute them (bf16 products exact in fp32, fp32 sums, fp32
softmax, the same bf16 roundings) but summed in another order, so results can differ in the last
bf16 bit (the tests hold them to float64 references or to torch's ops). `vdpbf16ps` treats
denormal inputs as zero.

The source is compiled on first use (`torch.utils.cpp_extension.load_inline`, about 40 s on 2
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
_CFLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-fopenmp"]

_FUNCTIONS = ["pack_pairs", "gemm_packed", "silu_mul", "rope_decode", "decode_attention", "rms_norm", "top_candidates",
              "lora_merge"]

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

// sixteen bf16 (the first `count` of them; zeros after) as fp32
static inline __m512 load_bf16(const uint16_t* p, int count = 16) {
  const __m256i raw = _mm256_maskz_loadu_epi16(__mmask16((1u << count) - 1), p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// fp32 -> bf16, round to nearest even (as to_bf16), the first `count` of sixteen stored
static inline void store_bf16(uint16_t* p, __m512 x, int count = 16) {
  _mm256_mask_storeu_epi16(p, __mmask16((1u << count) - 1), (__m256i)_mm512_cvtneps_pbh(x));
}

static inline __m512 round_bf16(__m512 x) {  // the bf16 rounding, kept in fp32
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x)), 16));
}

// e^x in fp32, to about 2 ulp: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts), e^r by its
// degree-7 Taylor-like polynomial (Cephes' coefficients), times 2^n; 0 below about -104.
static inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, n);
}

// The weights (each [N_j, K] bf16, stacked on the output) as [ceil(N/16), K/2, 16, 2]: sixteen output
// columns' consecutive pairs along K side by side, zero-padded on N, so that one `vdpbf16ps`
// multiplies a pair of x (broadcast) into sixteen outputs at once.
torch::Tensor pack_pairs(std::vector<torch::Tensor> weights) {
  const int64_t k = weights[0].size(1);
  std::vector<const uint16_t*> rows;
  for (auto& w : weights) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
    for (int64_t r = 0; r < w.size(0); ++r) rows.push_back(p + r * k);
  }
  const int64_t n = int64_t(rows.size()), blocks = (n + 15) / 16, pairs = k / 2;
  auto out = torch::zeros({blocks, pairs, 16, 2}, weights[0].options());
  uint16_t* dst = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t c = 0; c < 16 && b * 16 + c < n; ++c) {
        const uint32_t* row = reinterpret_cast<const uint32_t*>(rows[b * 16 + c]);
        uint32_t* d = reinterpret_cast<uint32_t*>(dst + b * pairs * 32) + c;
        for (int64_t p = 0; p < pairs; ++p) d[p * 16] = row[p];
      }
  });
  return out;
}

// MR rows of x times NV blocks of sixteen packed columns, in MR x NV fp32 accumulators (registers).
template <int MR, int NV>
static inline void gemm_tile(const uint16_t* x, int64_t k, const uint16_t* w, int64_t block_stride,
                             const float* bias, int64_t col0, int64_t n, at::BFloat16* out) {
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k / 2; ++p) {
    __m512bh wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = (__m512bh)_mm512_loadu_si512(w + v * block_stride + p * 32);
    for (int m = 0; m < MR; ++m) {
      int32_t pair;
      std::memcpy(&pair, x + m * k + 2 * p, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], wv[v], xv);
    }
  }
  for (int v = 0; v < NV; ++v) {
    const int64_t c = col0 + v * 16;
    const __mmask16 valid = __mmask16((1u << std::min<int64_t>(16, n - c)) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(valid, bias + c) : _mm512_setzero_ps();
    for (int m = 0; m < MR; ++m) {  // bias added in fp32 before the one rounding, as oneDNN does
      const __m256bh r = _mm512_cvtneps_pbh(_mm512_add_ps(acc[m][v], b));
      _mm256_mask_storeu_epi16(reinterpret_cast<uint16_t*>(out + m * n + c), valid, (__m256i)r);
    }
  }
}

template <int NV>
static void gemm_rows(int mr, const uint16_t* x, int64_t k, const uint16_t* w, int64_t bs, const float* bias,
                      int64_t col0, int64_t n, at::BFloat16* out) {
  switch (mr) {
    case 1: gemm_tile<1, NV>(x, k, w, bs, bias, col0, n, out); break;
    case 2: gemm_tile<2, NV>(x, k, w, bs, bias, col0, n, out); break;
    case 3: gemm_tile<3, NV>(x, k, w, bs, bias, col0, n, out); break;
    case 4: gemm_tile<4, NV>(x, k, w, bs, bias, col0, n, out); break;
    case 5: gemm_tile<5, NV>(x, k, w, bs, bias, col0, n, out); break;
    default: gemm_tile<6, NV>(x, k, w, bs, bias, col0, n, out); break;
  }
}

// x [M, K] bf16 (K even) times the n-column weight packed by pack_pairs, plus bias (fp32 [n] or
// empty) -> [M, n] bf16. Threads take 64 columns each; rows go six at a time, 24 accumulators.
torch::Tensor gemm_packed(torch::Tensor x, torch::Tensor packed, int64_t n, torch::Tensor bias) {
  const int64_t rows = x.size(0), k = x.size(1), blocks = packed.size(0), bs = (k / 2) * 32;
  auto out = torch::empty({rows, n}, x.options());
  const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
  const float* bp = bias.numel() ? bias.data_ptr<float>() : nullptr;
  at::BFloat16* op = out.data_ptr<at::BFloat16>();
  at::parallel_for(0, (blocks + 3) / 4, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t b = g * 4, nv = std::min<int64_t>(4, blocks - b);
      for (int64_t m0 = 0; m0 < rows; m0 += 6) {
        const int mr = int(std::min<int64_t>(6, rows - m0));
        const uint16_t* xm = xp + m0 * k;
        at::BFloat16* om = op + m0 * n;
        switch (nv) {
          case 1: gemm_rows<1>(mr, xm, k, wp + b * bs, bs, bp, b * 16, n, om); break;
          case 2: gemm_rows<2>(mr, xm, k, wp + b * bs, bs, bp, b * 16, n, om); break;
          case 3: gemm_rows<3>(mr, xm, k, wp + b * bs, bs, bp, b * 16, n, om); break;
          default: gemm_rows<4>(mr, xm, k, wp + b * bs, bs, bp, b * 16, n, om); break;
        }
      }
    }
  });
  return out;
}

// SwiGLU of rows y [M, 2I] bf16 (gate | up): silu(gate) * up, each op rounded to bf16 as torch's
// bf16 F.silu and mul round them -> [M, I] bf16.
torch::Tensor silu_mul(torch::Tensor y) {
  const int64_t rows = y.size(0), inter = y.size(1) / 2;
  auto out = torch::empty({rows, inter}, y.options());
  const uint16_t* yp = reinterpret_cast<const uint16_t*>(y.data_ptr<at::BFloat16>());
  uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const __m512 one = _mm512_set1_ps(1.f);
  at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t i = 0; i < inter; i += 16) {
        const int count = int(std::min<int64_t>(16, inter - i));
        const __m512 g = load_bf16(yp + r * 2 * inter + i, count), u = load_bf16(yp + r * 2 * inter + inter + i, count);
        const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        store_bf16(op + r * inter + i, _mm512_mul_ps(round_bf16(silu), u), count);
      }
  });
  return out;
}

// A LoRA merge: out = bf16(base + B A) for base, out [N, K] bf16 and B [N, r], A [r, K] fp32 (the
// scaling already in B). ROWS rows share each pass over A (sixteen columns at a time, fp32 sums
// over r in order, then the base added; the row count fixed at compile time keeps the sums in
// registers); out may be base.
template <int ROWS>
static inline void lora_merge_rows(const uint16_t* base, const float* B, const float* A, uint16_t* out,
                                   int64_t k, int64_t r) {
  for (int64_t j = 0; j < k; j += 16) {
    const int count = int(std::min<int64_t>(16, k - j));
    const __mmask16 m = __mmask16((1u << count) - 1);
    __m512 acc[ROWS];
    for (int rr = 0; rr < ROWS; ++rr) acc[rr] = _mm512_setzero_ps();
    for (int64_t t = 0; t < r; ++t) {
      const __m512 av = _mm512_maskz_loadu_ps(m, A + t * k + j);
      for (int rr = 0; rr < ROWS; ++rr) acc[rr] = _mm512_fmadd_ps(_mm512_set1_ps(B[rr * r + t]), av, acc[rr]);
    }
    for (int rr = 0; rr < ROWS; ++rr)
      store_bf16(out + rr * k + j, _mm512_add_ps(acc[rr], load_bf16(base + rr * k + j, count)), count);
  }
}

void lora_merge(torch::Tensor base, torch::Tensor b, torch::Tensor a, torch::Tensor out) {
  const int64_t n = base.size(0), k = base.size(1), r = a.size(0);
  const uint16_t* bp = reinterpret_cast<const uint16_t*>(base.data_ptr<at::BFloat16>());
  uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const float* B = b.data_ptr<float>();
  const float* A = a.data_ptr<float>();
  at::parallel_for(0, (n + 3) / 4, 8, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t i = q * 4;
      switch (std::min<int64_t>(4, n - i)) {
        case 4: lora_merge_rows<4>(bp + i * k, B + i * r, A, op + i * k, k, r); break;
        case 3: lora_merge_rows<3>(bp + i * k, B + i * r, A, op + i * k, k, r); break;
        case 2: lora_merge_rows<2>(bp + i * k, B + i * r, A, op + i * k, k, r); break;
        default: lora_merge_rows<1>(bp + i * k, B + i * r, A, op + i * k, k, r);
      }
    }
  });
}

// One decode step's rotary embedding and KV-cache write: y [B, (H + 2 KVH) D] bf16 is the fused
// q/k/v output; cos, sin [B, D] bf16 the rows' tables. Rotates q and k as the Llama forward does
// in bf16 (x cos + rotate_half(x) sin, each product and the sum rounded to bf16), writes k and v
// into column `col` of the cache buffers kbuf, vbuf [B, KVH, C, D] (any strides, unit stride on
// D), and returns the rotated q [B, H, D].
torch::Tensor rope_decode(torch::Tensor y, torch::Tensor cos, torch::Tensor sin, int64_t heads, int64_t kv_heads,
                          torch::Tensor kbuf, torch::Tensor vbuf, int64_t col) {
  const int64_t batch = y.size(0), dim = cos.size(1), half = dim / 2;
  auto q = torch::empty({batch, heads, dim}, y.options());
  const uint16_t* yp = reinterpret_cast<const uint16_t*>(y.data_ptr<at::BFloat16>());
  const uint16_t* cp = reinterpret_cast<const uint16_t*>(cos.data_ptr<at::BFloat16>());
  const uint16_t* sp = reinterpret_cast<const uint16_t*>(sin.data_ptr<at::BFloat16>());
  uint16_t* qp = reinterpret_cast<uint16_t*>(q.data_ptr<at::BFloat16>());
  uint16_t* kp = reinterpret_cast<uint16_t*>(kbuf.data_ptr<at::BFloat16>());
  uint16_t* vp = reinterpret_cast<uint16_t*>(vbuf.data_ptr<at::BFloat16>());
  const int64_t ks0 = kbuf.stride(0), ks1 = kbuf.stride(1), ks2 = kbuf.stride(2);
  const int64_t vs0 = vbuf.stride(0), vs1 = vbuf.stride(1), vs2 = vbuf.stride(2);
  const int64_t width = y.size(1);
  at::parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint16_t* row = yp + b * width;
      const uint16_t* c = cp + b * dim;
      const uint16_t* s = sp + b * dim;
      for (int64_t h = 0; h < heads + kv_heads; ++h) {
        const uint16_t* x = row + h * dim;
        uint16_t* dst = h < heads ? qp + (b * heads + h) * dim : kp + b * ks0 + (h - heads) * ks1 + col * ks2;
        for (int64_t i = 0; i < dim; ++i) {
          const float rotated = i < half ? -bf16_value(x[i + half]) : bf16_value(x[i - half]);
          const float a = float(to_bf16(bf16_value(x[i]) * bf16_value(c[i])));
          const float r = float(to_bf16(rotated * bf16_value(s[i])));
          const at::BFloat16 out = to_bf16(a + r);
          std::memcpy(dst + i, &out, 2);
        }
      }
      for (int64_t j = 0; j < kv_heads; ++j)
        std::memcpy(vp + b * vs0 + j * vs1 + col * vs2, row + (heads + kv_heads + j) * dim, 2 * dim);
    }
  });
  return q;
}

// The sampler's view of a batch of logits [B, V] fp32 divided by `divisor` [B] (the rows'
// temperatures): each row's `count` largest scaled values, largest first (ties: lower id first),
// their token ids, and the row's logsumexp over the whole vocabulary. One pass keeps a min-heap
// of the best `count` (sixteen values compared with its smallest at once), a second sums exp.
std::vector<torch::Tensor> top_candidates(torch::Tensor logits, torch::Tensor divisor, int64_t count) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  auto values = torch::empty({rows, count}, logits.options());
  auto ids = torch::empty({rows, count}, logits.options().dtype(torch::kInt64));
  auto lse = torch::empty({rows}, logits.options());
  const float* lp = logits.data_ptr<float>();
  const float* dp = divisor.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  float* ep = lse.data_ptr<float>();
  // min-heap order: the smallest value (and, among equal values, the highest id) on top
  auto worse = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<std::pair<float, int64_t>> heap;
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = lp + r * vocab;
      const float d = dp[r];
      const __m512 dv = _mm512_set1_ps(d);
      heap.clear();
      int64_t i = 0;
      for (; i < vocab && int64_t(heap.size()) < count; ++i) {
        heap.emplace_back(x[i] / d, i);
        std::push_heap(heap.begin(), heap.end(), worse);
      }
      auto offer = [&](float v, int64_t id) {
        if (v > heap.front().first) {
          std::pop_heap(heap.begin(), heap.end(), worse);
          heap.back() = {v, id};
          std::push_heap(heap.begin(), heap.end(), worse);
        }
      };
      for (; i < vocab && i % 16; ++i) offer(x[i] / d, i);
      for (; i + 16 <= vocab; i += 16) {
        const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), dv);
        __mmask16 above = _mm512_cmp_ps_mask(v, _mm512_set1_ps(heap.front().first), _CMP_GT_OQ);
        if (!above) continue;
        alignas(64) float lane[16];
        _mm512_store_ps(lane, v);
        for (int j = 0; j < 16; ++j)
          if ((above >> j) & 1) offer(lane[j], i + j);
      }
      for (; i < vocab; ++i) offer(x[i] / d, i);
      std::sort_heap(heap.begin(), heap.end(), worse);  // best first
      for (int64_t c = 0; c < count; ++c) { vp[r * count + c] = heap[c].first; ip[r * count + c] = heap[c].second; }
      const float top = heap[0].first;
      __m512 sum = _mm512_setzero_ps();
      for (int64_t j = 0; j < vocab; j += 16) {
        const int n = int(std::min<int64_t>(16, vocab - j));
        const __mmask16 valid = __mmask16((1u << n) - 1);
        const __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(valid, x + j), dv);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(valid, exp_ps(_mm512_sub_ps(v, _mm512_set1_ps(top)))));
      }
      ep[r] = top + std::log(_mm512_reduce_add_ps(sum));
    }
  });
  return {values, ids, lse};
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
// A thread takes one (row, K/V head) and the query heads that share it, so each key and value
// row is read once for all of them; sixteen lanes along D (D a multiple of 16).
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor key_mask,
                               double scale) {
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k.size(1), len = k.size(2), group = heads / kv_heads, chunks = dim / 16;
  TORCH_CHECK(dim % 16 == 0 && chunks <= 16, "decode_attention: head dim must be a multiple of 16, at most 256");
  const uint16_t* qp = reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>());
  const uint16_t* kp = reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>());
  const uint16_t* vp = reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>());
  const bool* mp = key_mask.numel() ? key_mask.data_ptr<bool>() : nullptr;
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1);
  const int64_t ks0 = k.stride(0), ks1 = k.stride(1), ks2 = k.stride(2);
  const int64_t vs0 = v.stride(0), vs1 = v.stride(1), vs2 = v.stride(2);
  const int64_t ms0 = mp ? key_mask.stride(0) : 0;
  auto out = torch::empty({batch, heads, dim}, q.options());
  uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const float lowest = std::numeric_limits<float>::lowest();
  at::parallel_for(0, batch * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(group * len), top(group), total(group);
    std::vector<__m512> query(group * chunks), o(group * chunks);
    for (int64_t bj = begin; bj < end; ++bj) {
      const int64_t b = bj / kv_heads, j = bj % kv_heads;
      for (int64_t g = 0; g < group; ++g) {
        for (int64_t c = 0; c < chunks; ++c) query[g * chunks + c] = load_bf16(qp + b * qs0 + (j * group + g) * qs1 + c * 16);
        top[g] = lowest;
      }
      for (int64_t t = 0; t < len; ++t) {
        const uint16_t* key = kp + b * ks0 + j * ks1 + t * ks2;
        const bool masked = mp && !mp[b * ms0 + t];
        __m512 kc[16];
        for (int64_t c = 0; c < chunks; ++c) kc[c] = load_bf16(key + c * 16);
        for (int64_t g = 0; g < group; ++g) {
          __m512 acc = _mm512_mul_ps(query[g * chunks], kc[0]);
          for (int64_t c = 1; c < chunks; ++c) acc = _mm512_fmadd_ps(query[g * chunks + c], kc[c], acc);
          const float s = masked ? lowest : _mm512_reduce_add_ps(acc) * float(scale);  // as masked_fill
          scores[g * len + t] = s;
          top[g] = std::max(top[g], s);
        }
      }
      for (int64_t g = 0; g < group; ++g) {  // exp(s - max), masked keys exactly 0, and their sum
        float* row = scores.data() + g * len;
        __m512 sum = _mm512_setzero_ps();
        for (int64_t t = 0; t < len; t += 16) {
          const int count = int(std::min<int64_t>(16, len - t));
          const __mmask16 valid = __mmask16((1u << count) - 1);
          const __m512 s = _mm512_maskz_loadu_ps(valid, row + t);
          const __mmask16 keep = _mm512_mask_cmp_ps_mask(valid, s, _mm512_set1_ps(lowest), _CMP_NEQ_OQ);
          const __m512 e = _mm512_maskz_mov_ps(keep, exp_ps(_mm512_sub_ps(s, _mm512_set1_ps(top[g]))));
          _mm512_mask_storeu_ps(row + t, valid, e);
          sum = _mm512_add_ps(sum, e);
        }
        total[g] = _mm512_reduce_add_ps(sum);
        for (int64_t c = 0; c < chunks; ++c) o[g * chunks + c] = _mm512_setzero_ps();
      }
      for (int64_t t = 0; t < len; ++t) {
        const uint16_t* value = vp + b * vs0 + j * vs1 + t * vs2;
        __m512 vc[16];
        for (int64_t c = 0; c < chunks; ++c) vc[c] = load_bf16(value + c * 16);
        for (int64_t g = 0; g < group; ++g) {
          const __m512 p = _mm512_set1_ps(scores[g * len + t] / total[g]);
          for (int64_t c = 0; c < chunks; ++c) o[g * chunks + c] = _mm512_fmadd_ps(p, vc[c], o[g * chunks + c]);
        }
      }
      for (int64_t g = 0; g < group; ++g)
        for (int64_t c = 0; c < chunks; ++c) store_bf16(op + (b * heads + j * group + g) * dim + c * 16, o[g * chunks + c]);
    }
  });
  return out;
}
"""


_CPU_FLAGS = {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}  # what _CFLAGS let the compiler use


def _cpu_has_avx512_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and _CPU_FLAGS <= set(line.split()) for line in f)
    except OSError:
        return False


def _build_dir() -> str:
    from pettingllms.utils.models import cache_root

    key = hashlib.sha256((_SOURCE + " ".join(_CFLAGS + _FUNCTIONS) + torch.__version__ + platform.machine()).encode()).hexdigest()[:16]
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
        return load_inline("pettingllms_cpu_kernels", cpp_sources=_SOURCE, functions=_FUNCTIONS,
                           extra_cflags=_CFLAGS, extra_ldflags=["-fopenmp"], build_directory=_build_dir(),
                           verbose=False)
    except Exception as e:  # no compiler, no ninja, a toolchain without these intrinsics
        log.warning("CPU decode kernels could not be built (%s); oneDNN and the matmul attention are used",
                    str(e).splitlines()[0][:200])
        return None


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
