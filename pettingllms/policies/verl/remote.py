"""The Ray-side worker: verl's TrainingWorker plus the few calls our policy needs.

Importing this module in a Ray worker runs `cpu.register()` first (through
VERL_USE_EXTERNAL_MODULES, set in the worker env), so verl finds the CPU platform
before its engine asks for one. Everything else is verl's own TrainingWorker:
`train_batch`, `infer_batch`, `set_loss_fn`, `save_checkpoint`, `load_checkpoint`.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Optional

import torch
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import TrainingWorker

from pettingllms.policies.verl import cpu
from pettingllms.utils.net import is_loopback


def _init_process_group() -> None:
    """verl asks for "cpu:gloo,<device>:<backend>"; on CPU that is "cpu:gloo,cpu:gloo", which
    torch rejects, so the CPU platform starts plain "gloo" first (verl then reuses it)."""
    if cpu.active() and not torch.distributed.is_initialized():
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        torch.distributed.init_process_group(backend="gloo", rank=rank, world_size=world,
                                             store=_loopback_store(rank, world))


_listener: list[socket.socket] = []  # rank 0's rendezvous socket, open as long as the store


def _loopback_store(rank: int, world: int) -> Optional[torch.distributed.TCPStore]:
    """torch's rendezvous store (TCPStore, no authentication) listens on every interface; when
    MASTER_ADDR is loopback (the private Ray, docs/security.md) rank 0 hands it a socket bound
    to loopback instead. None (torch's own env:// rendezvous) for any other address."""
    from torch.distributed.constants import default_pg_timeout

    addr, port = os.environ.get("MASTER_ADDR", ""), int(os.environ.get("MASTER_PORT", "0"))
    if not is_loopback(addr) or not port:
        return None
    fd = None
    if rank == 0:
        sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr.strip("[]"), port))
        sock.listen(128)
        _listener.append(sock)
        fd = sock.fileno()
    return torch.distributed.TCPStore(addr, port, world, rank == 0, timeout=default_pg_timeout,
                                      multi_tenant=True, master_listen_fd=fd)


class PolicyTrainingWorker(TrainingWorker):
    def __init__(self, config: Any):
        cpu.patch_engine()
        _init_process_group()
        super().__init__(config)

    def _full_state(self) -> dict[str, torch.Tensor]:
        """Full (unsharded) weights on CPU; a collective: every rank calls it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        return get_model_state_dict(self.engine.module,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    @staticmethod
    def _adapter_state(model) -> dict[str, torch.Tensor] | None:
        """Only the LoRA parameters, unsharded on CPU (a collective: every rank gathers the same
        ones in the same order), where FSDP2 shards them as DTensors; None elsewhere (FSDP1's flat
        parameters), where the whole state is gathered and the adapter taken from it. Gathering
        the whole model every step to keep the adapter moved the base's bytes to rank 0 for nothing."""
        from torch.distributed.tensor import DTensor

        params = [(n, p) for n, p in model.named_parameters() if "lora_" in n]
        if not params or not all(isinstance(p, DTensor) for _, p in params):
            return None
        return {n: p.full_tensor().detach().cpu() for n, p in params}

    def _peft_model(self):
        module = self.engine.module
        return getattr(module, "_fsdp_wrapped_module", module)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def trained_weights(self) -> tuple[dict[str, torch.Tensor], dict] | None:
        """What this policy trains: (LoRA adapter in peft names, its adapter_config) or (all weights
        in HF names, {}). Rank 0 returns it; the others return None."""
        model = self._peft_model()
        with self.engine.eval_mode(disable_auto_offload=False):
            state = self._adapter_state(model) if hasattr(model, "peft_config") else None
            if state is None:
                state = self._full_state()
        if torch.distributed.get_rank() != 0:
            return None
        if hasattr(model, "peft_config"):
            from peft import get_peft_model_state_dict

            from pettingllms.rollout.engines.weights import plain_peft_config
            adapter = get_peft_model_state_dict(model, state_dict=state)
            return ({k: v.detach().clone() for k, v in adapter.items()},
                    plain_peft_config(model.peft_config["default"]))
        return {k: v.detach().clone() for k, v in state.items()}, {}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def write_full_weights(self, folder: str, dtype: str) -> str | None:
        """Full fine-tuning's engine sync: rank 0 writes every weight (HF names, engine dtype) to
        `folder`/model.safetensors, which the engines read themselves; the driver gets the path."""
        from pettingllms.rollout.engines import weights
        from pettingllms.utils.models import torch_dtype

        with self.engine.eval_mode(disable_auto_offload=False):
            state = self._full_state()
        if torch.distributed.get_rank() != 0:
            return None
        return str(weights.write_full_weights(state, folder, torch_dtype(dtype)))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_pretrained(self, folder: str) -> None:
        """A plain HF model folder (full fine-tuning) or a peft adapter folder (LoRA)."""
        with self.engine.eval_mode(disable_auto_offload=False):
            state = self._full_state()
        if torch.distributed.get_rank() != 0:
            return None
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        model = self._peft_model()
        if hasattr(model, "peft_config"):
            from peft import get_peft_model_state_dict

            from pettingllms.rollout.engines.weights import WeightUpdate, plain_peft_config, write_adapter
            adapter = get_peft_model_state_dict(model, state_dict=state)
            write_adapter(WeightUpdate("export", "lora", adapter, plain_peft_config(model.peft_config["default"])), out)
        else:
            model.save_pretrained(str(out), state_dict=state)
        (out / "exported_by.json").write_text(json.dumps({"backend": "verl", "world_size":
                                                         torch.distributed.get_world_size()}))
        return None
