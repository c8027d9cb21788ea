"""The weight-sync record: what a policy worker hands the rollout engine after an update.

Only what changed travels: for a LoRA policy the adapter tensors (peft state-dict names, as in
`adapter_model.safetensors`) and its peft config (the content of `adapter_config.json`); for
full fine-tuning the full weights (HF names) in the generation dtype, either as tensors (an
in-process policy worker) or as `path`, a folder holding `model.safetensors` that the policy's
own workers wrote (trainer.backend=verl: the full weights never pass through the driver; every
engine reads the file itself). Each engine applies it its own way: the HF engine merges the
adapter into its copy of the base, vLLM loads it as a `LoRARequest`, a Ray worker receives it
once through the object store.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor

PEFT_PREFIX = "base_model.model."  # peft's prefix in front of the plain model's module names
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
FULL_WEIGHTS = "model.safetensors"  # in a full update's `path` folder


@dataclass
class WeightUpdate:
    policy: str
    kind: str  # "lora" (adapter tensors only) | "full" (every weight)
    tensors: dict[str, Tensor]
    lora_config: dict[str, Any] = field(default_factory=dict)  # peft adapter_config.json (lora only)
    version: int = 0  # the policy's update count; engines name adapter versions with it
    path: str = ""  # full only: a folder with FULL_WEIGHTS instead of tensors (read by each engine)

    def __post_init__(self) -> None:
        if self.kind not in ("lora", "full"):
            raise ValueError(f"WeightUpdate.kind must be 'lora' or 'full', got {self.kind!r}")
        if self.kind == "lora" and not self.lora_config:
            raise ValueError(f"LoRA update of policy {self.policy!r} carries no lora_config")
        if self.path and (self.kind != "full" or self.tensors):
            raise ValueError(f"update of policy {self.policy!r}: a path replaces the tensors of a full update only")

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def plain_peft_config(peft_config: Any) -> dict[str, Any]:
    """peft's LoraConfig as the JSON-able dict peft writes to adapter_config.json."""
    out = {}
    for k, v in peft_config.to_dict().items():
        if isinstance(v, set):
            v = sorted(v)
        elif hasattr(v, "value"):  # enums (peft_type, task_type)
            v = v.value
        out[k] = v
    return out


def lora_scaling(lora_config: dict[str, Any]) -> float:
    r, alpha = int(lora_config["r"]), float(lora_config["lora_alpha"])
    return alpha / math.sqrt(r) if lora_config.get("use_rslora") else alpha / r


def lora_delta(a: Tensor, b: Tensor, scaling: float, fan_in_fan_out: bool = False) -> Tensor:
    """The fp32 weight delta scaling * B @ A of one LoRA layer (out x in, like the base weight).
    The scaling multiplies B (out x r) rather than the product (out x in): one pass less over a
    weight-sized tensor, and the same numbers for the usual power-of-two alpha / r."""
    delta = (b.detach().float() * float(scaling)) @ a.detach().float()
    return delta.T if fan_in_fan_out else delta


@dataclass(frozen=True)
class LoraFactor:
    """One LoRA layer's factors; its delta is computed only when asked for (one fp32 weight)."""
    a: Tensor
    b: Tensor
    scaling: float
    fan_in_fan_out: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        """The base weight's shape (out x in, or in x out with fan_in_fan_out)."""
        out_in = (int(self.b.shape[0]), int(self.a.shape[1]))
        return out_in[::-1] if self.fan_in_fan_out else out_in

    def delta(self) -> Tensor:
        return lora_delta(self.a, self.b, self.scaling, self.fan_in_fan_out)

    def merge(self, base: Tensor, out: Tensor, kernel: Any = None) -> Tensor:
        """out = base + delta, summed in fp32 and rounded to out's dtype (out may be base). With
        `kernel` (`hf_runtime.cpu_kernels.load()`) and bf16 CPU weights: one pass in our kernel (its own
        summation order over the rank); else torch's fp32 delta. Engines and trainers that must
        agree bit for bit pass the same `kernel`."""
        if kernel is not None and not self.fan_in_fan_out and base.dtype == out.dtype == torch.bfloat16 \
                and base.device.type == out.device.type == "cpu" and base.is_contiguous() and out.is_contiguous():
            from pettingllms.rollout.engines.hf_runtime import cpu_kernels
            b = (self.b.detach().float() * float(self.scaling)).contiguous()
            cpu_kernels.lora_merge(kernel, base, b, self.a.detach().float().contiguous(), out)
            return out
        # The delta is made on the weight's device: factors that arrive on the CPU do not make a
        # weight-sized fp32 delta there and copy it over every step (on CPU: the same numbers).
        delta = lora_delta(self.a.to(base.device), self.b.to(base.device), self.scaling, self.fan_in_fan_out)
        return out.copy_(delta.add_(base))


