// The HF engine's GEMM for x86-64 CPUs with AVX2 + FMA and no bf16 arithmetic. avx2_kernels.py
// compiles this file with torch.utils.cpp_extension.load_inline (it adds <torch/extension.h> and
// the bindings of avx2_kernels._FUNCTIONS); its docstring says what the kernel replaces and how
// its numbers compare. Only AVX2 and FMA instructions: it runs on any such CPU, AVX-512 ones too.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstring>
#include <algorithm>
#include <vector>

// Eight columns' consecutive bf16 pairs along K sit side by side in 32 bytes ([c0 k0, c0 k1, c1 k0,
// ...]): as eight 32-bit lanes, a pair's first value is the low half and its second the high half,
// so one shift and one mask widen a 32-byte load into the eight columns' weights at k0 and at k1
// (a bf16 is the top half of the fp32 of the same value), without a cross-lane conversion.
static inline __m256 low_halves(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
static inline __m256 high_halves(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
}

// fp32 -> bf16, round to nearest even (as at::BFloat16 and torch's .to() round; NaN stays NaN)
static inline __m128i to_bf16(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd)), 16);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  // the eight values fit 16 bits: a saturating pack of the two 128-bit halves keeps them in order
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// The weights (each [N_j, K] bf16, stacked on the output) as [ceil(N/8), K/2, 8, 2], zero-padded on N.
torch::Tensor pack_pairs(std::vector<torch::Tensor> weights) {
  const int64_t k = weights[0].size(1);
  std::vector<const uint16_t*> rows;
  for (auto& w : weights) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
    for (int64_t r = 0; r < w.size(0); ++r) rows.push_back(p + r * k);
  }
  const int64_t n = int64_t(rows.size()), blocks = (n + 7) / 8, pairs = k / 2;
  auto out = torch::zeros({blocks, pairs, 8, 2}, weights[0].options());
  uint16_t* dst = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t c = 0; c < 8 && b * 8 + c < n; ++c) {
        const uint32_t* row = reinterpret_cast<const uint32_t*>(rows[b * 8 + c]);
        uint32_t* d = reinterpret_cast<uint32_t*>(dst + b * pairs * 16) + c;
        for (int64_t p = 0; p < pairs; ++p) d[p * 8] = row[p];
      }
  });
  return out;
}

// Bias (fp32, or null), one rounding and the store of a finished tile: sums [mr][nv][8] fp32 ->
// out [M, n] from column col0 (bf16 or fp32). Kept out of the tile's template: with it inline, GCC
// stores every accumulator to the stack at every step of the hot loop.
__attribute__((noinline)) static void store_tile(const float* sums, int mr, int nv, const float* bias, int64_t col0,
                                                 int64_t n, void* out, bool bf16_out) {
  for (int v = 0; v < nv; ++v) {
    const int64_t c = col0 + v * 8;
    const int count = int(std::min<int64_t>(8, n - c));
    alignas(32) float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (bias) std::memcpy(b, bias + c, count * sizeof(float));
    for (int m = 0; m < mr; ++m) {  // bias added in fp32 before the one rounding, as oneDNN does
      const __m256 sum = _mm256_add_ps(_mm256_load_ps(sums + (m * nv + v) * 8), _mm256_load_ps(b));
      if (bf16_out) {
        uint16_t* dst = reinterpret_cast<uint16_t*>(out) + m * n + c;
        const __m128i r = to_bf16(sum);
        if (count == 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), r);
        else {
          alignas(16) uint16_t tmp[8];
          _mm_store_si128(reinterpret_cast<__m128i*>(tmp), r);
          std::memcpy(dst, tmp, count * 2);
        }
      } else {
        float* dst = reinterpret_cast<float*>(out) + m * n + c;
        if (count == 8) _mm256_storeu_ps(dst, sum);
        else { alignas(32) float tmp[8]; _mm256_store_ps(tmp, sum); std::memcpy(dst, tmp, count * 4); }
      }
    }
  }
}

