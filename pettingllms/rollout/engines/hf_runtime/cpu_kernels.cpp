// The HF engine's CPU decode kernels, for CPUs with AVX512-BF16. cpu_kernels.py compiles this file
// with torch.utils.cpp_extension.load_inline, which adds <torch/extension.h> and the Python
// bindings of the functions listed in cpu_kernels._FUNCTIONS; its docstring says what each kernel
// replaces and how its numbers compare.

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
