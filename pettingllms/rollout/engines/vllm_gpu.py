"""Where and how a vLLM engine runs on GPUs: the GPUs it takes (the one placement rule of
`pettingllms.utils.placement.engine_gpu_ids`: engines spread over the visible GPUs, off the
one this process trains on when there are others), `rollout.vllm.tensor_parallel_size`, and
`rollout.vllm.enforce_eager=auto` (eager on CPU, CUDA graphs on GPUs).

vLLM 0.31's single-process executor takes local rank 0 unless `device_ids` names the GPUs
(`EngineArgs.device_ids`, indices into CUDA_VISIBLE_DEVICES): without it every engine of a run
sat on cuda:0 next to the trainer's rank 0.
"""
from __future__ import annotations

from typing import Any, Optional

from pettingllms.errors import ConfigError
from pettingllms.utils.placement import engine_gpu_ids


def gpu_kwargs(on_cuda: bool, n_gpus: int, enforce_eager: Any, tp: int, index: int, n_engines: int,
               trainer_gpu: Optional[int] = None) -> dict[str, Any]:
    """LLM(...) keyword arguments for engine `index` of `n_engines` in this process."""
    eager = (not on_cuda) if str(enforce_eager) == "auto" else bool(enforce_eager)
    out: dict[str, Any] = {"enforce_eager": eager}
    if not on_cuda:
        if tp > 1:
            raise ConfigError(f"rollout.vllm.tensor_parallel_size={tp} needs GPUs (this vLLM runs on the CPU)")
        return out
    ids = engine_gpu_ids(n_gpus, n_engines, tp, trainer_gpu)[index]
    out.update(tensor_parallel_size=tp, device_ids=ids)
    return out


def engine_kwargs(options: Any, index: int, n_engines: int, trainer_gpu: Optional[int]) -> dict[str, Any]:
    """`gpu_kwargs` for this process's vLLM platform and visible GPUs."""
    from vllm.platforms import current_platform

    on_cuda = bool(current_platform.is_cuda())
    n_gpus = 0
    if on_cuda:
        import torch
        n_gpus = torch.cuda.device_count()
    return gpu_kwargs(on_cuda, n_gpus, options.enforce_eager, int(options.tensor_parallel_size), index,
                      n_engines, trainer_gpu)
