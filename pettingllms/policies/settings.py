"""WorkerSettings: the blocks a policy worker reads (built by `trainer.assemble.worker_settings`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from pettingllms.config.schema import AlgorithmConfig, OptimConfig


@dataclass(frozen=True)
class WorkerSettings:
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)  # loss, epochs, mini-batches
    optim: OptimConfig = field(default_factory=OptimConfig)  # AdamW and its schedule (per-policy lr in the spec)
    # model.dtype: generation and the frozen LoRA base (auto: utils.precision); bf16 turns autocast on
    dtype: str = "auto"
    train_dtype: str = "float32"  # model.train_dtype: the weights that train
    gradient_checkpointing: bool = False
    micro_batch_size: int = 8  # sequences per forward/backward
    logprob_chunk: int = 1024  # tokens per logits chunk
    total_steps: int = 20  # the LR schedule's length
    temperature: float = 0.7  # rollout sampling temperature: logprobs under the sampled distribution
    seed: int = 0  # adapter init and mini-batch order
    device: str = "cpu"  # resolved trainer.device
    train_vision: bool = False  # model.train_vision: a VLM's vision tower trains (full fine-tuning)
