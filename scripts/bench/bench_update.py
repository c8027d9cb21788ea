"""Time and memory of one PolicyWorker.update on random token sequences.

    .venv/bin/python scripts/bench/bench_update.py                 # embedded model, LoRA r16, bf16
    .venv/bin/python scripts/bench/bench_update.py --full          # full fine-tuning (fp32 master)
    .venv/bin/python scripts/bench/bench_update.py --chunk 100000  # one chunk: all response logits at once
    .venv/bin/python scripts/bench/bench_update.py --head-module   # the LM head as a module, then the log-prob

Prints one JSON line: model load time, per-step update time (the first step separately, as it
warms up), old-logprob recompute time, peak RSS after loading and after the updates.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import torch
from omegaconf import OmegaConf


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--dtype", default="bfloat16", help="model.dtype (base / compute)")
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--k", type=int, default=1, help="sequences per prompt (GRPO's K candidates share a prompt)")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--response-len", type=int, default=192)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=1024, help="trainer.logprob_chunk")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--head-module", action="store_true",
                    help="run the LM head as its module, then the target log-prob (the path a hook on the head "
                         "takes), instead of inside one function (linear_target_logprobs): an A/B of the two")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from pettingllms.config.validate import validate
    from pettingllms.trainer.assemble import build_policy_set
    from pettingllms.records import Sample

    cfg = validate(OmegaConf.create({
        "model": {"path": args.model, "dtype": args.dtype, "gradient_checkpointing": args.gradient_checkpointing,
                  "lora": {"enabled": not args.full, "rank": args.rank, "alpha": 2 * args.rank}},
        "trainer": {"optim": {"lr": 1e-5}, "micro_batch_size": args.micro_batch, "logprob_chunk": args.chunk},
        "algorithm": {"old_logprobs": "recompute"},
    }))
    t0 = time.perf_counter()
    worker = build_policy_set(cfg, ["agent"]).workers["shared"]
    load_s = time.perf_counter() - t0
    rss_loaded = peak_rss_mb()
    if args.head_module:  # an observed head is called as a module (logprobs._plain_linear)
        worker.model.get_output_embeddings().register_forward_hook(lambda module, inputs, output: None)
    vocab = worker.model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (args.prompt_len,), generator=g).tolist()
               for _ in range(-(-args.sequences // max(1, args.k)))]
    samples = [Sample(agent="agent", turn=0, problem_id=str(i), episode_id=str(i),
                      prompt_ids=prompts[i // max(1, args.k)],
                      response_ids=torch.randint(0, vocab, (args.response_len,), generator=g).tolist(),
                      logprobs=[-1.0] * args.response_len, advantage=float(i % 2) * 2 - 1)
               for i in range(args.sequences)]
    t0 = time.perf_counter()
    worker.logprobs(samples)
    logprob_s = time.perf_counter() - t0
    times, losses = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        m = worker.update(samples, step)
        times.append(time.perf_counter() - t0)
        losses.append(m["loss"])
    result = {
        "model": args.model, "mode": "full" if args.full else f"lora-r{args.rank}", "dtype": args.dtype,
        "sequences": args.sequences, "k": args.k, "tokens_per_sequence": args.prompt_len + args.response_len,
        "micro_batch": args.micro_batch, "logprob_chunk": args.chunk, "threads": torch.get_num_threads(),
        "gradient_checkpointing": args.gradient_checkpointing, "head": "module" if args.head_module else "fused",
        "load_s": round(load_s, 2), "logprobs_no_grad_s": round(logprob_s, 2),
        "update_s_first": round(times[0], 2),
        "update_s_rest_mean": round(sum(times[1:]) / max(1, len(times) - 1), 2) if len(times) > 1 else None,
        "peak_rss_mb_after_load": round(rss_loaded), "peak_rss_mb_after_updates": round(peak_rss_mb()),
        "losses_finite": all(torch.isfinite(torch.tensor(losses)).tolist()),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
