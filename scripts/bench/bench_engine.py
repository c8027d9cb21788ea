"""Rollout-engine throughput, side by side in one run: our HF engine, our vLLM engine, vLLM's own
`LLM.generate` under it (the seam's overhead), and transformers' model.generate (on the model as
`from_pretrained` loads it, without the HF engine's own decode changes), `hf_plain`: the HF
engine with its lean Llama forward off (rollout.engine_options.lean_forward=false), and
`hf_onednn`: the lean forward without the bf16 GEMV kernel (rollout.engine_options.cpu_kernels=false).

    .venv/bin/python scripts/bench/bench_engine.py                       # hf vs vllm, batch 1/16/32
    .venv/bin/python scripts/bench/bench_engine.py --engines hf vllm vllm_raw generate --repeats 3
    .venv/bin/python scripts/bench/bench_engine.py --compile             # vLLM with graph compile
    .venv/bin/python scripts/bench/bench_engine.py --engines hf hf_plain generate --batches 1 4 16
    .venv/bin/python scripts/bench/bench_engine.py --engines hf hf_onednn generate --batches 1 2 4 8
    .venv/bin/python scripts/bench/bench_engine.py --engines vllm vllm_budget vllm_split --context 400 --batches 64
    .venv/bin/python scripts/bench/bench_engine.py --engines hf generate --batches 1 16 --roofline

For each batch size B it takes B different math questions (chat template, temperature 0.7,
max_new_tokens 128) and counts the tokens each engine produced up to and including the end token.
tokens/s = those tokens / wall time (`--clock cpu`: / this process's CPU time, for the hf engines
with `--threads 1` on a shared box); the best of --repeats runs is kept (the machine may be
shared). Samplers draw different random tokens, so sequence lengths differ: compare tokens/s, not
wall times. `vllm_raw` sends the same prompt ids and sampling params straight to the `vllm.LLM`
our engine holds, so vllm / vllm_raw is what the seam costs. Prints a table with the ratios to
the first engine and one JSON line. vLLM runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0);
`--kv-gib` sizes its CPU KV cache.

`--roofline` also measures, in the same run and with the engines' torch threads, this box's memory
read bandwidth and its fp32 and bf16 GEMM rates at each batch's shape, and prints each engine's
tok/s as a fraction of the box's ceiling (pettingllms/utils/roofline.py: batch 1 is bound by the
weights' bf16 bytes per token over the bandwidth, larger batches by 2 FLOPs per weight per token
over the faster GEMM rate).

vLLM on CPU cannot split a seeded prompt's prefill over scheduler steps (see
`pettingllms/rollout/engines/vllm.py:_cpu_prefill`); the ways around it, on prompts long enough
(`--context N` adds N words of per-request text, new on every run so the prefix cache never
serves them) that a batch outgrows vLLM's 4,096-token step: `vllm` (rollout.vllm.cpu_prefill=whole:
chunked prefill off), `vllm_budget` (cpu_prefill=budget: chunked prefill on, a step budget of
max_num_seqs * max_model_len tokens), `vllm_split` (the `vllm` engine, our call cut into pieces
whose prompts fit 4,096 tokens, one after the other).
"""
from __future__ import annotations

import argparse
import json
import os
import time

CLOCK = [time.perf_counter]  # --clock cpu: time.process_time

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


CONTEXT = {"words": 0, "run": 0}  # --context: filler words per request; a new text on every run


