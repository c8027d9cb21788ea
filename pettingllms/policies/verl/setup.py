"""Ray and verl configuration for trainer.backend=verl.

`RayCluster` decides where verl's workers run (device, ranks per node, nodes) and the
worker env that carries the CPU platform into them. `training_worker_config` maps our
typed config onto verl's TrainingWorkerConfig; every GPU/CPU difference is a value of
`trainer.verl`, `trainer.n_gpus_per_node` or `trainer.nnodes`.
"""
from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pettingllms.config.schema import VerlConfig
from pettingllms.errors import ConfigError
from pettingllms.policies.mapping import PolicySpec
from pettingllms.policies.settings import WorkerSettings
from pettingllms.policies.verl import cpu
from pettingllms.utils.placement import VerlAsk, attention_for, check_verl, resolve_verl_device
from pettingllms.utils.private_ray import start_ray, stop_ray

log = logging.getLogger(__name__)

_PORTS = (20000, 32768)  # Ray's worker ports end at 19999; Linux's ephemeral ports start at 32768
_PORT_SPAN = 500
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding `pettingllms/`


@dataclass(frozen=True)
class VerlSettings:
    """What verl's workers read (built by `trainer.assemble.verl_settings`): the local worker's
    settings, the `trainer.verl` block, the ranks per node and nodes, and `trainer.device` as set."""
    worker: WorkerSettings
    verl: VerlConfig
    n_gpus_per_node: int = 1
    nnodes: int = 1
    device: str = "auto"  # auto | cpu | cuda[:N], unresolved: auto follows the Ray cluster's GPUs


@dataclass
class RayCluster:
    device: str  # "cpu" or "cuda"
    n_per_node: int
    nnodes: int
    owns_ray: bool = False
    worker_env: dict[str, str] = field(default_factory=dict)
    colocate: int = 1  # worker groups (policies) sharing each rank's bundle
    place_timeout_s: float = 60.0
    start_timeout_s: float = 900.0
    _pool: Any = None

    def resource_pool(self, colocate: int) -> Any:
        """One pool for every policy's worker group: each rank's bundle is shared by `colocate`
        groups (verl's colocation of actor/ref/critic), so N policies need no N x the devices."""
        from verl.single_controller.ray import RayResourcePool

        from pettingllms.utils.ray_waits import place_verl_pool

        if self._pool is None:
            ask = self.ask(colocate)
            pool = RayResourcePool(process_on_nodes=self.process_on_nodes, use_gpu=self.use_gpu,
                                   name_prefix="pettingllms_", max_colocate_count=ask.colocate)
            # Our placement groups, as verl makes them, but ready within a bound (verl waits forever).
            pool.pgs = place_verl_pool(ask, pool.name_prefix, self.place_timeout_s, "trainer.verl.place_timeout_s")
            self._pool = pool
        return self._pool

    def ask(self, colocate: int = 0) -> VerlAsk:
        return VerlAsk(self.n_per_node, self.nnodes, max(1, colocate, self.colocate), self.use_gpu)

    @staticmethod
    def master_port_range() -> list[int]:
        """Where a worker group's rank 0 looks for its process-group port (verl scans up from the
        first free one, on rank 0's node). Below the kernel's ephemeral range: verl's default binds
        port 0, closes it, and the workers bind it seconds later, by which time Ray's own outgoing
        connections may have taken it (EADDRINUSE in CI). Above Ray's worker ports (10002-19999).
        The start is drawn from the OS, not the run's seeded RNG, so that two runs with one seed on
        one node do not scan from the same port."""
        start = _PORTS[0] + random.SystemRandom().randrange(_PORTS[1] - _PORTS[0] - _PORT_SPAN)
        return [start, start + _PORT_SPAN]

    @property
    def use_gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def world_size(self) -> int:
        return self.n_per_node * self.nnodes

    @property
    def process_on_nodes(self) -> list[int]:
        return [self.n_per_node] * self.nnodes

    @staticmethod
    def remote(cls: type) -> Any:
        import ray
        return ray.remote(cls)

    @classmethod
    def start(cls, settings: VerlSettings, colocate: int = 1) -> "RayCluster":
        """Join (trainer.verl.ray_address) or start a local Ray, and pick the device (trainer.device:
        its type; auto is cuda when the Ray cluster has a GPU). `colocate`: the worker groups (one
        per policy) sharing each rank's bundle. Checks verl's whole ask against the cluster's nodes
        before anything is placed (ConfigError, one line)."""
        from pettingllms.utils.ray_waits import cluster_nodes

        vc = settings.verl
        n, nodes = int(settings.n_gpus_per_node), int(settings.nnodes)
        if n < 1 or nodes < 1:
            raise ConfigError(f"trainer.n_gpus_per_node ({n}) and trainer.nnodes ({nodes}) must be >= 1")
        device = str(settings.device)
        if device != "auto":  # cuda:N places the HF engine; verl places its ranks on the cluster's GPUs
            device = _device_type(device)
        # Nothing started when Ray already runs in this process. A private Ray gets logical CPUs for
        # every bundle (colocate per rank, verl's ask); the machine's cores are shared by all.
        # Workers' logs reach the console (log_to_driver).
        owns = start_ray(str(vc.ray_address) or None, num_cpus=VerlAsk(n, nodes, max(1, colocate)).local_cpus(),
                         log_to_driver=True, setting="trainer.verl.ray_address")
        try:
            found = cluster_nodes()
            device = resolve_verl_device(device, sum(x.get("GPU", 0.0) for x in found))
            check_verl(VerlAsk(n, nodes, max(1, colocate), device != "cpu"), found, str(settings.device))
        except BaseException:
            if owns:
                stop_ray()
            raise
        if device == "cpu" and nodes > 1:
            log.warning("trainer.backend=verl on CPU across %d nodes: gloo over the network, slow", nodes)
        env = {"PYTHONPATH": os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")) if p),
               "TOKENIZERS_PARALLELISM": "false"}
        if device == "cpu":
            env.update(cpu.worker_env(True))
            env["VERL_ENGINE_DEVICE"] = "cuda"  # verl registers its FSDP engine under cuda/npu only
            env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
            cpu.activate_here(True)
        return cls(device=device, n_per_node=n, nnodes=nodes, owns_ray=owns, worker_env=env, colocate=max(1, colocate),
                   place_timeout_s=float(vc.place_timeout_s), start_timeout_s=float(vc.start_timeout_s))

    def shutdown(self) -> None:
        if self._pool is not None and self._pool.pgs:
            from ray.util import remove_placement_group
            for pg in self._pool.pgs:
                remove_placement_group(pg)
        self._pool = None
        if self.owns_ray:
            stop_ray()
            self.owns_ray = False