// One row of x (fp32) times up to four blocks of eight packed columns, each weight block read once,
// with two accumulators a block (one per half of the pairs: 8 independent FMA chains hide the FMA
// latency); the accumulators, the widened weights and x leave no register spilled. The
// accumulators are named variables, not an array: GCC -O3 stores an array's every element to the
// stack at every step of the loop, which halves the FMA rate.
#define TILE_W(v)                                                                                          \
  const __m256i r##v = NV > v ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + v * block_stride + p * 16)) \
                              : _mm256_setzero_si256();                                                    \
  const __m256 w0##v = low_halves(r##v), w1##v = high_halves(r##v);
#define TILE_FMA(v)                                                                                        \
  if constexpr (NV > v) {                                                                                  \
    lo##v = _mm256_fmadd_ps(w0##v, x0, lo##v);                                                             \
    hi##v = _mm256_fmadd_ps(w1##v, x1, hi##v);                                                             \
  }
#define TILE_SUM(v) \
  if constexpr (NV > v) _mm256_store_ps(sums + v * 8, _mm256_add_ps(lo##v, hi##v));

template <int NV>
static inline void gemm_tile(const float* x, int64_t k, const uint16_t* w, int64_t block_stride, const float* bias,
                             int64_t col0, int64_t n, void* out, bool bf16_out) {
  static_assert(NV >= 1 && NV <= 4, "a tile of at most 8 accumulators");
  const __m256 z = _mm256_setzero_ps();
  __m256 lo0 = z, hi0 = z, lo1 = z, hi1 = z, lo2 = z, hi2 = z, lo3 = z, hi3 = z;
  for (int64_t p = 0; p < k / 2; ++p) {
    TILE_W(0) TILE_W(1) TILE_W(2) TILE_W(3)
    const __m256 x0 = _mm256_broadcast_ss(x + 2 * p), x1 = _mm256_broadcast_ss(x + 2 * p + 1);
    TILE_FMA(0) TILE_FMA(1) TILE_FMA(2) TILE_FMA(3)
  }
  alignas(32) float sums[NV * 8];
  TILE_SUM(0) TILE_SUM(1) TILE_SUM(2) TILE_SUM(3)
  store_tile(sums, 1, NV, bias, col0, n, out, bf16_out);
}

// Up to six rows times up to two blocks of eight packed columns (12 accumulators, one per row and
// block, each summing k0's product then k1's as the one-row tile's two chains would in one): each
// 32-byte weight load is widened half by half (k0's values, then k1's, reloaded from L1) so that
// the two widened blocks, one broadcast x and the 12 accumulators fit the 16 registers. 24 FMAs a
// pair of k's against a dependency chain of two: the FMA units, not their latency, bound it.
#define ROWS_FMA(m, u0, u1, half)                                                                          \
  if constexpr (MR > m) {                                                                                  \
    const __m256 xv = _mm256_broadcast_ss(x + m * k + 2 * p + half);                                       \
    a##m##0 = _mm256_fmadd_ps(u0, xv, a##m##0);                                                            \
    if constexpr (NV > 1) a##m##1 = _mm256_fmadd_ps(u1, xv, a##m##1);                                      \
  }
#define ROWS_SUM(m)                                                                                        \
  if constexpr (MR > m) {                                                                                  \
    _mm256_store_ps(sums + (m * NV) * 8, a##m##0);                                                         \
    if constexpr (NV > 1) _mm256_store_ps(sums + (m * NV + 1) * 8, a##m##1);                               \
  }

template <int MR, int NV>
static inline void gemm_rows_tile(const float* x, int64_t k, const uint16_t* w, int64_t block_stride,
                                  const float* bias, int64_t col0, int64_t n, void* out, bool bf16_out) {
  static_assert(MR >= 1 && MR <= 6 && NV >= 1 && NV <= 2, "a tile of at most 12 accumulators");
  const __m256 z = _mm256_setzero_ps();
  __m256 a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z, a40 = z, a41 = z, a50 = z, a51 = z;
  const __m256i* w0 = reinterpret_cast<const __m256i*>(w);
  const __m256i* w1 = reinterpret_cast<const __m256i*>(w + (NV > 1 ? block_stride : 0));
  for (int64_t p = 0; p < k / 2; ++p) {
    {
      const __m256 u0 = low_halves(_mm256_loadu_si256(w0 + p));
      const __m256 u1 = NV > 1 ? low_halves(_mm256_loadu_si256(w1 + p)) : z;
      ROWS_FMA(0, u0, u1, 0) ROWS_FMA(1, u0, u1, 0) ROWS_FMA(2, u0, u1, 0)
      ROWS_FMA(3, u0, u1, 0) ROWS_FMA(4, u0, u1, 0) ROWS_FMA(5, u0, u1, 0)
    }
    {
      const __m256 u0 = high_halves(_mm256_loadu_si256(w0 + p));
      const __m256 u1 = NV > 1 ? high_halves(_mm256_loadu_si256(w1 + p)) : z;
      ROWS_FMA(0, u0, u1, 1) ROWS_FMA(1, u0, u1, 1) ROWS_FMA(2, u0, u1, 1)
      ROWS_FMA(3, u0, u1, 1) ROWS_FMA(4, u0, u1, 1) ROWS_FMA(5, u0, u1, 1)
    }
  }
  alignas(32) float sums[MR * NV * 8];
  ROWS_SUM(0) ROWS_SUM(1) ROWS_SUM(2) ROWS_SUM(3) ROWS_SUM(4) ROWS_SUM(5)
  store_tile(sums, MR, NV, bias, col0, n, out, bf16_out);
}

template <int MR>
static void gemm_rows(int nv, const float* x, int64_t k, const uint16_t* w, int64_t bs, const float* bias,
                      int64_t col0, int64_t n, void* out, bool bf16_out) {
  if (nv == 1) gemm_rows_tile<MR, 1>(x, k, w, bs, bias, col0, n, out, bf16_out);
  else gemm_rows_tile<MR, 2>(x, k, w, bs, bias, col0, n, out, bf16_out);
}

static void gemm_one_row(int nv, const float* x, int64_t k, const uint16_t* w, int64_t bs, const float* bias,
                         int64_t col0, int64_t n, void* out, bool bf16_out) {
  switch (nv) {  // one row: up to four blocks (8 accumulators)
    case 1: gemm_tile<1>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
    case 2: gemm_tile<2>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
    case 3: gemm_tile<3>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
    default: gemm_tile<4>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
  }
}

// x [M, K] bf16 or fp32 (K even) times the n-column weight packed by pack_pairs, plus bias (fp32
// [n] or empty) -> [M, n] in x's dtype. Threads take 32 columns each; within them one row goes
// over four blocks at a time, more rows up to six at a time over two blocks.
torch::Tensor gemm_packed(torch::Tensor x, torch::Tensor packed, int64_t n, torch::Tensor bias) {
  const int64_t rows = x.size(0), k = x.size(1), blocks = packed.size(0), bs = (k / 2) * 16;
  const bool bf16_out = x.scalar_type() == at::kBFloat16;
  const torch::Tensor xf = x.to(at::kFloat).contiguous();  // widened once: every block reads it
  auto out = torch::empty({rows, n}, x.options());
  const float* xp = xf.data_ptr<float>();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
  const float* bp = bias.numel() ? bias.data_ptr<float>() : nullptr;
  char* op = reinterpret_cast<char*>(out.data_ptr());
  const int64_t esize = bf16_out ? 2 : 4;
  at::parallel_for(0, (blocks + 3) / 4, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t b = g * 4, nv = std::min<int64_t>(4, blocks - b);
      if (rows == 1) {
        gemm_one_row(int(nv), xp, k, wp + b * bs, bs, bp, b * 8, n, op, bf16_out);
        continue;
      }
      // rows in tiles of at most six, as even as they come (13 rows: 5 + 4 + 4, not 6 + 6 + 1): a tile
      // of under four rows waits on its FMA chains rather than on the FMA units
      const int64_t tiles = (rows + 5) / 6;
      for (int64_t t = 0, m0 = 0, mr = 0; t < tiles; ++t, m0 += mr) {
        mr = rows / tiles + (t < rows % tiles ? 1 : 0);
        for (int64_t v0 = 0; v0 < nv; v0 += 2) {
          const int pair = int(std::min<int64_t>(2, nv - v0));
          const float* xm = xp + m0 * k;
          const uint16_t* wb = wp + (b + v0) * bs;
          void* om = op + m0 * n * esize;
          const int64_t col = (b + v0) * 8;
          switch (int(mr)) {
            case 1: gemm_rows<1>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            case 2: gemm_rows<2>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            case 3: gemm_rows<3>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            case 4: gemm_rows<4>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            case 5: gemm_rows<5>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            default: gemm_rows<6>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
          }
        }
      }
    }
  });
  return out;
}

// ---- fp32 decode-step ops: a float32 model whose GEMM weights are held in bf16 (avx2_kernels.py) ----
// Each computes what the lean forward's torch ops compute in fp32, in one call instead of a few
// dozen small ones (at one row a decode step is mostly per-op overhead once the GEMM streams bf16
// weights). Sums may run in another order than torch's; everything else rounds as torch does
// (this file is built with -ffp-contract=off, so a product and a sum written apart stay apart).

static inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// e^x in fp32 to about 2 ulp (x = n ln2 + r, ln2 in two parts, Cephes' polynomial for e^r, times
// 2^n built in the exponent bits); exactly 0 below -87.3 (where e^x leaves fp32's normal range),
// x clamped at 88.3 above.
static inline __m256 exp8(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// RMSNorm of rows x [M, H] fp32 with weight [H] fp32, as the Llama norm computes it in fp32:
// weight * (x * rsqrt(mean(x^2) + eps)).
torch::Tensor rms_norm_f32(torch::Tensor x, torch::Tensor weight, double eps) {
  const int64_t rows = x.size(0), h = x.size(1);
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * h;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= h; i += 8) { const __m256 v = _mm256_loadu_ps(row + i); acc = _mm256_fmadd_ps(v, v, acc); }
    float squares = hsum8(acc);
    for (; i < h; ++i) squares += row[i] * row[i];
    const float scale = 1.f / std::sqrt(squares / float(h) + float(eps));
    for (i = 0; i < h; ++i) op[r * h + i] = wp[i] * (row[i] * scale);
  }
  return out;
}

// SwiGLU of rows y [M, 2I] fp32 (gate | up): silu(gate) * up, silu(g) = g / (1 + e^-g) -> [M, I].
torch::Tensor silu_mul_f32(torch::Tensor y) {
  const int64_t rows = y.size(0), inter = y.size(1) / 2;
  auto out = torch::empty({rows, inter}, y.options());
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const __m256 one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
  at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = yp + r * 2 * inter;
      const float* u = g + inter;
      int64_t i = 0;
      for (; i + 8 <= inter; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, gv))));
        _mm256_storeu_ps(op + r * inter + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
      }
      for (; i < inter; ++i) op[r * inter + i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
    }
  });
  return out;
}

