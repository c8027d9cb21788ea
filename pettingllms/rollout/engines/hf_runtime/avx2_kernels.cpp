// The HF engine's GEMM for x86-64 CPUs with AVX2 + FMA and no bf16 arithmetic. avx2_kernels.py
// compiles this file with torch.utils.cpp_extension.load_inline (it adds <torch/extension.h> and
// the bindings of avx2_kernels._FUNCTIONS); its docstring says what the kernel replaces and how
// its numbers compare. Only AVX2 and FMA instructions: it runs on any such CPU, AVX-512 ones too.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cstdint>
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

// MR rows of x (fp32) times NV blocks of eight packed columns, each weight block read once per MR
// rows: one row over up to four blocks with two accumulators each (one per half of the pairs: 8
// independent FMA chains hide the FMA latency), or up to four rows over up to two blocks with one
// each (8 chains again); 8 accumulators, the widened weights and x leave no register spilled. The
// accumulators are named variables, not an array: GCC -O3 stores an array's every element to the
// stack at every step of the loop, which halves the FMA rate.
#define TILE_W(v)                                                                                          \
  const __m256i r##v = NV > v ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + v * block_stride + p * 16)) \
                              : _mm256_setzero_si256();                                                    \
  const __m256 w0##v = low_halves(r##v), w1##v = high_halves(r##v);
#define TILE_X(m)                                                                                          \
  const __m256 x0##m = _mm256_broadcast_ss(x + (MR > m ? m : 0) * k + 2 * p);                              \
  const __m256 x1##m = _mm256_broadcast_ss(x + (MR > m ? m : 0) * k + 2 * p + 1);
#define TILE_FMA(m, v)                                                                                     \
  if constexpr (MR > m && NV > v) {                                                                                \
    if constexpr (MR == 1) {                                                                                       \
      lo##m##v = _mm256_fmadd_ps(w0##v, x0##m, lo##m##v);                                                  \
      hi##m##v = _mm256_fmadd_ps(w1##v, x1##m, hi##m##v);                                                  \
    } else {                                                                                               \
      lo##m##v = _mm256_fmadd_ps(w1##v, x1##m, _mm256_fmadd_ps(w0##v, x0##m, lo##m##v));                   \
    }                                                                                                      \
  }
#define TILE_SUM(m, v) \
  if constexpr (MR > m && NV > v) _mm256_store_ps(sums + (m * NV + v) * 8, _mm256_add_ps(lo##m##v, hi##m##v));

template <int MR, int NV>
static inline void gemm_tile(const float* x, int64_t k, const uint16_t* w, int64_t block_stride, const float* bias,
                             int64_t col0, int64_t n, void* out, bool bf16_out) {
  static_assert((MR == 1 && NV <= 4) || (MR <= 4 && NV <= 2), "a tile of at most 8 accumulators");
  const __m256 z = _mm256_setzero_ps();
  __m256 lo00 = z, hi00 = z, lo01 = z, hi01 = z, lo02 = z, hi02 = z, lo03 = z, hi03 = z;
  __m256 lo10 = z, lo11 = z, lo20 = z, lo21 = z, lo30 = z, lo31 = z;
  __m256 hi10 = z, hi11 = z, hi20 = z, hi21 = z, hi30 = z, hi31 = z;  // one accumulator at MR > 1
  for (int64_t p = 0; p < k / 2; ++p) {
    TILE_W(0) TILE_W(1) TILE_W(2) TILE_W(3)
    TILE_X(0) TILE_X(1) TILE_X(2) TILE_X(3)
    TILE_FMA(0, 0) TILE_FMA(0, 1) TILE_FMA(0, 2) TILE_FMA(0, 3)
    TILE_FMA(1, 0) TILE_FMA(1, 1) TILE_FMA(2, 0) TILE_FMA(2, 1) TILE_FMA(3, 0) TILE_FMA(3, 1)
  }
  alignas(32) float sums[MR * NV * 8];
  TILE_SUM(0, 0) TILE_SUM(0, 1) TILE_SUM(0, 2) TILE_SUM(0, 3)
  TILE_SUM(1, 0) TILE_SUM(1, 1) TILE_SUM(2, 0) TILE_SUM(2, 1) TILE_SUM(3, 0) TILE_SUM(3, 1)
  store_tile(sums, MR, NV, bias, col0, n, out, bf16_out);
}

template <int MR>
static void gemm_blocks(int nv, const float* x, int64_t k, const uint16_t* w, int64_t bs, const float* bias,
                        int64_t col0, int64_t n, void* out, bool bf16_out) {
  // at one row up to four blocks (8 accumulators), at more rows up to two (MR x 4 accumulators)
  if constexpr (MR == 1) {
    switch (nv) {
      case 1: gemm_tile<1, 1>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
      case 2: gemm_tile<1, 2>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
      case 3: gemm_tile<1, 3>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
      default: gemm_tile<1, 4>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
    }
  } else if (nv == 1) {
    gemm_tile<MR, 1>(x, k, w, bs, bias, col0, n, out, bf16_out);
  } else {
    gemm_tile<MR, 2>(x, k, w, bs, bias, col0, n, out, bf16_out);
  }
}

// x [M, K] bf16 or fp32 (K even) times the n-column weight packed by pack_pairs, plus bias (fp32
// [n] or empty) -> [M, n] in x's dtype. Threads take 32 columns each; within them one row goes
// over four blocks at a time, more rows four at a time over two blocks.
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
        gemm_blocks<1>(int(nv), xp, k, wp + b * bs, bs, bp, b * 8, n, op, bf16_out);
        continue;
      }
      for (int64_t m0 = 0; m0 < rows; m0 += 4) {
        const int mr = int(std::min<int64_t>(4, rows - m0));
        for (int64_t v0 = 0; v0 < nv; v0 += 2) {
          const int pair = int(std::min<int64_t>(2, nv - v0));
          const float* xm = xp + m0 * k;
          const uint16_t* wb = wp + (b + v0) * bs;
          void* om = op + m0 * n * esize;
          const int64_t col = (b + v0) * 8;
          switch (mr) {
            case 1: gemm_blocks<1>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            case 2: gemm_blocks<2>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            case 3: gemm_blocks<3>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            default: gemm_blocks<4>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
          }
        }
      }
    }
  });
  return out;
}
