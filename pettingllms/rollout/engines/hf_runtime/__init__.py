"""What the HF engine (`rollout/engines/hf.py`) runs on: an in-process inference runtime for
transformers models, kept apart from the engine seam. Every piece computes the numbers the plain
transformers path computes (the C++ kernels up to the last bf16 bit) and only skips work.

* `kv_cache.py`: a KV cache that grows in place instead of copying itself every step.
* `linear.py`: oneDNN's pre-packed bf16 products, and the prefill's LM head as one GEMM.
* `lean_llama.py`: a lean forward for Llama-architecture models (fused GEMMs, no per-step plumbing).
* `sampling.py`: the per-row seeded sampler whose logprobs are those of the distribution sampled from.
* `cpu_kernels.py` + `cpu_kernels.cpp`: C++ decode kernels for CPUs with AVX512-BF16, built on
  first use and cached.
* `avx2_kernels.py` + `avx2_kernels.cpp`: the GEMM alone for CPUs with AVX2 + FMA (bf16 weights
  widened in registers, fp32 sums), where the AVX512-BF16 kernels do not run.
"""
