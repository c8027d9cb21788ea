"""Policy workers on verl's FSDP engine (trainer.backend=verl).

    cluster = RayCluster.start(settings)          # local Ray, or join trainer.verl.ray_address
    policies = build_verl_policies(mapping, settings, agents, cluster)   # PolicySet of VerlPolicyWorkers
(`trainer.assemble.verl_policy_set` builds both from the run config.)

Levels: L1 one worker group; L3 one worker group per policy; L2 (per_agent_lora) one worker
group per adapter, each over its own frozen copy of the base. All groups of a run share one
Ray resource pool (colocated, like verl's actor/ref), with a name prefix per policy.
`cpu.py` is the CPU platform that lets this run on CPU (CI) with gloo.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Sequence

__all__ = ["build_verl_policies"]


def build_verl_policies(mapping: Any, settings: Any, agents: Sequence[str], cluster: Any,
                        sync_dir: Optional[Path] = None) -> Any:
    """`sync_dir`: where full fine-tuned policies write their weights for the engines (None: a
    folder on this node)."""
    from pettingllms.policies import PolicySet, resolve_policies
    from pettingllms.policies.verl.worker import VerlPolicyWorker

    plan = resolve_policies(mapping, agents)
    workers = {}
    try:
        for i, (name, spec) in enumerate(plan.specs.items()):
            prefix = f"pl{i}{re.sub(r'[^A-Za-z0-9]', '', name)[:16]}_"  # distinct Ray actor names per policy
            workers[name] = VerlPolicyWorker(spec, settings, cluster, name_prefix=prefix,
                                             colocate=len(plan.specs), sync_dir=sync_dir)
    except BaseException:
        for w in workers.values():
            w.close()
        raise
    return PolicySet(workers=workers, agent_policy=dict(plan.agent_policy), phases=list(mapping.phases),
                     untrained=plan.untrained)
