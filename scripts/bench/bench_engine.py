"""Rollout-engine throughput: HFEngine vs transformers' model.generate on the same inputs.

    .venv/bin/python scripts/bench/bench_engine.py                      # embedded model, batch 1 and 16
    .venv/bin/python scripts/bench/bench_engine.py --batches 1 4 16 --new-tokens 64 --repeats 3

For each batch size B it takes B different math questions (chat template, temperature 0.7,
max_new_tokens 128), runs HFEngine.generate and model.generate (sampling, top_k=0 so no hidden
truncation, same model object, left padding, KV cache) and counts the tokens each produced up to
and including the end token. tokens/s = those tokens / wall time; the best of --repeats runs is
kept (the machine may be shared). Both samplers draw different random tokens, so their sequence
lengths differ: compare tokens/s, not wall times. Prints a table and one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import time

QUESTIONS = [
    "What is 17 + 25?", "A farmer has 12 cows and buys 7 more. How many cows?", "What is 9 times 8?",
    "Compute 144 divided by 12.", "If x + 3 = 10, what is x?", "What is the square of 15?",
    "Tom reads 20 pages a day. How many pages in a week?", "What is 1000 minus 387?",
    "A box holds 6 eggs. How many boxes for 45 eggs?", "What is 3/4 of 64?",
    "Name a prime number between 20 and 30.", "What is 2 to the power 10?",
    "A train goes 60 km/h for 2.5 hours. How far?", "What is the sum of the angles of a triangle?",
    "What is 13 * 13?", "Sara has 5 apples and eats 2. How many are left?",
]
SYSTEM = "You are a helpful math assistant. Think step by step, then give the answer."


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]


def best_of(repeats: int, fn):
    runs = [fn() for _ in range(repeats)]
    return max(runs, key=lambda r: r[0] / r[1]), runs


def bench_engine(engine, batch: int, new_tokens: int, temperature: float, seed: int):
    from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams

    requests = [GenerationRequest(messages(i), policy="bench", request_id=str(i), params=SamplingParams(
        temperature=temperature, max_new_tokens=new_tokens, seed=seed + i)) for i in range(batch)]
    start = time.perf_counter()
    out = engine.generate(requests)
    wall = time.perf_counter() - start
    return sum(len(c.response_ids) for cs in out for c in cs), wall


def bench_generate(model, tokenizer, eos_ids, batch: int, new_tokens: int, temperature: float, seed: int):
    import torch

    texts = [tokenizer.apply_chat_template(messages(i), tokenize=False, add_generation_prompt=True)
             for i in range(batch)]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**enc, do_sample=temperature > 0, temperature=temperature or None, top_k=0,
                             top_p=1.0, max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=eos_ids)
    wall = time.perf_counter() - start
    produced = 0
    for row in out[:, enc["input_ids"].shape[1]:].tolist():  # tokens up to and including the end token
        ends = [i for i, t in enumerate(row) if t in eos_ids]
        produced += ends[0] + 1 if ends else len(row)
    return produced, wall


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's default")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch

    from pettingllms.rollout.engines.hf import HFEngine

    start = time.perf_counter()
    engine = HFEngine({"bench": args.model}, dtype=args.dtype, device=args.device, threads=args.threads)
    load_s = time.perf_counter() - start
    slot = engine._slot("bench")
    eos_ids = sorted(slot.eos_ids)
    bench_engine(engine, 2, 8, args.temperature, args.seed)  # warm-up (allocator, kernels)
    rows = []
    for batch in args.batches:
        (e_tok, e_s), e_runs = best_of(args.repeats, lambda: bench_engine(
            engine, batch, args.new_tokens, args.temperature, args.seed))
        (g_tok, g_s), g_runs = best_of(args.repeats, lambda: bench_generate(
            slot.model, slot.tokenizer, eos_ids, batch, args.new_tokens, args.temperature, args.seed))
        rows.append({"batch": batch, "engine_tokens": e_tok, "engine_s": round(e_s, 2),
                     "engine_tok_s": round(e_tok / e_s, 1), "generate_tokens": g_tok,
                     "generate_s": round(g_s, 2), "generate_tok_s": round(g_tok / g_s, 1),
                     "ratio": round((e_tok / e_s) / (g_tok / g_s), 2),
                     "engine_runs_tok_s": [round(t / s, 1) for t, s in e_runs],
                     "generate_runs_tok_s": [round(t / s, 1) for t, s in g_runs]})
    print(f"{'batch':>5} | {'engine tok/s':>12} | {'generate tok/s':>14} | ratio")
    for r in rows:
        print(f"{r['batch']:>5} | {r['engine_tok_s']:>12} | {r['generate_tok_s']:>14} | {r['ratio']}")
    result = {"model": args.model, "dtype": args.dtype, "device": args.device, "new_tokens": args.new_tokens,
              "temperature": args.temperature, "threads": torch.get_num_threads(), "load_s": round(load_s, 1),
              "loadavg_1m": round(os.getloadavg()[0], 1), "rows": rows}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
