"""The pure pieces of a policy update: LR schedule, AdamW kernel choice, mini-batch plan, sample
checks and how per-role reports combine. Every backend's workers (local and verl) share them."""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from pettingllms.config.schema import AlgorithmConfig
from pettingllms.policies.mapping import PolicySpec
from pettingllms.records import Sample

ROLE_KEYS = ("loss", "grad_norm", "num_samples")  # also reported per role under trainer.role_lr
_SUMMED = ("num_samples", "num_tokens", "tokens_run", "zero_advantage_skipped", "optimizer_steps", "update_s",
           "logprob_s")
# Loss terms that are exact over the whole batch even when zero-advantage samples are not run
# (theirs is 0); the other loss metrics are means over the tokens that ran.
BATCH_LOSSES = ("loss", "pg_loss")


def combine_reports(parts: list[dict[str, float]]) -> dict[str, float]:
    """One report for several per-role passes: counts and times add up, the rest is averaged."""
    keys = {k for p in parts for k in p}
    return {k: (sum if k in _SUMMED else (lambda xs: sum(xs) / len(xs)))([p[k] for p in parts if k in p])
            for k in keys}


def lr_lambda(warmup_steps: int, total_steps: int, min_lr_ratio: float, schedule: str):
    """Linear warmup then cosine decay to min_lr_ratio (or constant), per policy update."""
    def f(s: int) -> float:
        if warmup_steps > 0 and s < warmup_steps:
            return (s + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, max(0.0, (s - warmup_steps) / span))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"trainer.optim.lr_schedule must be cosine or constant, got '{schedule}'")
    return f


def adamw_kernel(params: Sequence[Tensor]) -> dict[str, bool]:
    """AdamW's fused kernel where torch has one for these tensors (CPU and CUDA floats): one pass
    over weight, grad and both moments instead of about ten per tensor, the bulk of a full
    fine-tuning optimizer step on CPU. The update is the same formula; only rounding order differs."""
    ok = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return {"fused": True} if ok and params else {}


def check_samples(spec: PolicySpec, algo: AlgorithmConfig, samples: Sequence[Sample]) -> None:
    """Samples a policy may train on: its own agents, engine logprobs when asked for, finite advantages."""
    mine = set(spec.agents)
    for s in samples:
        if mine and s.agent not in mine:
            raise ValueError(f"policy '{spec.name}' got a sample of agent '{s.agent}'; it trains only "
                             f"on its own agents {sorted(mine)}")
        if len(s.logprobs) != len(s.response_ids) and str(algo.old_logprobs) == "engine":
            raise ValueError(f"sample of agent '{s.agent}' has {len(s.logprobs)} engine logprobs for "
                             f"{len(s.response_ids)} response tokens")
        if not math.isfinite(float(s.advantage)):
            raise ValueError(f"sample of agent '{s.agent}' has a non-finite advantage {s.advantage}")


def mini_batch_plan(n: int, algo: AlgorithmConfig, seed: int, step: int) -> list[list[int]]:
    """Sample indices of each optimizer step of one update: ppo_epochs x mini_batches, each epoch a
    fresh seeded permutation dealt round-robin. Every backend trains on exactly these mini-batches."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + int(step))
    n_mini = max(1, min(int(algo.mini_batches), n))
    plan = []
    for _ in range(max(1, int(algo.ppo_epochs))):
        perm = torch.randperm(n, generator=gen).tolist()
        plan += [perm[i::n_mini] for i in range(n_mini)]
    return plan