def messages(i: int) -> list[dict[str, str]]:
    question = QUESTIONS[i % len(QUESTIONS)]
    if CONTEXT["words"]:
        run = CONTEXT["run"]
        filler = " ".join(f"n{run}x{i}x{j}" for j in range(CONTEXT["words"] // 3))
        question = f"Notes (ignore): {filler}\n\n{question}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def prompt_tokens(model: str, batch: int) -> int:
    """The batch's prompt tokens as the chat template renders them (the call's prefill work)."""
    from transformers import AutoTokenizer

    from pettingllms.utils.models import resolve_model_path
    tok = AutoTokenizer.from_pretrained(resolve_model_path(model))
    return sum(len(tok.apply_chat_template(messages(i), add_generation_prompt=True, tokenize=True, return_dict=False))
               for i in range(batch))


def best_of(repeats: int, fn):
    runs = [fn() for _ in range(repeats)]
    return max(runs, key=lambda r: r[0] / r[1]), runs


def bench_engine(engine, batch: int, new_tokens: int, temperature: float, seed: int):
    from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams

    requests = [GenerationRequest(messages(i), policy="bench", request_id=str(i), params=SamplingParams(
        temperature=temperature, max_new_tokens=new_tokens, seed=seed + i)) for i in range(batch)]
    CONTEXT["run"] += 1
    start = CLOCK[0]()
    out = engine.generate(requests)
    wall = CLOCK[0]() - start
    return sum(len(c.response_ids) for cs in out for c in cs), wall


def bench_vllm_split(engine, batch: int, new_tokens: int, temperature: float, seed: int, budget: int = 4096):
    """The same requests, sent in consecutive pieces whose prompt tokens fit one vLLM step."""
    from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams, prompt_ids

    tok = engine._served["bench"].tokenizer
    requests = [GenerationRequest(messages(i), policy="bench", request_id=str(i), params=SamplingParams(
        temperature=temperature, max_new_tokens=new_tokens, seed=seed + i)) for i in range(batch)]
    CONTEXT["run"] += 1
    pieces, piece, used = [], [], 0
    for r in requests:
        n = len(prompt_ids(tok, r, engine.max_prompt_tokens))
        if piece and used + n > budget:
            pieces.append(piece)
            piece, used = [], 0
        piece.append(r)
        used += n
    pieces.append(piece)
    start = CLOCK[0]()
    produced = sum(len(c.response_ids) for p in pieces for cs in engine.generate(p) for c in cs)
    return produced, CLOCK[0]() - start


def bench_generate(model, tokenizer, eos_ids, batch: int, new_tokens: int, temperature: float, seed: int):
    import torch

    texts = [tokenizer.apply_chat_template(messages(i), tokenize=False, add_generation_prompt=True)
             for i in range(batch)]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    start = CLOCK[0]()
    with torch.inference_mode():
        out = model.generate(**enc, do_sample=temperature > 0, temperature=temperature or None, top_k=0,
                             top_p=1.0, max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=eos_ids)
    wall = CLOCK[0]() - start
    produced = 0
    for row in out[:, enc["input_ids"].shape[1]:].tolist():  # tokens up to and including the end token
        ends = [i for i, t in enumerate(row) if t in eos_ids]
        produced += ends[0] + 1 if ends else len(row)
    return produced, wall


def bench_vllm_raw(engine, batch: int, new_tokens: int, temperature: float, seed: int):
    """The same requests as bench_engine, straight to the vllm.LLM under our VLLMEngine."""
    from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams, prompt_ids

    served = engine._served["bench"]
    requests = [GenerationRequest(messages(i), policy="bench", request_id=str(i), params=SamplingParams(
        temperature=temperature, max_new_tokens=new_tokens, seed=seed + i)) for i in range(batch)]
    CONTEXT["run"] += 1
    prompts = [{"prompt_token_ids": prompt_ids(served.tokenizer, r, engine.max_prompt_tokens)} for r in requests]
    params = [engine._sampling(r, i, 0, served.stop_ids) for i, r in enumerate(requests)]
    start = CLOCK[0]()
    out = served.llm.generate(prompts, params, use_tqdm=False)
    wall = CLOCK[0]() - start
    return sum(len(c.token_ids) for o in out for c in o.outputs), wall


def build(name: str, args):
    """An engine by name, and its load time."""
    start = time.perf_counter()
    if name in ("hf", "hf_plain", "hf_onednn"):
        from pettingllms.rollout.engines.hf import HFEngine
        engine = HFEngine({"bench": args.model}, dtype=args.dtype, device=args.device, threads=args.threads,
                          lean_forward=name != "hf_plain", cpu_kernels=name == "hf")
    else:
        from pettingllms.config import VLLMConfig
        from pettingllms.rollout.engines.vllm import VLLMEngine
        engine = VLLMEngine({"bench": args.model}, VLLMConfig(
            enforce_eager=not args.compile, cpu_kvcache_gib=args.kv_gib, cpu_threads=args.vllm_threads,
            max_num_seqs=max(args.batches), cpu_prefill="budget" if name == "vllm_budget" else "whole"),
            dtype=args.dtype, seed=args.seed, max_new_tokens=args.new_tokens)
    return engine, time.perf_counter() - start


def _family(name: str) -> str:
    """Which built engine a bench entry runs on."""
    return {"generate": "hf", "vllm_raw": "vllm", "vllm_split": "vllm"}.get(name, name)


_PLAIN: dict = {}


def plain_model(path: str, dtype: str):
    """transformers' model exactly as `from_pretrained` gives it (its default attention, plain
    linears): the `generate` baseline must not inherit the HF engine's own speed-ups."""
    if path not in _PLAIN:
        from transformers import AutoModelForCausalLM

        from pettingllms.utils.models import resolve_model_path, torch_dtype
        _PLAIN[path] = AutoModelForCausalLM.from_pretrained(resolve_model_path(path), dtype=torch_dtype(dtype)).eval()
    return _PLAIN[path]


def run_once(name: str, engine, batch: int, args):
    if name == "generate":
        slot = engine._slot("bench")
        return bench_generate(plain_model(args.model, args.dtype), slot.tokenizer, sorted(slot.eos_ids), batch,
                              args.new_tokens, args.temperature, args.seed)
    if name == "vllm_raw":
        return bench_vllm_raw(engine, batch, args.new_tokens, args.temperature, args.seed)
    if name == "vllm_split":
        return bench_vllm_split(engine, batch, args.new_tokens, args.temperature, args.seed)
    return bench_engine(engine, batch, args.new_tokens, args.temperature, args.seed)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--dtype", default="bfloat16", help="auto: model.dtype=auto's choice for --device")
    ap.add_argument("--device", default="cpu", help="HF engine device (vLLM picks its own)")
    ap.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "hf_plain", "hf_onednn", "vllm", "vllm_raw", "vllm_budget", "vllm_split", "generate"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 32])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's default")
    ap.add_argument("--compile", action="store_true", help="vLLM without enforce_eager (slow start, faster decode)")
    ap.add_argument("--kv-gib", type=int, default=2, help="vLLM CPU KV cache (VLLM_CPU_KVCACHE_SPACE)")
    ap.add_argument("--vllm-threads", type=int, default=0,
                    help="rollout.vllm.cpu_threads: 0 this process's torch threads, unpinned; -1 vLLM's default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's CPU time instead of wall time (a shared box; meaningful for the "
                         "hf engines with --threads 1, not for vLLM's own threads)")
    ap.add_argument("--context", type=int, default=0, help="filler words added to each prompt (see above)")
    ap.add_argument("--roofline", action="store_true",
                    help="measure the box's ceilings and print each tok/s as a fraction of them")
    ap.add_argument("--roofline-mib", type=int, default=256, help="buffer read for the bandwidth (MiB)")
    args = ap.parse_args(argv)
    from pettingllms.utils.precision import resolve_dtype
    args.dtype = resolve_dtype(args.dtype, args.device)  # the result records the dtype that ran
    CONTEXT["words"] = args.context
    CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter

    import torch

    engines, load_s = {}, {}
    for name in args.engines:  # hf and generate share one HF engine; vllm and vllm_raw one vLLM engine
        family = _family(name)
        if family not in engines:
            engines[family], load_s[family] = build(family, args)
            bench_engine(engines[family], 2, 8, args.temperature, args.seed)  # warm-up (allocator, kernels)
    roof = None
    if args.roofline:  # after the engines set torch's threads; before the runs, on the same box
        from pettingllms.utils.models import resolve_model_path
        from pettingllms.utils.roofline import ModelShape, Roofline

        roof = Roofline.measure(ModelShape.of_folder(resolve_model_path(args.model)), args.batches, args.roofline_mib)
        for line in roof.describe():
            print(line, flush=True)
    rows = []
    for batch in args.batches:
        row = {"batch": batch}
        for name in args.engines:
            engine = engines[_family(name)]
            (tok, wall), runs = best_of(args.repeats, lambda: run_once(name, engine, batch, args))
            row[name] = {"tokens": tok, "s": round(wall, 2), "tok_s": round(tok / wall, 1),
                         "runs_tok_s": [round(t / s, 1) for t, s in runs]}
        first = row[args.engines[0]]["tok_s"]
        for name in args.engines[1:]:
            row[f"{name}/{args.engines[0]}"] = round(row[name]["tok_s"] / first, 2)
        if "vllm" in row and "vllm_raw" in row:
            row["seam_overhead"] = round(1 - row["vllm"]["tok_s"] / row["vllm_raw"]["tok_s"], 3)
        if roof is not None:
            row["roofline_tok_s"], row["roofline_bound"] = round(roof.tok_s(batch)[0], 1), roof.tok_s(batch)[1]
            row["prompt_tokens"] = prompt_tokens(args.model, batch)
            for name in args.engines:
                row[name]["of_roofline"] = round(row[name]["tok_s"] / roof.tok_s(batch)[0], 3)
                # the same run against the whole call's ceiling: its prompts' prefill counted too
                call = roof.call_tok_s(batch, row[name]["tokens"], row["prompt_tokens"])
                row[name]["of_call_roofline"] = round(row[name]["tok_s"] / call, 3)
        rows.append(row)
    ratios = [f"{n}/{args.engines[0]}" for n in args.engines[1:]]
    print(" | ".join([f"{'batch':>5}"] + [f"{n + ' tok/s':>14}" for n in args.engines] + [f"{r:>12}" for r in ratios]))
    for r in rows:
        print(" | ".join([f"{r['batch']:>5}"] + [f"{r[n]['tok_s']:>14}" for n in args.engines]
                         + [f"{r[x]:>12}" for x in ratios]))
    if roof is not None:
        print("roofline fractions (tok/s / the box's decode ceiling; in brackets, of the whole call's ceiling: "
              "the prompts' prefill counted too):")
        for r in rows:
            print(f"  batch {r['batch']}: ceiling {r['roofline_tok_s']} tok/s ({r['roofline_bound']}-bound), "
                  f"{r['prompt_tokens']} prompt tokens; "
                  + ", ".join(f"{n} {r[n]['tok_s']} tok/s = {100 * r[n]['of_roofline']:.0f}% "
                              f"({100 * r[n]['of_call_roofline']:.0f}%)" for n in args.engines))
    result = {"model": args.model, "dtype": args.dtype, "new_tokens": args.new_tokens, "temperature": args.temperature,
              "vllm_compile": args.compile, "context_words": args.context, "vllm_threads": args.vllm_threads, "clock": args.clock, "threads": torch.get_num_threads(),
              "load_s": {k: round(v, 1) for k, v in load_s.items()}, "loadavg_1m": round(os.getloadavg()[0], 1),
              "rows": rows, "roofline": roof.as_dict() if roof is not None else None}
    print(json.dumps(result))
    for engine in engines.values():
        engine.close()
    return result


if __name__ == "__main__":
    main()