// One decode step's rotary embedding and KV-cache write, fp32: y [B, (H + 2 KVH) D] is the fused
// q/k/v output, cos and sin [B, D] the rows' tables. q and k become x cos + rotate_half(x) sin (two
// products, then their sum, as the torch forward rounds them); k and v go to column `col` of the
// cache buffers kbuf, vbuf [B, KVH, C, D] (any strides, unit stride on D). Returns q [B, H, D].
torch::Tensor rope_decode_f32(torch::Tensor y, torch::Tensor cos, torch::Tensor sin, int64_t heads, int64_t kv_heads,
                              torch::Tensor kbuf, torch::Tensor vbuf, int64_t col) {
  const int64_t batch = y.size(0), dim = cos.size(1), half = dim / 2, width = y.size(1);
  auto q = torch::empty({batch, heads, dim}, y.options());
  const float* yp = y.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* qp = q.data_ptr<float>();
  float* kp = kbuf.data_ptr<float>();
  float* vp = vbuf.data_ptr<float>();
  const int64_t ks0 = kbuf.stride(0), ks1 = kbuf.stride(1), ks2 = kbuf.stride(2);
  const int64_t vs0 = vbuf.stride(0), vs1 = vbuf.stride(1), vs2 = vbuf.stride(2);
  for (int64_t b = 0; b < batch; ++b) {
    const float* row = yp + b * width;
    const float* c = cp + b * dim;
    const float* s = sp + b * dim;
    for (int64_t h = 0; h < heads + kv_heads; ++h) {
      const float* x = row + h * dim;
      float* dst = h < heads ? qp + (b * heads + h) * dim : kp + b * ks0 + (h - heads) * ks1 + col * ks2;
      for (int64_t i = 0; i < dim; ++i) {
        const float rotated = i < half ? -x[i + half] : x[i - half];
        const float a = x[i] * c[i], r = rotated * s[i];
        dst[i] = a + r;
      }
    }
    for (int64_t j = 0; j < kv_heads; ++j)
      std::memcpy(vp + b * vs0 + j * vs1 + col * vs2, row + (heads + kv_heads + j) * dim, 4 * dim);
  }
  return q;
}

