"""A policy worker's state on disk: its weights (an HF model folder for full fine-tuning, a peft
adapter folder for LoRA), optimizer, LR scheduler and a small `policy.json`.

Used by `PolicyWorker.save/load` (checkpoints, `trainer.checkpoint.init_from`) and by its offload
(the same files in a private temp dir).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)


def save_worker_state(worker: Any, folder: Path, with_tokenizer: bool = False) -> None:
    """Write the worker's weights, optimizer, scheduler and meta into `folder`. `with_tokenizer`
    makes a full model's folder a complete HF folder (checkpoints; offload does not need it)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = worker.spec
    if spec.is_lora:
        worker._lora_base.save_adapter(worker.name, folder / "adapter")
    else:
        worker.model.save_pretrained(str(folder / "model"))
    if worker.optimizer is not None:  # none for a policy whose agents are all untrained
        torch.save(worker.optimizer.state_dict(), folder / "optimizer.pt")
        torch.save(worker.scheduler.state_dict(), folder / "scheduler.pt")
    meta = {"name": worker.name, "kind": "lora" if spec.is_lora else "full",
            "base": spec.base, "updates": worker.updates, "trainable": worker.trainable}
    (folder / "policy.json").write_text(json.dumps(meta, indent=1))
    if with_tokenizer and not spec.is_lora:
        try:
            from pettingllms.utils.models import load_tokenizer
            load_tokenizer(spec.base).save_pretrained(str(folder / "model"))
        except Exception as e:  # noqa: BLE001 - the weights are saved all the same
            log.warning("policy %s: no tokenizer saved in %s (loading the tokenizer of %s "
                        "failed: %s: %s); the folder holds the weights but is not a "
                        "complete HF model folder", worker.name, folder / "model",
                        spec.base, type(e).__name__, str(e)[:200])


@torch.no_grad()
def _merge_adapter_into(worker: Any, adapter: Path) -> None:
    """Set a full model's weights to its base with a saved peft adapter merged in."""
    from peft import PeftModel

    from pettingllms.utils.models import load_causal_lm

    base = load_causal_lm(worker.spec.base, worker.train_dtype, device=str(worker.device))
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    worker.model.load_state_dict(merged.state_dict(), strict=False)


def _is_tied(key: str, own: dict[str, Tensor], saved: dict[str, Tensor]) -> bool:
    """A weight the checkpoint omits because it shares storage with one it has."""
    ptr = own[key].data_ptr()
    return any(k in saved and own[k].data_ptr() == ptr for k in own if k != key)


def _load_full_weights(worker: Any, folder: Path) -> None:
    from safetensors.torch import load_file

    state = {}
    for f in sorted((folder / "model").glob("*.safetensors")):
        state.update(load_file(str(f)))
    own = worker.model.state_dict()
    wrong = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    missing = [k for k in own if k not in state and not _is_tied(k, own, state)]
    unexpected = [k for k in state if k not in own]
    if wrong or missing or unexpected:
        raise ValueError(f"checkpoint at {folder} does not fit '{worker.name}': shape mismatch "
                         f"{wrong[:3]}, missing {missing[:3]}, unexpected {unexpected[:3]}")
    worker.model.load_state_dict(state, strict=False)


def load_worker_state(worker: Any, folder: Path, weights_only: bool = False) -> None:
    """Read what `save_worker_state` wrote. `weights_only` (trainer.checkpoint.init_from) leaves
    the optimizer, schedule and update count fresh; a LoRA checkpoint then also starts a full
    fine-tuned policy (its adapter merged into the base)."""
    meta = json.loads((folder / "policy.json").read_text())
    kind = "lora" if worker.spec.is_lora else "full"
    if weights_only and meta.get("kind") == "lora" and kind == "full":
        _merge_adapter_into(worker, folder / "adapter")  # e.g. a LoRA cold start, full-FT RL
        return
    if meta.get("kind") != kind:
        raise ValueError(f"checkpoint at {folder} is a {meta.get('kind')} policy; '{worker.name}' is {kind}")
    if worker.spec.is_lora:
        worker._lora_base.load_adapter(worker.name, folder / "adapter")
    else:
        _load_full_weights(worker, folder)
    if weights_only:
        return
    worker.updates = int(meta.get("updates", 0))
    if meta.get("backend") == "verl":  # its optimizer state is in verl's shards: weights only (evaluation)
        return
    if worker.optimizer is None or not (folder / "optimizer.pt").exists():  # an untrained policy's: none
        return
    worker.optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
    worker.scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=True))
