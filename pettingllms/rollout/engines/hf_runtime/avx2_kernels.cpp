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

// MR rows of x (fp32) times NV blocks of eight packed columns. Two fp32 accumulators per row and
// block (one for each half of the pairs) so that 2 x MR x NV independent FMA chains hide the FMA
// latency even at one row; each weight block is read once per MR rows.
template <int MR, int NV>
static inline void gemm_tile(const float* x, int64_t k, const uint16_t* w, int64_t block_stride, const float* bias,
                             int64_t col0, int64_t n, void* out, bool bf16_out) {
  __m256 lo[MR][NV], hi[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) lo[m][v] = hi[m][v] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k / 2; ++p) {
    for (int v = 0; v < NV; ++v) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + v * block_stride + p * 16));
      const __m256 w0 = low_halves(raw), w1 = high_halves(raw);
      for (int m = 0; m < MR; ++m) {
        lo[m][v] = _mm256_fmadd_ps(w0, _mm256_broadcast_ss(x + m * k + 2 * p), lo[m][v]);
        hi[m][v] = _mm256_fmadd_ps(w1, _mm256_broadcast_ss(x + m * k + 2 * p + 1), hi[m][v]);
      }
    }
  }
  for (int v = 0; v < NV; ++v) {
    const int64_t c = col0 + v * 8;
    const int count = int(std::min<int64_t>(8, n - c));
    alignas(32) float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (bias) std::memcpy(b, bias + c, count * sizeof(float));
    for (int m = 0; m < MR; ++m) {  // bias added in fp32 before the one rounding, as oneDNN does
      const __m256 sum = _mm256_add_ps(_mm256_add_ps(lo[m][v], hi[m][v]), _mm256_load_ps(b));
      if (bf16_out) {
        uint16_t* dst = reinterpret_cast<uint16_t*>(out) + m * n + c;
        const __m128i r = to_bf16(sum);
        if (count == 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), r);
        else { alignas(16) uint16_t tmp[8]; _mm_store_si128(reinterpret_cast<__m128i*>(tmp), r); std::memcpy(dst, tmp, count * 2); }
      } else {
        float* dst = reinterpret_cast<float*>(out) + m * n + c;
        if (count == 8) _mm256_storeu_ps(dst, sum);
        else { alignas(32) float tmp[8]; _mm256_store_ps(tmp, sum); std::memcpy(dst, tmp, count * 4); }
      }
    }
  }
}

template <int MR>
static void gemm_blocks(int nv, const float* x, int64_t k, const uint16_t* w, int64_t bs, const float* bias,
                        int64_t col0, int64_t n, void* out, bool bf16_out) {
  switch (nv) {  // at one row four blocks (8 accumulators), at more rows two (MR x 4 accumulators)
    case 1: gemm_tile<MR, 1>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
    case 2: gemm_tile<MR, 2>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
    case 3: gemm_tile<MR, 3>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
    default: gemm_tile<MR, 4>(x, k, w, bs, bias, col0, n, out, bf16_out); break;
  }
}

// x [M, K] bf16 or fp32 (K even) times the n-column weight packed by pack_pairs, plus bias (fp32
// [n] or empty) -> [M, n] in x's dtype. Threads take 32 columns each; within them one row goes
// over four blocks at a time, more rows three at a time over two blocks (12 accumulators).
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
      for (int64_t m0 = 0; m0 < rows; m0 += 3) {
        const int mr = int(std::min<int64_t>(3, rows - m0));
        for (int64_t v0 = 0; v0 < nv; v0 += 2) {
          const int pair = int(std::min<int64_t>(2, nv - v0));
          const float* xm = xp + m0 * k;
          const uint16_t* wb = wp + (b + v0) * bs;
          void* om = op + m0 * n * esize;
          const int64_t col = (b + v0) * 8;
          switch (mr) {
            case 1: gemm_blocks<1>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            case 2: gemm_blocks<2>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
            default: gemm_blocks<3>(pair, xm, k, wb, bs, bp, col, n, om, bf16_out); break;
          }
        }
      }
    }
  });
  return out;
}