// One decode step's attention, fp32: q [B, H, D] (one query per row; any strides, unit stride on
// D), k and v [B, KVH, L, D] (the cache's views, likewise), key_mask [B, L] bool (true: attend) or
// empty. Scores, softmax and the weighted sum in fp32, as the engine's matmul attention computes
// them -> [B, H, D]. One (row, K/V head) at a time with the query heads that share it, so each
// key and value row is read once for all of them; eight lanes along D (D a multiple of 8, <= 256).
torch::Tensor decode_attention_f32(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor key_mask,
                                   double scale) {
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k.size(1), len = k.size(2), group = heads / kv_heads, chunks = dim / 8;
  TORCH_CHECK(dim % 8 == 0 && chunks <= 32, "decode_attention_f32: head dim must be a multiple of 8, at most 256");
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const bool* mp = key_mask.numel() ? key_mask.data_ptr<bool>() : nullptr;
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1);
  const int64_t ks0 = k.stride(0), ks1 = k.stride(1), ks2 = k.stride(2);
  const int64_t vs0 = v.stride(0), vs1 = v.stride(1), vs2 = v.stride(2);
  const int64_t ms0 = mp ? key_mask.stride(0) : 0;
  auto out = torch::empty({batch, heads, dim}, q.options());
  float* op = out.data_ptr<float>();
  const float lowest = std::numeric_limits<float>::lowest();
  const int64_t padded = (len + 7) / 8 * 8;
  at::parallel_for(0, batch * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(group * padded), top(group), total(group);
    std::vector<__m256> query(group * chunks), o(group * chunks);
    for (int64_t bj = begin; bj < end; ++bj) {
      const int64_t b = bj / kv_heads, j = bj % kv_heads;
      for (int64_t g = 0; g < group; ++g) {
        for (int64_t c = 0; c < chunks; ++c) query[g * chunks + c] = _mm256_loadu_ps(qp + b * qs0 + (j * group + g) * qs1 + c * 8);
        top[g] = lowest;
        for (int64_t t = len; t < padded; ++t) scores[g * padded + t] = lowest;
      }
      for (int64_t t = 0; t < len; ++t) {
        const float* key = kp + b * ks0 + j * ks1 + t * ks2;
        const bool masked = mp && !mp[b * ms0 + t];
        for (int64_t g = 0; g < group; ++g) {
          __m256 acc = _mm256_mul_ps(query[g * chunks], _mm256_loadu_ps(key));
          for (int64_t c = 1; c < chunks; ++c) acc = _mm256_fmadd_ps(query[g * chunks + c], _mm256_loadu_ps(key + c * 8), acc);
          const float s = masked ? lowest : hsum8(acc) * float(scale);  // as masked_fill
          scores[g * padded + t] = s;
          top[g] = std::max(top[g], s);
        }
      }
      for (int64_t g = 0; g < group; ++g) {  // exp(s - max), masked keys exactly 0, and their sum
        float* row = scores.data() + g * padded;
        __m256 sum = _mm256_setzero_ps();
        for (int64_t t = 0; t < padded; t += 8) {
          const __m256 s = _mm256_loadu_ps(row + t);
          const __m256 keep = _mm256_cmp_ps(s, _mm256_set1_ps(lowest), _CMP_NEQ_OQ);
          const __m256 e = _mm256_and_ps(keep, exp8(_mm256_sub_ps(s, _mm256_set1_ps(top[g]))));
          _mm256_storeu_ps(row + t, e);
          sum = _mm256_add_ps(sum, e);
        }
        total[g] = hsum8(sum);
        for (int64_t c = 0; c < chunks; ++c) o[g * chunks + c] = _mm256_setzero_ps();
      }
      for (int64_t t = 0; t < len; ++t) {
        const float* value = vp + b * vs0 + j * vs1 + t * vs2;
        for (int64_t g = 0; g < group; ++g) {
          const __m256 p = _mm256_set1_ps(scores[g * padded + t] / total[g]);
          for (int64_t c = 0; c < chunks; ++c) o[g * chunks + c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(value + c * 8), o[g * chunks + c]);
        }
      }
      for (int64_t g = 0; g < group; ++g)
        for (int64_t c = 0; c < chunks; ++c) _mm256_storeu_ps(op + (b * heads + j * group + g) * dim + c * 8, o[g * chunks + c]);
    }
  });
  return out;
}