def lora_factors(update: WeightUpdate) -> dict[str, LoraFactor]:
    """Plain-model weight name -> its LoRA factors, for engines that merge adapters themselves."""
    cfg = update.lora_config
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern") or cfg.get("use_dora"):
        raise ValueError(f"policy {update.policy!r}: merging needs a uniform LoRA (no rank/alpha "
                         "patterns, no DoRA)")
    scaling, fifo = lora_scaling(cfg), bool(cfg.get("fan_in_fan_out"))
    out = {}
    for key, a in update.tensors.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key[:-len(".lora_A.weight")]
        b = update.tensors[module + ".lora_B.weight"]
        name = module[len(PEFT_PREFIX):] if module.startswith(PEFT_PREFIX) else module
        out[name + ".weight"] = LoraFactor(a, b, scaling, fifo)
    if not out:
        raise ValueError(f"LoRA update of policy {update.policy!r} holds no lora_A/lora_B tensors")
    return out


def lora_deltas(update: WeightUpdate) -> dict[str, Tensor]:
    """Plain-model weight name -> fp32 delta (every delta at once; `lora_factors` for one at a time)."""
    return {name: f.delta() for name, f in lora_factors(update).items()}


def write_adapter(update: WeightUpdate, folder: str | Path) -> Path:
    """A standard peft adapter folder (what vLLM's LoRARequest and PeftModel load)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in update.tensors.items()}, str(folder / ADAPTER_WEIGHTS))
    (folder / ADAPTER_CONFIG).write_text(json.dumps(update.lora_config, indent=1, default=list))
    return folder


def read_adapter(folder: str | Path, policy: str, version: int = 0) -> WeightUpdate:
    """A saved peft adapter folder (write_adapter's, or a checkpoint's `adapter/`) as a LoRA update."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / ADAPTER_WEIGHTS).is_file() or not (folder / ADAPTER_CONFIG).is_file():
        raise FileNotFoundError(f"{folder} is not a peft adapter folder (needs {ADAPTER_WEIGHTS} and {ADAPTER_CONFIG})")
    return WeightUpdate(policy, "lora", load_file(str(folder / ADAPTER_WEIGHTS)),
                        json.loads((folder / ADAPTER_CONFIG).read_text()), version=version)


def to_dtype(tensors: dict[str, Tensor], dtype: torch.dtype) -> dict[str, Tensor]:
    """Detached copies; floating tensors cast to `dtype`."""
    return {k: (v.detach().to(dtype).clone() if v.is_floating_point() else v.detach().clone())
            for k, v in tensors.items()}


def write_full_weights(tensors: dict[str, Tensor], folder: str | Path, dtype: torch.dtype) -> Path:
    """`folder`/model.safetensors with the floating tensors in `dtype`. Written under a temporary
    name and renamed, so a reader on any node sees the whole file or none."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (FULL_WEIGHTS + ".partial")
    # to_dtype copies each tensor: tied weights (embedding / lm_head) would share storage, which
    # safetensors refuses
    save_file({k: v.contiguous() for k, v in to_dtype(tensors, dtype).items()}, str(tmp))
    os.replace(tmp, folder / FULL_WEIGHTS)
    return folder


def full_weights(update: WeightUpdate) -> Iterator[tuple[str, Tensor]]:
    """(HF name, tensor) of a full update: its tensors, or streamed one at a time from its file."""
    if not update.path:
        yield from update.tensors.items()
        return
    yield from read_full_weights(update.path, update.policy)


def read_full_weights(folder: str | Path, policy: str = "") -> Iterator[tuple[str, Tensor]]:
    from safetensors import safe_open

    file = Path(folder) / FULL_WEIGHTS
    if not file.is_file():
        raise FileNotFoundError(
            f"weight update of policy {policy!r}: {file} is not visible here; the policy's workers "
            "write full weights there for the engines to read, so it must be on a file system "
            "shared by every node (trainer.verl.sync_dir)")
    with safe_open(str(file), framework="pt", device="cpu") as f:
        for name in f.keys():
            yield name, f.get_tensor(name)