def _device_type(name: str) -> str:
    import torch

    try:
        kind = torch.device(name).type
    except RuntimeError:
        kind = name
    if kind not in ("cpu", "cuda"):
        raise ConfigError(f"trainer.device={name}: trainer.backend=verl runs on cpu or cuda (or auto)")
    return kind


def _precision(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[str(dtype)]


def training_worker_config(settings: VerlSettings, spec: PolicySpec, model_path: str, adapter_dir: Optional[Path],
                           device: str = "cpu") -> Any:
    """verl's TrainingWorkerConfig for one policy; `device`: where its ranks run (cpu or cuda)."""
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig, TrainingWorkerConfig

    from pettingllms.utils.precision import resolve_dtype

    ws, vc = settings.worker, settings.verl
    lora: dict[str, Any] = {}
    if spec.is_lora:
        lora = dict(lora_rank=int(spec.lora.rank), lora_alpha=int(spec.lora.alpha),
                    target_modules=list(spec.lora.target_modules), lora_adapter_path=str(adapter_dir))
    model = HFModelConfig(
        path=model_path, use_remove_padding=bool(vc.use_remove_padding),
        enable_gradient_checkpointing=bool(ws.gradient_checkpointing),
        override_config={"attn_implementation": attention_for(str(vc.attn_implementation), device)}, **lora)
    mb = max(1, int(ws.micro_batch_size))
    engine = FSDPEngineConfig(
        strategy=str(vc.strategy), model_dtype=_precision(ws.train_dtype),
        # Trainable weights stay in train_dtype (fp32 master); compute runs in model.dtype, as local does.
        mixed_precision={"param_dtype": _precision(resolve_dtype(ws.dtype, device)), "reduce_dtype": "fp32",
                         "buffer_dtype": "fp32"},
        param_offload=bool(vc.param_offload), optimizer_offload=bool(vc.optimizer_offload),
        use_dynamic_bsz=False, micro_batch_size_per_gpu=mb, infer_micro_batch_size_per_gpu=mb,
        use_torch_compile=False, seed=int(ws.seed), forward_only=False)
    op = ws.optim
    warmup = int(op.warmup_steps)
    clip = float(op.grad_clip)
    optim = FSDPOptimizerConfig(
        lr=float(spec.lr), weight_decay=float(spec.weight_decay), betas=tuple(float(b) for b in op.betas),
        clip_grad=clip if clip > 0 else float("inf"), total_training_steps=int(ws.total_steps),
        lr_warmup_steps=warmup, lr_scheduler_type=str(op.lr_schedule), min_lr_ratio=float(op.min_lr_ratio),
        # verl's warmup starts at lr 0 on step 0; counting from 1 gives local's (s + 1) / warmup.
        zero_indexed_step=warmup <= 0, override_optimizer_config={"eps": 1e-8})
    ckpt = CheckpointConfig(save_contents=["model", "optimizer", "extra"], load_contents=["model", "optimizer", "extra"])
    return TrainingWorkerConfig(model_type="language_model", model_config=model, engine_config=engine,
                                optimizer_config=optim, checkpoint_config=ckpt)
