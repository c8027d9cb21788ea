"""Policies: the agent -> policy map (L1 / L2 / L3 / mixed) and one PolicyWorker per policy.

    policies = build_policies(mapping, settings, env.agents)   # see trainer/assemble.py
    policies.agent_policy          # {"tool": "shared", "reasoner": "shared"}
    policies.set_step(step)        # apply trainer.phases (freeze / unfreeze)
    parts = policies.split(samples)   # each sample to its agent's policy
    for name, w in policies.workers.items(): engine.update_weights(w.weight_update())
    policies.release()             # offload idle policies (policy.offload: true)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from pettingllms.policies.mapping import (MappingConfig, PolicyPlan, PolicySpec, SHARED_POLICY, resolve_policies,
                                          trainable_policies)
from pettingllms.policies.settings import WorkerSettings
from pettingllms.records import Sample

__all__ = ["MappingConfig", "PolicySet", "PolicySpec", "PolicyPlan", "SHARED_POLICY", "WorkerSettings",
           "build_policies", "resolve_policies", "trainable_policies"]


@dataclass
class PolicySet:
    workers: dict[str, Any]  # name -> PolicyWorker
    agent_policy: dict[str, str]
    phases: list[Any] = field(default_factory=list)
    untrained: frozenset[str] = frozenset()  # agents with `trainable: false`: generated, never trained on

    def trainable_at(self, step: int) -> set[str]:
        """trainer.phases at `step`, less the policies whose agents are all untrained."""
        trained = {p for a, p in self.agent_policy.items() if a not in self.untrained}
        return trainable_policies(self.phases, step, self.workers) & trained

    def set_step(self, step: int) -> set[str]:
        """Set each worker's `trainable` flag from trainer.phases; returns the trainable names."""
        on = self.trainable_at(step)
        for name, w in self.workers.items():
            w.trainable = name in on
        return on

    def split(self, samples: Iterable[Sample]) -> dict[str, list[Sample]]:
        """Samples per policy, routed by each sample's agent; untrained agents' samples are left out."""
        out: dict[str, list[Sample]] = {name: [] for name in self.workers}
        for s in samples:
            if s.agent not in self.agent_policy:
                raise ValueError(f"sample from agent '{s.agent}', which no policy serves "
                                 f"(agents: {sorted(self.agent_policy)})")
            if s.agent not in self.untrained:
                out[self.agent_policy[s.agent]].append(s)
        return out

    def release(self) -> None:
        for w in self.workers.values():
            w.release()

    def save(self, folder: str | Path) -> None:
        for name, w in self.workers.items():
            w.save(Path(folder) / name)

    def load(self, folder: str | Path) -> None:
        for name, w in self.workers.items():
            w.load(Path(folder) / name)

    def close(self) -> None:
        for w in self.workers.values():
            w.close()


def build_policies(mapping: MappingConfig, settings: WorkerSettings, agents: Sequence[str]) -> PolicySet:
    """Resolve the mapping and build the workers; LoRA policies on one base share one model."""
    import torch

    from pettingllms.policies.lora import SharedLoraBase
    from pettingllms.policies.worker import PolicyWorker, load_model
    from pettingllms.utils.models import torch_dtype
    from pettingllms.utils.precision import resolve_dtype

    plan = resolve_policies(mapping, agents)
    shared_bases: dict[str, SharedLoraBase] = {}
    workers = {}
    for name, spec in plan.specs.items():
        lora_base = None
        if spec.is_lora and spec.model_key.startswith("lora-base:"):
            lora_base = shared_bases.get(spec.model_key)
            if lora_base is None:
                base = load_model(spec.base, torch_dtype(resolve_dtype(settings.dtype, settings.device)),
                                  torch.device(settings.device))
                lora_base = SharedLoraBase(base, spec.base, torch_dtype(settings.train_dtype))
                shared_bases[spec.model_key] = lora_base
        workers[name] = PolicyWorker(spec, settings, lora_base=lora_base)
    return PolicySet(workers=workers, agent_policy=dict(plan.agent_policy), phases=list(mapping.phases),
                     untrained=plan.untrained)
