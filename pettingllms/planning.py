"""The pre-flight plan: where each engine, rank and rollout worker goes, and the memory each
needs, from the config and the models' config.json (the model is built on torch's meta device:
no weights are read or allocated). `python -m pettingllms.plan` prints it; training logs it first.

Bytes, per policy: weights (full fine-tuning: every parameter in model.train_dtype; LoRA: the
frozen base in model.dtype plus the adapters in train_dtype), gradients and AdamW's two states
(trainable parameters x train_dtype each) are exact for the local worker (tests/test_plan.py checks
them against a real run); verl shards them over its ranks (FSDP). Activations and the KV caches
are estimates: activations per layer per token ~34 x hidden x 2 bytes (Korthikanti et al. 2022,
without the attention-score term: sdpa/flash never hold the scores; one layer's worth with
gradient checkpointing), plus logits for one logprob chunk; KV cache 2 x layers x kv_heads x
head_dim per token in model.dtype for a call's sequences.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from pettingllms.utils.placement import VerlAsk, engine_gpu_ids, rollout_worker_gpus
from pettingllms.utils.precision import resolve_dtype

GIB = 1024 ** 3
_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


@dataclass(frozen=True)
class PlanInputs:
    """What the plan reads (built from the run config by `trainer.assemble.plan_inputs`)."""
    backend: str
    engine: str
    specs: dict  # policy name -> PolicySpec
    dtype: str
    train_dtype: str
    micro_batch: int
    checkpointing: bool
    logprob_chunk: int
    max_prompt_tokens: int
    max_new_tokens: int
    kl: float
    device: str  # trainer.device as set
    n_per_node: int
    nnodes: int
    batch_size: int
    k: int
    workers: int  # ray.num_rollout_workers
    gpus_per_worker: Any
    tp: int
    gpu_memory_utilization: float
    engine_gpus: int = 1  # GPUs one rollout engine takes (0: set to the CPU), assemble.rollout_gpu_need


@dataclass(frozen=True)
class ModelShape:
    path: str
    params: int  # every parameter, tied ones once
    layers: int
    hidden: int
    kv_per_token: int  # kv heads x head dim, per layer, one of K or V
    vocab: int
    lora: dict = field(default_factory=dict)  # (rank, targets) -> adapter parameters

    def lora_params(self, rank: int, targets: tuple[str, ...]) -> int:
        return int(self.lora.get((rank, targets), 0))


def model_shape(path: str, lora_specs: list[tuple[int, tuple[str, ...]]]) -> Optional[ModelShape]:
    """The model's shape from its config.json, or None where that is not on this machine (a
    hub id never downloaded: the plan does not download)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    from pettingllms.utils.models import resolve_model_path

    try:
        local = path if not path.startswith(("embedded:", "tiny:")) else resolve_model_path(path)
        conf = AutoConfig.from_pretrained(local, local_files_only=True)
    except (OSError, ValueError):
        return None
    vision = getattr(conf, "vision_config", None) is not None  # a VLM: its tower counts, adapters skip it
    with torch.device("meta"):
        model = (AutoModelForImageTextToText if vision else AutoModelForCausalLM).from_config(conf)
    params = sum(p.numel() for p in model.parameters())
    linears = [(n, m) for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and not (vision and ".visual." in f".{n}.")]
    lora = {}
    for rank, targets in lora_specs:
        lora[(rank, targets)] = sum(rank * (m.in_features + m.out_features) for n, m in linears
                                    if n.rsplit(".", 1)[-1] in targets)
    text = conf.get_text_config() if hasattr(conf, "get_text_config") else conf
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    kv = int(getattr(text, "num_key_value_heads", None) or heads) * head_dim
    return ModelShape(path=path, params=int(params), layers=int(text.num_hidden_layers), hidden=int(text.hidden_size),
                      kv_per_token=kv, vocab=int(text.vocab_size), lora=lora)


@dataclass
class PolicyMemory:
    name: str
    kind: str  # lora | full
    weights: int
    grads: int
    optimizer: int
    activations: int
    trainable: int  # parameters

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.optimizer + self.activations


