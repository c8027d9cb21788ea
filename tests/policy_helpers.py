"""Shared helpers for the policy tests: small configs and random samples."""
from __future__ import annotations

from typing import Any

import torch
from omegaconf import OmegaConf

from pettingllms.config.validate import validate
from pettingllms.records import Sample

TINY = "tiny:policies-a"
VOCAB_LIMIT = 1000  # token ids stay below this, so every test model can embed them


def make_cfg(extra: dict[str, Any] | None = None, lora: bool = False, dtype: str = "float32",
             train_dtype: str = "float32"):
    base = {
        "seed": 0,
        "model": {"path": TINY, "dtype": dtype, "train_dtype": train_dtype,
                  "lora": {"enabled": lora, "rank": 4, "alpha": 8}},
        "trainer": {"lr": 1e-2, "micro_batch_size": 2, "logprob_chunk": 5, "total_steps": 4,
                    "grad_clip": 1.0},
        "algorithm": {"old_logprobs": "recompute"},
        "rollout": {"sampling": {"temperature": 1.0}},
    }
    return validate(OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(extra or {})))


def make_samples(agent: str, advantages: list[float], seed: int = 0, vocab: int = VOCAB_LIMIT) -> list[Sample]:
    """Random prompt/response ids of varied lengths, engine logprobs of the right length."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, adv in enumerate(advantages):
        p = int(torch.randint(3, 9, (1,), generator=g))
        r = int(torch.randint(2, 8, (1,), generator=g))
        out.append(Sample(
            agent=agent, turn=0, problem_id=f"p{i}", episode_id=f"e{i}",
            prompt_ids=torch.randint(5, vocab, (p,), generator=g).tolist(),
            response_ids=torch.randint(5, vocab, (r,), generator=g).tolist(),
            logprobs=(-torch.rand(r, generator=g) * 5).tolist(), candidate=i, advantage=float(adv)))
    return out


def snapshot(named_params) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in named_params}


def all_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def any_changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


def update_all(policies: Any, samples: list[Sample], step: int) -> dict[str, dict[str, float]]:
    """What the trainer loop does with a batch: apply trainer.phases, then update every policy on
    its own agents' samples (a frozen policy reports {"frozen": 1.0})."""
    policies.set_step(step)
    return {name: policies.workers[name].update(part, step) for name, part in policies.split(samples).items()}
