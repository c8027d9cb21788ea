"""LoRA plumbing: one frozen base shared by several named adapters (L2).

The base weights are never written: no merge/unmerge in place (a bf16 round trip
would change them). Merged weights for the rollout engine are computed out of place
as W + scaling * B @ A in fp32, then cast to the generation dtype.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import torch
from torch import Tensor

from pettingllms.config.schema import LoraConfig
from pettingllms.rollout.engines.weights import (ADAPTER_WEIGHTS, LoraFactor, WeightUpdate, plain_peft_config,
                                                 write_adapter)
from pettingllms.utils.vision import is_vision_config


def _peft_config(lora: LoraConfig, vision: bool = False):
    from peft import LoraConfig as PeftLoraConfig
    # A VLM's vision tower has layers named like the language model's (gate_proj, ...): adapters
    # go on the language model only.
    extra = {"exclude_modules": r".*\bvisual\b.*"} if vision else {}
    return PeftLoraConfig(
        r=int(lora.rank), lora_alpha=int(lora.alpha), lora_dropout=float(lora.dropout),
        target_modules=list(lora.target_modules), bias="none", task_type="CAUSAL_LM", **extra)


def adapter_of(param_name: str) -> str | None:
    """The adapter a peft parameter belongs to: the path component right after a `lora_*` module
    (`...q_proj.lora_A.<adapter>.weight`), matched exactly, so an adapter named like a module
    (`model`, `layers`) owns only its own weights. None for base weights."""
    parts = param_name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("lora_"):
            return parts[i + 1]
    return None


class SharedLoraBase:
    """One base model in memory and a peft model holding one adapter per policy."""

    def __init__(self, base_model: torch.nn.Module, base_path: str, train_dtype: torch.dtype):
        for p in base_model.parameters():
            p.requires_grad_(False)
        self.base_path = base_path
        self.train_dtype = train_dtype
        self.peft_model = None  # created with the first adapter
        self._base_model = base_model
        self.adapters: list[str] = []

    def add_adapter(self, name: str, lora: LoraConfig, seed: int) -> None:
        from peft import get_peft_model
        if name in self.adapters:
            raise ValueError(f"adapter '{name}' already exists on {self.base_path}")
        cfg = _peft_config(lora, is_vision_config(self._base_model.config))
        # Seed adapter init from (seed, name) without disturbing the caller's RNG stream.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            if self.peft_model is None:
                self.peft_model = get_peft_model(self._base_model, cfg, adapter_name=name)
            else:
                self.peft_model.add_adapter(name, cfg)
        for _, p in self.adapter_params(name):
            p.data = p.data.to(self.train_dtype)  # fp32 adapters over a bf16 base
        self.adapters.append(name)

    def adapter_params(self, name: str) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.peft_model.named_parameters() if adapter_of(n) == name]

    def base_params(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.peft_model.named_parameters() if adapter_of(n) is None]

    def activate(self, name: str, train: bool) -> None:
        """Make `name` the active adapter; only its weights require grad."""
        self.peft_model.set_adapter(name)
        for other in self.adapters:
            for _, p in self.adapter_params(other):
                p.requires_grad_(train and other == name)

    def merged_weights(self, name: str, dtype: torch.dtype) -> dict[str, Tensor]:
        """Plain-model state dict (HF names) of base + adapter `name`, computed out of place."""
        from peft.tuners.lora import LoraLayer
        base = self.peft_model.get_base_model()
        merged: dict[str, Tensor] = {}
        for mod_name, mod in base.named_modules():
            if not isinstance(mod, LoraLayer):
                continue
            w = mod.get_base_layer().weight
            if name in mod.lora_A:
                factor = LoraFactor(mod.lora_A[name].weight, mod.lora_B[name].weight, float(mod.scaling[name]),
                                    bool(getattr(mod, "fan_in_fan_out", False)))
                merged[f"{mod_name}.weight"] = factor.merge(w.detach(), torch.empty(w.shape, dtype=dtype, device=w.device))
        out: dict[str, Tensor] = {}
        for key, value in base.state_dict().items():
            if ".lora_" in key:
                continue
            plain = key.replace(".base_layer.", ".")
            out[plain] = merged.get(plain, value.detach().to(dtype) if value.is_floating_point() else value)
        return out

    def base_weights(self) -> dict[str, Tensor]:
        """Every frozen weight of the base model by plain-model name: the adapted layers' base
        weights (what an engine merges adapters into) and the rest (embeddings, norms), which no
        adapter changes. Never written here."""
        out: dict[str, Tensor] = {}
        for name, p in self.peft_model.get_base_model().named_parameters():  # tied weights once
            if ".lora_" in name or "modules_to_save" in name or "original_module" in name or p.requires_grad:
                continue
            out[name.replace(".base_layer.", ".")] = p.detach()
        return out

    def adapter_state(self, name: str) -> tuple[dict[str, Tensor], dict]:
        """Adapter `name` as peft saves it: (state dict, adapter_config.json content)."""
        from peft import get_peft_model_state_dict
        sd = get_peft_model_state_dict(self.peft_model, adapter_name=name, save_embedding_layers=False)
        tensors = {k: v.detach().clone().cpu() for k, v in sd.items()}
        return tensors, plain_peft_config(self.peft_model.peft_config[name])

    def save_adapter(self, name: str, folder: Path) -> None:
        """A standard peft adapter folder for this one adapter (loadable by PeftModel.from_pretrained)."""
        tensors, config = self.adapter_state(name)
        write_adapter(WeightUpdate(name, "lora", tensors, config), folder)

    def load_adapter(self, name: str, folder: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file
        path = folder / ADAPTER_WEIGHTS
        if not path.exists():
            raise FileNotFoundError(f"no adapter weights at {path}")
        saved_cfg = json.loads((folder / "adapter_config.json").read_text())
        mine = self.peft_model.peft_config[name]
        if int(saved_cfg.get("r", -1)) != int(mine.r):
            raise ValueError(f"adapter at {folder} has rank {saved_cfg.get('r')}, policy '{name}' has {mine.r}")
        sd = load_file(str(path))
        result = set_peft_model_state_dict(self.peft_model, sd, adapter_name=name)
        unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
        missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k and f".{name}." in k]
        if unexpected or missing:
            raise ValueError(f"adapter at {folder} does not fit policy '{name}': "
                             f"unexpected {unexpected[:3]}, missing {missing[:3]}")
        for _, p in self.adapter_params(name):
            p.data = p.data.to(self.train_dtype)