def policy_memory(name: str, shape: ModelShape, lora: Optional[tuple[int, tuple[str, ...]]], dtype: str,
                  train_dtype: str, micro_batch: int, seq: int, checkpointing: bool, chunk: int,
                  shared_base: bool = False, reference: bool = False) -> PolicyMemory:
    """One policy worker's bytes (unsharded). `shared_base`: LoRA over a base another policy
    already holds (local L2). `reference`: full fine-tuning's frozen copy for the KL term."""
    b, tb = _BYTES[dtype], _BYTES[train_dtype]
    if lora is not None:
        trainable = shape.lora_params(*lora)
        weights = (0 if shared_base else shape.params * b) + trainable * tb
    else:
        trainable = shape.params
        weights = trainable * tb + (shape.params * b if reference else 0)
    per_layer = 34 * shape.hidden * b // 2 * micro_batch * seq
    acts = per_layer * (1 if checkpointing else shape.layers)
    acts += (shape.hidden * b * micro_batch * seq * shape.layers if checkpointing else 0)  # saved layer inputs
    acts += min(chunk, micro_batch * seq) * shape.vocab * 4 * 3  # one logits chunk: fp32, softmax, grad
    return PolicyMemory(name, "lora" if lora is not None else "full", weights, trainable * tb, 2 * trainable * tb,
                        acts, trainable)


def kv_cache_bytes(shape: ModelShape, dtype: str, sequences: int, tokens: int) -> int:
    return 2 * shape.layers * shape.kv_per_token * _BYTES[dtype] * sequences * tokens


