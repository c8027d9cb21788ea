"""The HF engine's LoRA weight sync, side by side in one run: `HFEngine.update_weights` merging a
rank-r adapter on every projection of the model with our merge kernel (`cpu_kernels.lora_merge`,
one pass per weight) and with torch's fp32 delta (`rollout.engine_options.cpu_kernels=false`).

    .venv/bin/python scripts/bench/bench_merge.py                  # SmolLM2-135M, rank 16
    .venv/bin/python scripts/bench/bench_merge.py --rank 64 --repeats 9

This merge is most of a LoRA step's "other" time (step - generate - update) in
`scripts/bench/vs_trl.py`. Both engines merge the same update, alternating, best of `--repeats`
after one warm-up each (the first call also snapshots the base weights). Prints seconds per
sync, the ratio, and how far the two merged models are apart (in bf16 steps: the kernel sums the
rank's products in another order), then one JSON line.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time


def adapter_update(model: str, rank: int, seed: int):
    """A seeded random adapter (B non-zero, unlike peft's init) as the trainer sends it."""
    import torch

    from pettingllms.config import LoraConfig
    from pettingllms.policies.lora import SharedLoraBase
    from pettingllms.policies.worker import load_model
    from pettingllms.rollout.engines.weights import WeightUpdate

    base = load_model(model, torch.bfloat16, torch.device("cpu"))
    lora = SharedLoraBase(base, model, torch.float32)
    lora.add_adapter("p", LoraConfig(rank=rank, alpha=2 * rank), seed)
    gen = torch.Generator().manual_seed(seed)
    for name, p in lora.adapter_params("p"):
        if ".lora_B." in name:
            p.data.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    tensors, config = lora.adapter_state("p")
    return WeightUpdate("p", "lora", tensors, config, version=1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded:smollm2-135m-instruct")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import torch

    from pettingllms.rollout.engines.hf import HFEngine

    update = adapter_update(args.model, args.rank, args.seed)
    engines = {"kernel": HFEngine({"p": args.model}, dtype="bfloat16", cpu_kernels=True),
               "torch": HFEngine({"p": args.model}, dtype="bfloat16", cpu_kernels=False)}
    if engines["kernel"]._slot("p").lean is None or engines["kernel"]._slot("p").lean.kernel is None:
        print("no merge kernel here (needs AVX512-BF16, a C++ compiler and a Llama-architecture model)")
        return 1
    times: dict[str, list[float]] = {name: [] for name in engines}
    for name, engine in engines.items():
        engine.update_weights(update)  # warm-up: snapshots the base
    for _ in range(args.repeats):
        for name, engine in engines.items():
            start = time.perf_counter()
            engine.update_weights(update)
            times[name].append(time.perf_counter() - start)
    merged = {name: {k: v for k, v in e._slot("p").params.items() if k in e._slot("p").base}
              for name, e in engines.items()}
    steps = 0
    for k, a in merged["kernel"].items():  # distance in bf16 steps (ulps) of the larger value
        b = merged["torch"][k]
        ulp = torch.maximum(a.float().abs(), b.float().abs()).clamp_min(2 ** -126).log2().floor().exp2() * 2 ** -7
        steps = max(steps, int(((a.float() - b.float()).abs() / ulp).max()))
    best = {name: min(t) for name, t in times.items()}
    print(f"{len(merged['kernel'])} weights, rank {args.rank}, {torch.get_num_threads()} threads")
    for name in engines:
        print(f"{name:>7}: best {best[name]:.4f} s, median {statistics.median(times[name]):.4f} s")
    print(f"kernel / torch (best): {best['kernel'] / best['torch']:.2f}; merged weights differ by at most "
          f"{steps} bf16 step(s)")
    print(json.dumps({"model": args.model, "rank": args.rank, "threads": torch.get_num_threads(),
                      "weights": len(merged["kernel"]), "seconds": times, "best": best,
                      "ratio": best["kernel"] / best["torch"], "max_bf16_steps": steps}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
