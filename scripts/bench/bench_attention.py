"""Attention on CPU, side by side: torch's SDPA kernel against the small-attention matmul path
(pettingllms/utils/attention.py), forward and forward + backward, at the shapes our workloads see.

    .venv/bin/python scripts/bench/bench_attention.py
    .venv/bin/python scripts/bench/bench_attention.py --threads 1 --repeats 20

SmolLM2-135M's heads (9 query heads sharing 3 K/V heads, head dim 64), bf16, a causal mask with
left padding (as batches of different lengths have). Each shape runs both paths through the same
`_gqa_attention` call (the matmul path switched off by setting its limits to 0); the best of
--repeats timings of --iters calls is kept. Prints one row per shape, the ratio kernel/matmul
(above 1: the matmul path is faster), whether the rule takes the matmul path there, and a JSON line.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import time
from unittest import mock

import torch

SHAPES = [  # batch, queries, keys: what the shape is
    (1, 1, 300, "decode, one sequence"),
    (32, 1, 150, "decode, 8 prompts x 4"),
    (8, 45, 95, "train: responses on their prompts' cache"),
    (8, 128, 128, "train / prefill, 128 tokens"),
    (4, 256, 256, "train / prefill, 256 tokens"),
    (2, 512, 512, "train / prefill, 512 tokens"),
]


def timed(fn, iters: int, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t) / iters)
    return best * 1e3


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from pettingllms.utils import attention as A

    module = torch.nn.Module()
    module.is_causal = True
    heads, kv_heads, dim = 9, 3, 64
    rows = []
    for batch, lq, lk, what in SHAPES:
        g = torch.Generator().manual_seed(0)
        q = torch.randn(batch, lq, heads, dim, generator=g).to(torch.bfloat16).transpose(1, 2).requires_grad_()
        k = torch.randn(batch, kv_heads, lk, dim, generator=g).to(torch.bfloat16).requires_grad_()
        v = torch.randn(batch, kv_heads, lk, dim, generator=g).to(torch.bfloat16).requires_grad_()
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq).expand(batch, 1, lq, lk).clone()
        mask[0, :, :, : lk // 4] = False  # one row left-padded
        grad = torch.randn(batch, lq, heads, dim, generator=g).to(torch.bfloat16)
        row = {"shape": [batch, lq, lk], "what": what}
        for path, limits in (("kernel", dict(SMALL_SCORES_GRAD=0, SMALL_SCORES_NO_GRAD=0)), ("matmul", {})):
            with mock.patch.multiple(A, **limits) if limits else contextlib.nullcontext():
                def forward():
                    with torch.no_grad():
                        A._gqa_attention(module, q, k, v, mask)

                def both():
                    A._gqa_attention(module, q, k, v, mask)[0].backward(grad)

                row[f"{path}_fwd_ms"] = round(timed(forward, args.iters, args.repeats), 3)
                row[f"{path}_fwd_bwd_ms"] = round(timed(both, args.iters, args.repeats), 3)
        with torch.no_grad():
            row["rule_no_grad"] = "matmul" if A._is_small(q, k, v) else "kernel"
        row["rule_grad"] = "matmul" if A._is_small(q, k, v) else "kernel"
        rows.append(row)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, bf16, best of {args.repeats} x {args.iters}")
    print(f"{'shape (B, Lq, Lk)':<20}{'forward ms kernel / matmul':>30}{'fwd+bwd ms kernel / matmul':>30}"
          f"{'rule (no grad, grad)':>24}  what")
    for r in rows:
        fwd = f"{r['kernel_fwd_ms']:.2f} / {r['matmul_fwd_ms']:.2f} ({r['kernel_fwd_ms'] / r['matmul_fwd_ms']:.2f}x)"
        both = (f"{r['kernel_fwd_bwd_ms']:.2f} / {r['matmul_fwd_bwd_ms']:.2f} "
                f"({r['kernel_fwd_bwd_ms'] / r['matmul_fwd_bwd_ms']:.2f}x)")
        print(f"{str(tuple(r['shape'])):<20}{fwd:>30}{both:>30}{r['rule_no_grad'] + ', ' + r['rule_grad']:>24}  {r['what']}")
    result = {"threads": torch.get_num_threads(), "torch": torch.__version__, "rows": rows}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