@dataclass
class Plan:
    lines: list[str]
    fits: bool
    devices: dict[str, list[str]]  # device -> what goes there (engines, ranks, workers)
    policies: dict[str, PolicyMemory]
    verl_ask: Optional[VerlAsk] = None


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def make_plan(p: PlanInputs, gpus: int, gpu_bytes: int, host_bytes: int) -> Plan:
    """`gpus`: GPUs per node the run will see; `gpu_bytes`: each one's memory."""
    on_gpu = gpus > 0 and p.device != "cpu"
    p = replace(p, dtype=resolve_dtype(p.dtype, "cuda" if on_gpu else "cpu"))  # model.dtype=auto
    backend, plan_specs = p.backend, p.specs
    lines = [f"pre-flight plan: trainer.backend={backend}, rollout.engine={p.engine}, {len(plan_specs)} "
             f"polic{'y' if len(plan_specs) == 1 else 'ies'}, {gpus} GPU(s) per node of {_gib(gpu_bytes)}"
             if gpus else f"pre-flight plan: trainer.backend={backend}, rollout.engine={p.engine}, "
             f"{len(plan_specs)} polic{'y' if len(plan_specs) == 1 else 'ies'}, no GPU (CPU run)"]
    shapes: dict[str, Optional[ModelShape]] = {}
    for spec in plan_specs.values():
        lora = [(int(spec.lora.rank), tuple(spec.lora.target_modules))] if spec.is_lora else []
        if spec.base not in shapes:
            shapes[spec.base] = model_shape(spec.base, lora)
        elif lora and shapes[spec.base] is not None and lora[0] not in shapes[spec.base].lora:
            shapes[spec.base] = model_shape(spec.base, lora + list(shapes[spec.base].lora))
    seq = p.max_prompt_tokens + p.max_new_tokens
    mems: dict[str, PolicyMemory] = {}
    seen_bases: set[str] = set()
    for name, spec in plan_specs.items():
        shape = shapes[spec.base]
        if shape is None:
            lines.append(f"  policy {name}: {spec.base}: no config.json on this machine; memory not estimated")
            continue
        lora = (int(spec.lora.rank), tuple(spec.lora.target_modules)) if spec.is_lora else None
        shared = backend != "verl" and spec.is_lora and (spec.model_key or spec.base) in seen_bases
        if spec.is_lora:
            seen_bases.add(spec.model_key or spec.base)
        mems[name] = policy_memory(name, shape, lora, p.dtype, p.train_dtype, p.micro_batch, seq, p.checkpointing,
                                   p.logprob_chunk, shared_base=shared, reference=not spec.is_lora and p.kl > 0)
    devices: dict[str, list[str]] = {}
    need: dict[str, int] = {}

    def put(dev: str, what: str, nbytes: int) -> None:
        devices.setdefault(dev, []).append(f"{what} ({_gib(nbytes)})")
        need[dev] = need.get(dev, 0) + nbytes

    ask = None
    if backend == "verl":
        world = p.n_per_node * p.nnodes
        ask = VerlAsk(p.n_per_node, p.nnodes, max(1, len(plan_specs)), on_gpu)
        lines.append(f"  verl: {ask.describe()}")
        for name, m in mems.items():
            shard = (m.weights + m.grads + m.optimizer) // world
            for node in range(p.nnodes):
                for r in range(p.n_per_node):
                    dev = f"node{node}:gpu{r}" if on_gpu else f"node{node}:cpu"
                    put(dev, f"{name} rank {node * p.n_per_node + r} (FSDP shard {_gib(shard)} + activations)",
                        shard + m.activations)
        trainer_gpu = None
    else:
        trainer_dev = "node0:gpu0" if on_gpu else "node0:cpu"
        for name, m in mems.items():
            put(trainer_dev, f"{name} policy worker: weights {_gib(m.weights)}, grads {_gib(m.grads)}, "
                f"AdamW {_gib(m.optimizer)}, activations {_gib(m.activations)}", m.total)
        trainer_gpu = 0 if on_gpu else None
    # engines: one per base for LoRA policies (vLLM) / per full policy; the HF engine holds each model once
    groups: dict[str, list[str]] = {}
    for name, spec in plan_specs.items():
        groups.setdefault(f"lora:{spec.base}" if spec.is_lora else f"full:{name}", []).append(name)
    rows = p.batch_size * p.k
    if backend == "ray":
        wgpus = rollout_worker_gpus(p.gpus_per_worker, gpus * max(1, p.nnodes), p.workers, p.engine,
                                    p.engine_gpus)
        for w in range(p.workers):
            dev = f"ray worker {w}" + (f" ({wgpus:g} GPU)" if wgpus else " (CPU)")
            for key, names in groups.items():
                shape = shapes[plan_specs[names[0]].base]
                if shape is not None:
                    put(dev, f"{p.engine} engine for {', '.join(names)}",
                        shape.params * _BYTES[p.dtype] + kv_cache_bytes(shape, p.dtype, rows // p.workers + 1, seq))
    else:
        ids = engine_gpu_ids(gpus if on_gpu else 0, len(groups), p.tp if p.engine == "vllm" else 1, trainer_gpu)
        for (key, names), gid in zip(groups.items(), ids):
            shape = shapes[plan_specs[names[0]].base]
            if shape is None:
                continue
            dev = f"node0:gpu{gid[0]}" if gid else "node0:cpu"
            weights = shape.params * _BYTES[p.dtype] // max(1, len(gid or [1]))
            kv = kv_cache_bytes(shape, p.dtype, rows, seq)
            if p.engine == "vllm" and gid:
                reserved = int(p.gpu_memory_utilization * gpu_bytes)
                put(dev, f"vLLM engine for {', '.join(names)} on GPU(s) {gid}: weights {_gib(weights)}, "
                    f"KV for {rows} x {seq} tokens {_gib(kv)}; reserves gpu_memory_utilization "
                    f"{p.gpu_memory_utilization:g} = {_gib(reserved)}", reserved)
            else:
                put(dev, f"{p.engine} engine for {', '.join(names)}: weights {_gib(weights)}, KV {_gib(kv)}", weights + kv)
    fits = True
    for dev in sorted(devices):
        cap = host_bytes if dev.endswith("cpu") or "(CPU)" in dev else gpu_bytes
        verdict = "fits" if need[dev] <= cap else "DOES NOT FIT"
        fits &= need[dev] <= cap
        lines.append(f"  {dev}: {_gib(need[dev])} of {_gib(cap)}: {verdict}")
        lines.extend(f"    - {item}" for item in devices[dev])
    host = sum(shapes[s.base].params * _BYTES[p.dtype] for s in plan_specs.values() if shapes[s.base]) \
        if backend == "verl" else 0
    if host:
        lines.append(f"  host RAM (driver): ~{_gib(host)} to build the initial adapters / sync (plus the engines on CPU)")
    if not fits:
        lines.append("  verdict: does not fit; turn trainer.micro_batch_size down, model.gradient_checkpointing=true, "
                     "rollout.vllm.gpu_memory_utilization, trainer.verl.param_offload/optimizer_offload, or more GPUs "
                     "(trainer.n_gpus_per_node / trainer.nnodes)")
    else:
        lines.append("  verdict: fits")
    return Plan(lines, fits, devices, mems, ask)
