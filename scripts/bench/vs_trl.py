#!/usr/bin/env python
"""Our trainer against TRL's GRPOTrainer on the identical task, A/B/A/B in fresh processes.

    python scripts/bench/vs_trl.py                      # LoRA r=16, 8 prompts x 4, 64 new tokens
    python scripts/bench/vs_trl.py --full               # full fine-tuning
    python scripts/bench/vs_trl.py --busy 1             # one core taken by a busy loop, both sides
    python scripts/bench/vs_trl.py --multi-agent        # the AT-GRPO quickstart's step split
    python scripts/bench/vs_trl.py --dry-run            # the plan and the versions, no training

Both sides get the same prompts (single-digit arithmetic from `math_easy`, the chat messages of
the `math_single` env, one turn, in the order our trainer draws them), the same reward (the
math env's answer extraction and judge), the same model files, K, batch, new tokens, sampling,
LoRA config, lr, beta=0, micro-batch and torch thread count. Each side runs in its own
subprocess; sides alternate for --rounds rounds. Per side it prints the median step time after
each run's first step, generation useful tokens/s (response tokens up to EOS), update tokens/s
(prompt + response tokens trained), peak RSS, the update's GFLOP/s against this box's matmul
rate in the dtype both sides run, then the ratios ours/TRL.

Dtype: each side gets the box's best (--dtype auto, the default: model.dtype=auto's rule, bf16
where the CPU computes it natively, else float32; the plan line says which and why). Ours loads
the model in it (trainable LoRA/full weights stay model.train_dtype=float32); TRL loads the model
in it (model_init_kwargs), its bf16 autocast on only when it is bf16 (TRL's default is on). The
fp32 and bf16 matmul rates are both printed, so the choice can be checked against this box.

TRL is optional: when our Python cannot import it, the script builds its own venv
(--trl-venv, default .bench/trl-venv; TRL pins a newer transformers than our vLLM/verl stack)
with the same torch release. Numbers are only comparable within one run on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRL_SIDE = Path(__file__).with_name("vs_trl_trl.py")
TRL_PINS = ("trl==1.16.0", "math-verify")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4, help="steps per run; the first is not timed (default 4)")
    p.add_argument("--rounds", type=int, default=2, help="A/B rounds (default 2: ours, TRL, ours, TRL)")
    p.add_argument("--batch", type=int, default=8, help="prompts per step (default 8)")
    p.add_argument("--k", type=int, default=4, help="completions per prompt (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward, both sides")
    p.add_argument("--threads", default="0",
                   help="torch threads, both sides (default 0: the allowed cores); 'auto': ours uses "
                        "trainer.threads=auto, TRL the allowed cores (its default)")
    p.add_argument("--model", default="embedded:smollm2-135m-instruct", help="model.path (same files for TRL)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto", help="model dtype, both sides (default auto: the box's best, see above)")
    p.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    p.add_argument("--busy", type=int, default=0, metavar="N", help="N cores taken by busy loops during both sides")
    p.add_argument("--multi-agent", action="store_true",
                   help="also run the AT-GRPO quickstart and report its step split against the physical limit")
    p.add_argument("--only", choices=("ours", "trl"), help="run one side only")
    p.add_argument("--trl-python", default="", help="a Python with trl installed (default: ours, else the venv)")
    p.add_argument("--trl-venv", default=str(ROOT / ".bench" / "trl-venv"))
    p.add_argument("--json", default="", help="also write all results to this JSON file")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the versions, train nothing")
    p.add_argument("--side", choices=("ours", "multi"), help=argparse.SUPPRESS)  # internal: one run
    p.add_argument("--task", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.batch * args.k % args.micro_batch:
        p.error(f"--batch x --k ({args.batch * args.k}) must be a multiple of --micro-batch ({args.micro_batch})")
    if args.threads != "auto" and not args.threads.isdigit():
        p.error(f"--threads must be a count or 'auto', got {args.threads!r}")
    if args.steps < 2:
        p.error("--steps must be >= 2 (the first step of each run is not timed)")
    return args


# ---------------------------------------------------------------- versions and TRL's Python

def _versions(python: str, dists: tuple[str, ...]) -> dict[str, str]:
    """Installed versions in `python`'s environment (package metadata: fast, imports nothing)."""
    code = ("import json, sys\nfrom importlib import metadata\nout = {'python': sys.version.split()[0]}\n"
            f"for d in {list(dists)!r}:\n"
            "    try: out[d] = metadata.version(d)\n"
            "    except metadata.PackageNotFoundError: out[d] = 'missing'\n"
            "print(json.dumps(out))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip()[-300:]}


def _has_trl(python: str) -> bool:
    return _versions(python, ("trl",)).get("trl", "missing") != "missing"


def _torch_pin() -> str:
    from importlib import metadata
    return "torch==" + metadata.version("torch").split("+")[0]


def _peft_pin() -> str:
    """TRL's LoRA side needs peft, which trl does not depend on: the same version as ours."""
    from importlib import metadata
    return "peft==" + metadata.version("peft")


def _commit() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return (r.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


def trl_python(args: argparse.Namespace, create: bool) -> str | None:
    """A Python that imports trl: --trl-python, ours, or the bench venv (built when `create`)."""
    if args.trl_python:
        return args.trl_python
    if _has_trl(sys.executable):
        return sys.executable
    venv = Path(args.trl_venv)
    py = venv / "bin" / "python"
    if py.exists() and _has_trl(str(py)):
        return str(py)
    if not create:
        return None
    torch_pin = _torch_pin()
    pins = (torch_pin, _peft_pin(), *TRL_PINS)
    print(f"building {venv} ({', '.join(pins)}); minutes, once", flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *pins], check=True)
    return str(py)


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {allowed} allowed cores of {os.cpu_count()}, {mem:.0f} GiB"


def side_dtype(args: argparse.Namespace) -> tuple[str, str]:
    """(dtype both sides load the model in, why): --dtype, auto resolved by model.dtype=auto's rule."""
    from pettingllms.utils.precision import AUTO, choose_dtype
    if args.dtype.lower() == AUTO:
        return choose_dtype("cpu")
    return args.dtype, "--dtype given"


def matmul_gflops(threads: int, dtype: str = "bfloat16", seconds: float = 2.0) -> float:
    """This box's 1024^3 matmul rate (GFLOP/s) in `dtype` with `threads` torch threads: the update's ceiling."""
    import torch

    from pettingllms.utils.roofline import gemm_rate
    torch.set_num_threads(threads)
    return gemm_rate(1024, 1024, 1024, getattr(torch, dtype), seconds) / 1e9


# ---------------------------------------------------------------- the shared task

def overrides(args: argparse.Namespace, model_path: str, threads: int | str, out_dir: str) -> list[str]:
    """Our trainer's config for the benchmark task (single_grpo on math_easy, one turn)."""
    return [
        "env=math_single", "env.data=math_easy", "env.max_turns=1", f"seed={args.seed}",
        f"model.path={model_path}", f"model.dtype={args.dtype}", f"model.lora.enabled={str(not args.full).lower()}",
        f"model.lora.rank={args.lora_rank}", f"model.lora.alpha={args.lora_alpha}",
        f"rollout.batch_size={args.batch}", f"rollout.k={args.k}",
        f"rollout.sampling.max_new_tokens={args.max_new_tokens}",
        f"rollout.sampling.temperature={args.temperature}", f"rollout.sampling.top_p={args.top_p}",
        "rollout.sampling.top_k=0", f"trainer.optim.lr={args.lr}", "trainer.optim.lr_schedule=constant",
        "trainer.optim.warmup_steps=0", "algorithm.kl_coef=0.0", f"trainer.micro_batch_size={args.micro_batch}",
        f"trainer.threads={threads}", f"trainer.total_steps={args.steps}", "trainer.checkpoint.save_freq=0",
        "trainer.validation.val_freq=0", "trainer.logging.progress_bar=false", "trainer.logging.save_trajectories=false",
        "trainer.logging.log_tensorboard=false", f"trainer.output_dir={out_dir}",
    ]


def build_task(args: argparse.Namespace, threads: int) -> dict:
    """Everything the TRL side needs, with the exact prompts our trainer will draw, step by step."""
    from pettingllms.cli.config_loading import load_config
    from pettingllms.trainer import components as comp
    from pettingllms.trainer.data import DataOrder
    from pettingllms.utils.models import resolve_model_path

    model_path = resolve_model_path(args.model)
    cfg = load_config("single_grpo", overrides(args, model_path, threads, tempfile.gettempdir()))
    problems = comp.load_problems(cfg, "train", cfg.env.train_limit)
    order = DataOrder(len(problems), int(cfg.seed))  # the trainer's own draw order
    env = comp.make_env_factory(cfg)()
    rows = []
    for _ in range(args.steps):
        for i in order.next_indices(args.batch):
            env.reset(problems[i], seed=0)
            rows.append({"prompt": env.observation(env.agents[0]), "answer": str(problems[i]["answer"])})
    return {"model_path": model_path, "rows": rows, "k": args.k, "batch": args.batch,
            "max_new_tokens": args.max_new_tokens, "dtype": side_dtype(args)[0],
            "temperature": args.temperature, "top_p": args.top_p,
            "lr": args.lr, "full": args.full, "lora_rank": args.lora_rank, "lora_alpha": args.lora_alpha,
            "lora_targets": list(cfg.model.lora.target_modules), "micro_batch": args.micro_batch,
            "threads": threads, "steps": args.steps, "seed": args.seed, "repo": str(ROOT),
            "clip": [float(cfg.algorithm.clip_low), float(cfg.algorithm.clip_high)]}


# ---------------------------------------------------------------- one run of our trainer

def peak_rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_ours(task: dict, config_name: str, extra: list[str]) -> dict:
    """Our side, through the public trainer API (LocalTrainer.train_step), as profile_step does."""
    import torch

    from pettingllms.cli.config_loading import load_config
    from pettingllms.trainer.local import LocalTrainer

    cfg = load_config(config_name, extra)
    t0 = time.perf_counter()
    trainer = LocalTrainer(cfg)
    setup_s = time.perf_counter() - t0
    steps = []
    try:
        for step in range(1, int(cfg.trainer.total_steps) + 1):
            m = trainer.train_step(step)
            trainer.step = step
            steps.append({"step_s": m["timing/step_s"], "generate_s": m["timing/generate_s"],
                          "env_s": m["timing/env_s"], "update_s": m["timing/update_s"] + m["timing/logprob_s"],
                          "logprob_s": m["timing/logprob_s"],
                          "gen_tokens": round(m["tokens/generated_per_s"] * m["timing/generate_s"]),
                          "update_tokens": m["tokens/prompt"] + m["tokens/response"],
                          # what the forwards computed: shared prompts once, zero-advantage samples not at all
                          "tokens_run": sum(v for k, v in m.items() if k.startswith("policy/")
                                            and k.endswith("/tokens_run")),
                          "reward": m["reward/mean"]})
        # one base model's weights (L1/L2 share it): what each token's FLOPs scale with
        n_params = sum(p.numel() for p in _modules(next(iter(trainer.workers.values()))).parameters())
    finally:
        trainer.close()
    return {"side": "ours", "setup_s": setup_s, "steps": steps, "peak_rss_mb": peak_rss_mb(),
            "threads": torch.get_num_threads(), "params": n_params,
            "versions": _versions(sys.executable, ("torch", "transformers", "peft"))}


def _modules(worker):
    model = getattr(worker, "model", None)
    if model is None:
        raise RuntimeError(f"{type(worker).__name__} exposes no .model to count parameters")
    return model


# ---------------------------------------------------------------- summary

def summarize(runs: list[dict], gflops: float, lora: bool, matmul_dtype: str = "bfloat16") -> dict:
    """Medians over the timed steps (each run's first step is warm-up)."""
    steps = [s for r in runs for s in r["steps"][1:]]
    med = lambda key: statistics.median(s[key] for s in steps)  # noqa: E731
    gen_tps = statistics.median(s["gen_tokens"] / s["generate_s"] for s in steps if s["generate_s"] > 0)
    upd_tps = statistics.median(s["update_tokens"] / s["update_s"] for s in steps if s["update_s"] > 0)
    params = runs[0].get("params", 0)
    # forward 2N, backward 2N for activations (+2N for weight grads when every weight trains), per
    # token computed: ours runs a shared prompt once and skips zero-advantage samples (tokens_run)
    flops_per_token = (4 if lora else 6) * params
    run_tps = statistics.median(s.get("tokens_run", s["update_tokens"]) / s["update_s"] for s in steps
                                if s["update_s"] > 0)
    upd_gflops = run_tps * flops_per_token / 1e9
    return {"step_s": med("step_s"), "generate_s": med("generate_s"), "update_s": med("update_s"),
            "other_s": statistics.median(s["step_s"] - s["generate_s"] - s["update_s"] for s in steps),
            "gen_tok_s": gen_tps, "update_tok_s": upd_tps, "update_run_tok_s": run_tps, "update_gflops": upd_gflops,
            "update_frac_of_matmul": upd_gflops / gflops if gflops else 0.0, "matmul_dtype": matmul_dtype,
            "peak_rss_gb": max(r["peak_rss_mb"] for r in runs) / 1024,
            "reward": statistics.mean(s["reward"] for s in steps), "runs": len(runs), "timed_steps": len(steps),
            "versions": runs[0]["versions"], "threads": runs[0]["threads"]}


def print_summary(name: str, s: dict) -> None:
    v = ", ".join(f"{k} {x}" for k, x in s["versions"].items())
    print(f"{name:>5}: step {s['step_s']:.2f} s (generate {s['generate_s']:.2f}, update {s['update_s']:.2f}, "
          f"other {s['other_s']:.2f}); generation {s['gen_tok_s']:.1f} useful tok/s; update "
          f"{s['update_tok_s']:.1f} batch tok/s ({s['update_run_tok_s']:.1f} computed) = "
          f"{s['update_gflops']:.1f} GFLOP/s "
          f"({100 * s['update_frac_of_matmul']:.0f}% of {s.get('matmul_dtype', 'bfloat16')} matmul); "
          f"peak RSS {s['peak_rss_gb']:.2f} GB; "
          f"reward {s['reward']:.3f}; {s['timed_steps']} timed steps in {s['runs']} runs; "
          f"{s['threads']} threads; {v}")


def print_ratios(ours: dict, trl: dict) -> None:
    print(f"step time ratio (ours/TRL): {ours['step_s'] / trl['step_s']:.2f}")
    print(f"generation useful tok/s ratio (ours/TRL): {ours['gen_tok_s'] / trl['gen_tok_s']:.2f}")
    print(f"update tok/s ratio (ours/TRL): {ours['update_tok_s'] / trl['update_tok_s']:.2f}")
    print(f"peak RSS ratio (ours/TRL): {ours['peak_rss_gb'] / trl['peak_rss_gb']:.2f}")


def print_multi(s: dict, runs: list[dict], gflops: float) -> None:
    """The AT-GRPO quickstart's split, and the step's floor if every FLOP ran at the matmul rate."""
    steps = [x for r in runs for x in r["steps"][1:]]
    gen_tokens = statistics.median(x["gen_tokens"] for x in steps)
    upd_tokens = statistics.median(x.get("tokens_run", x["update_tokens"]) for x in steps)  # computed
    params = runs[0]["params"]
    # a separate no-grad old-logprob pass costs about a third of the update; when old logprobs come
    # from the training forward, logprob_s only times the bookkeeping (well under a percent)
    logprob = statistics.median(x["logprob_s"] for x in steps) > 0.05 * statistics.median(x["update_s"] for x in steps)
    # generation: a forward per token; update: 4N per token (LoRA), plus a forward to recompute old logprobs
    limit = (2 * params * gen_tokens + (4 + (2 if logprob else 0)) * params * upd_tokens) / (gflops * 1e9)
    env = statistics.median(x["env_s"] for x in steps)
    print(f"multi-agent (quickstart, AT-GRPO): step {s['step_s']:.2f} s = generate {s['generate_s']:.2f} + "
          f"env {env:.2f} + update {s['update_s']:.2f} + other {max(0.0, s['other_s'] - env):.2f}; "
          f"physical limit {limit:.2f} s at {gflops:.0f} GFLOP/s {s.get('matmul_dtype', 'bfloat16')} matmul "
          f"({s['step_s'] / limit:.1f}x above "
          f"it; decode at small batch is memory-bound, so the limit is a floor, not a target)")


# ---------------------------------------------------------------- orchestration

def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def child_env(threads: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(
        os.pathsep), "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}


def run_child(cmd: list[str], out: Path, threads: int) -> dict:
    r = subprocess.run(cmd, cwd=ROOT, env=child_env(threads))
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"error: {' '.join(cmd[:3])} ... failed with exit code {r.returncode}")
    return json.loads(out.read_text())


def plan(args: argparse.Namespace, threads: int) -> list[str]:
    order = [s for _ in range(args.rounds) for s in (("ours",) if args.only == "ours" else ("trl",) if
                                                     args.only == "trl" else ("ours", "trl"))]
    return [
        f"task: single-digit arithmetic (math_easy train split, math_single env, max_turns=1), "
        f"{args.batch} prompts x k={args.k}, {args.max_new_tokens} new tokens, T={args.temperature}, "
        f"top_p={args.top_p}, {'full fine-tuning' if args.full else f'LoRA r={args.lora_rank} alpha={args.lora_alpha} on all linear layers'}, "
        f"lr={args.lr} constant, beta=0, micro-batch {args.micro_batch}, "
        f"{'ours trainer.threads=auto, TRL ' + str(threads) if args.threads == 'auto' else threads} torch threads, "
        f"seed {args.seed}",
        f"dtypes: both sides load the model in {side_dtype(args)[0]} ({side_dtype(args)[1]}); ours trains "
        "fp32 weights (model.train_dtype) and recomputes old logprobs",
        f"model: {args.model} (bf16 files, same folder for both sides)",
        f"runs: {' '.join(order)} ({args.steps} steps each, the first untimed)"
        + (f"; then the AT-GRPO quickstart for {args.steps} steps" if args.multi_agent else ""),
        f"busy loops during every run: {args.busy}",
        f"machine: {machine()}; commit {_commit()}",
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.side:  # one run inside a child process
        task = json.loads(Path(args.task).read_text())
        with tempfile.TemporaryDirectory(prefix="pettingllms-vs-trl-") as out_dir:
            if args.side == "ours":
                ours_threads = "auto" if args.threads == "auto" else task["threads"]
                res = run_ours(task, "single_grpo", overrides(args, task["model_path"], ours_threads, out_dir))
            else:
                res = run_ours(task, "quickstart", [f"model.dtype={args.dtype}",
                                                    f"trainer.threads={'auto' if args.threads == 'auto' else task['threads']}",
                                                    f"trainer.total_steps={args.steps}", "trainer.checkpoint.save_freq=0",
                                                    "trainer.validation.val_freq=0", "trainer.logging.progress_bar=false",
                                                    "trainer.logging.save_trajectories=false",
                                                    "trainer.logging.log_tensorboard=false", f"trainer.output_dir={out_dir}"])
        Path(args.out).write_text(json.dumps(res))
        return 0

    from pettingllms.utils.threads import allowed_cpus
    threads = int(args.threads) if args.threads != "auto" and int(args.threads) > 0 else allowed_cpus()
    for line in plan(args, threads):
        print(line)
    need_trl = args.only != "ours"
    print("ours:", json.dumps(_versions(sys.executable, ("torch", "transformers", "peft"))))
    py = trl_python(args, create=False) if need_trl else None
    if need_trl:
        print("TRL:", json.dumps(_versions(py, ("trl", "torch", "transformers", "peft"))) if py else
              f"not installed here; the run builds {args.trl_venv} with "
              f"{', '.join((_torch_pin(), _peft_pin(), *TRL_PINS))}")
    if args.dry_run:
        return 0
    if need_trl and py is None:
        py = trl_python(args, create=True)
        print("TRL:", json.dumps(_versions(py, ("trl", "torch", "transformers", "peft"))))

    dtype = side_dtype(args)[0]
    rates = {name: matmul_gflops(threads, name) for name in ("float32", "bfloat16")}
    gflops = rates.get(dtype) or matmul_gflops(threads, dtype)
    print(f"matmul (1024^3, {threads} threads): fp32 {rates['float32']:.1f}, bf16 {rates['bfloat16']:.1f} GFLOP/s; "
          f"both sides run {dtype}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="pettingllms-vs-trl-"))
    task_file = work / "task.json"
    task_file.write_text(json.dumps(build_task(args, threads)))
    own = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
    results: dict[str, list[dict]] = {"ours": [], "trl": [], "multi": []}
    sides = ("ours",) if args.only == "ours" else ("trl",) if args.only == "trl" else ("ours", "trl")
    procs = busy_loops(args.busy)  # one set for the whole series, as a long-running neighbour would be
    try:
        if args.busy and args.threads == "auto":
            print("waiting 60 s so that the load average sees the busy loops (trainer.threads=auto reads it)",
                  flush=True)
            time.sleep(60)
        for rnd in range(args.rounds):
            for side in sides:
                out = work / f"{side}_{rnd}.json"
                cmd = (own + ["--side", "ours", "--task", str(task_file), "--out", str(out)] if side == "ours"
                       else [py, str(TRL_SIDE), "--task", str(task_file), "--out", str(out)])
                print(f"round {rnd + 1}: {side} ...", flush=True)
                results[side].append(run_child(cmd, out, threads))
        if args.multi_agent:
            out = work / "multi.json"
            print("multi-agent quickstart ...", flush=True)
            results["multi"].append(run_child(own + ["--side", "multi", "--task", str(task_file), "--out", str(out)],
                                              out, threads))
    finally:
        stop(procs)
    print(f"--- results ({'full fine-tuning' if args.full else 'LoRA'}, busy {args.busy}, commit {_commit()})")
    summary = {side: summarize(runs, gflops, lora=not args.full, matmul_dtype=dtype) for side, runs in results.items()
               if runs and side != "multi"}
    for side in ("ours", "trl"):
        if side in summary:
            print_summary("ours" if side == "ours" else "TRL", summary[side])
    if "ours" in summary and "trl" in summary:
        print_ratios(summary["ours"], summary["trl"])
    if results["multi"]:
        multi = summarize(results["multi"], gflops, lora=True, matmul_dtype=dtype)
        print_multi(multi, results["multi"], gflops)
        summary["multi"] = multi
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "matmul_gflops": gflops, "matmul_rates": rates,
                                               "dtype": dtype, "summary": summary,
                                               "runs": results, "machine": machine(), "commit": _commit()},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
