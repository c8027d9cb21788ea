"""Weight streaming at decode-step shapes, side by side in one run: oneDNN's bf16 GEMM on packed
weights (what the HF engine's lean forward runs without our kernels), `F.linear` on plain bf16
weights, our bf16 GEMM kernel over its packed copy
(`pettingllms/rollout/engines/hf_runtime/cpu_kernels.py`), and a plain `torch.sum` over as many
bytes (what the memory system gives one pass of reads).

    .venv/bin/python scripts/bench/bench_gemv.py                     # 1 and 2 threads, 1-32 rows
    .venv/bin/python scripts/bench/bench_gemv.py --rows 1 2 3 4 --threads 2
    .venv/bin/python scripts/bench/bench_gemv.py --rows 64 256 512 --threads 2   # prefill sizes
    taskset -c 1 .venv/bin/python scripts/bench/bench_gemv.py --avx2 --rows 1 4 16 --threads 1

`--avx2`: the paths of a CPU without bf16 arithmetic instead, side by side: `F.linear` on fp32
weights (MKL), `F.linear` on bf16 weights, and our AVX2 GEMM (`hf_runtime/avx2_kernels.py`) over
its packed bf16 copy with bf16 inputs (a bf16 model) and with fp32 inputs (bf16 weights, fp32
compute); ratios to fp32 `F.linear`. It runs on any AVX2 + FMA CPU, AVX512-BF16 ones included.

The weights are random bf16 matrices of one decode step of a Llama-architecture model (default:
the embedded SmolLM2-135M's shapes: per layer q/k/v fused, o, gate/up fused, down; then the LM
head), 2-3x the box's last-level cache, so every pass reads them from memory. GB/s = weight bytes
/ best-of-`--repeats` wall time of one pass over all layers (at many rows the pass is compute-bound:
GFLOP/s = 2 x rows x weights / time is in the JSON). Prints a table with each path's ratio to
oneDNN's (`--avx2`: to fp32 `F.linear`'s) and one JSON line; GB/s counts every path's weights
as bf16 bytes, so it is a speed (fp32 `F.linear` reads twice as many).
"""
from __future__ import annotations

import argparse
import json
import time


def shapes(model: str) -> list[tuple[int, int]]:
    from transformers import AutoConfig

    from pettingllms.utils.models import resolve_model_path

    c = AutoConfig.from_pretrained(resolve_model_path(model))
    d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    h, kv = c.num_attention_heads * d, c.num_key_value_heads * d
    layer = [(h + 2 * kv, c.hidden_size), (c.hidden_size, h), (2 * c.intermediate_size, c.hidden_size),
             (c.hidden_size, c.intermediate_size)]
    return layer * c.num_hidden_layers + [(c.vocab_size, c.hidden_size)]


def best_pass(fn, weights, inputs, repeats: int, clock=time.perf_counter) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        for w, x in zip(weights, inputs):
            fn(x, w)
        best = min(best, clock() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct", help="whose layer shapes to use")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--avx2", action="store_true", help="fp32 F.linear vs bf16 F.linear vs our AVX2 GEMM")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: the process's CPU time instead of wall time (on a shared box, with one thread, "
                         "what the pass costs without the time other processes held the core)")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from pettingllms.rollout.engines.hf_runtime import avx2_kernels, cpu_kernels
    from pettingllms.rollout.engines.hf_runtime.linear import mkldnn_bf16, pack_weight, packed_linear

    bf16, fp32 = torch.bfloat16, torch.float32
    dims = shapes(args.model)
    gen = torch.Generator().manual_seed(0)
    plain = [torch.randn(n, k, generator=gen).to(bf16) for n, k in dims]
    nbytes = sum(w.numel() * 2 for w in plain)
    flat = torch.randn(nbytes // 2, generator=gen).to(bf16)
    paths = {}  # name -> (fn(x, w), weights, input dtype); the first is the ratios' baseline
    if args.avx2:
        kernel = avx2_kernels.load()
        paths["F.linear fp32"] = (lambda x, w: F.linear(x, w), [w.float() for w in plain], fp32)
        paths["F.linear bf16"] = (lambda x, w: F.linear(x, w), plain, bf16)
        if kernel is not None:
            pairs = [(avx2_kernels.pack(kernel, [w]), w.shape[0]) for w in plain]
            run = lambda x, w: avx2_kernels.gemm(kernel, x, w[0], w[1], None)  # noqa: E731
            paths["AVX2 GEMM bf16 x"] = (run, pairs, bf16)
            paths["AVX2 GEMM fp32 x"] = (run, pairs, fp32)
    else:
        kernel = cpu_kernels.load()
        if mkldnn_bf16():
            paths["oneDNN packed"] = (lambda x, w: packed_linear(x, w, None), [pack_weight(w) for w in plain], bf16)
        paths["F.linear"] = (lambda x, w: F.linear(x, w), plain, bf16)
        if kernel is not None:
            pairs = [(cpu_kernels.pack(kernel, [w]), w.shape[0]) for w in plain]
            paths["bf16 GEMM kernel"] = (lambda x, w: cpu_kernels.gemm(kernel, x, w[0], w[1], None), pairs, bf16)
    print(f"{len(dims)} weights, {nbytes / 1e6:.0f} MB per pass (bf16); kernel: "
          f"{'yes' if kernel else 'not available here'}")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        sum_s = best_pass(lambda x, w: x.sum(), [None], [flat], args.repeats, clock)
        for rows in args.rows:
            inputs = [torch.randn(rows, k, generator=gen) for _, k in dims]
            row = {"threads": threads, "rows": rows, "sum_gb_s": nbytes / sum_s / 1e9, "gflop_s": {}}
            for name, (fn, weights, dtype) in paths.items():
                typed = [x.to(dtype) for x in inputs]
                fn(typed[0], weights[0])  # warm-up
                seconds = best_pass(fn, weights, typed, args.repeats, clock)
                row[name] = nbytes / seconds / 1e9
                row["gflop_s"][name] = rows * nbytes / seconds / 1e9  # 2 FLOPs per weight per row, 2 bytes a weight
            results.append(row)
    names = list(paths)
    print("| threads | rows | " + " | ".join(f"{n} (GB/s)" for n in names) + " | torch.sum (GB/s) | "
          + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")
    print("|---" * (3 + 2 * len(names)) + "|")
    for r in results:
        cells = [f"{r[n]:.1f}" if n in r else "-" for n in names]
        ratios = [f"{r[n] / r[names[0]]:.2f}" if n in r else "-" for n in names[1:]]
        print(f"| {r['threads']} | {r['rows']} | " + " | ".join(cells) + f" | {r['sum_gb_s']:.1f} | "
              + " | ".join(ratios) + " |")
    print(json.dumps({"model": args.model, "clock": args.clock, "mb_per_pass": nbytes / 1e6, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