// One decode step through every layer, fp32 with bf16-held GEMM weights: what the lean forward's
// per-layer loop computes with the five ops above, in one call instead of a dozen a layer (at one
// row the calls' own cost was a tenth of the step). x [B, H] is the step's embedded rows (not
// changed); `layers` holds ten tensors a layer (norm1, qkv, qkv bias, o, o bias, norm2, gate/up,
// gate/up bias, down, down bias: packed weights as pack_pairs makes them, biases fp32 or empty),
// `columns` four a layer (the products' widths), `scales` one (the attention scale). kbufs, vbufs:
// each layer's cache buffers [B, KVH, C, D]; this step's keys and values go to column `col`, and
// the attention reads columns 0..col. cos, sin [B, D]; key_mask as decode_attention_f32's.
// Returns the rows after the last layer [B, H] (before the final norm).
torch::Tensor decode_layers_f32(torch::Tensor x, std::vector<torch::Tensor> layers, std::vector<int64_t> columns,
                                std::vector<double> scales, std::vector<torch::Tensor> kbufs,
                                std::vector<torch::Tensor> vbufs, int64_t col, torch::Tensor cos, torch::Tensor sin,
                                torch::Tensor key_mask, int64_t heads, int64_t kv_heads, double eps) {
  const int64_t n = int64_t(scales.size()), batch = x.size(0);
  TORCH_CHECK(int64_t(layers.size()) == 10 * n && int64_t(columns.size()) == 4 * n && int64_t(kbufs.size()) == n &&
                  int64_t(vbufs.size()) == n, "decode_layers_f32: ten tensors, four widths and one cache a layer");
  torch::Tensor h = x.clone();
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor* t = layers.data() + 10 * i;
    const int64_t* width = columns.data() + 4 * i;
    const torch::Tensor qkv = gemm_packed(rms_norm_f32(h, t[0], eps), t[1], width[0], t[2]);
    const torch::Tensor q = rope_decode_f32(qkv, cos, sin, heads, kv_heads, kbufs[i], vbufs[i], col);
    const torch::Tensor a = decode_attention_f32(q, kbufs[i].narrow(2, 0, col + 1), vbufs[i].narrow(2, 0, col + 1),
                                                 key_mask, scales[i]);
    h.add_(gemm_packed(a.view({batch, -1}), t[3], width[1], t[4]));
    h.add_(gemm_packed(silu_mul_f32(gemm_packed(rms_norm_f32(h, t[5], eps), t[6], width[2], t[7])), t[8], width[3], t[9]));
  }
  return h;
}
