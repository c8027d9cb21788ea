"""What a run asks of Ray, checked against what the cluster has before anything is placed.

verl (0.9.1, `verl/single_controller/ray/base.py`, `RayResourcePool.get_placement_groups`)
makes one STRICT_PACK placement group per node with one bundle per rank, each bundle
`{"CPU": max_colocate_count, "GPU": 1}` (no GPU on CPU runs). Every policy's worker group
shares that pool, so `max_colocate_count` is the number of policies: 8 ranks x 2 policies
ask 16 CPUs of one node. A bundle Ray cannot place waits forever there, so `check_verl`
compares the ask with the cluster's nodes first and says, in one line, what was asked,
what the cluster has and which setting to change.

Pure arithmetic (no Ray import): `pettingllms.utils.ray_waits` reads the cluster and waits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from pettingllms.errors import ConfigError

RANK_KNOBS = "trainer.n_gpus_per_node / trainer.nnodes"


@dataclass(frozen=True)
class VerlAsk:
    """verl's resource pool for one run: `n_per_node` ranks on each of `nnodes` nodes, each
    rank's bundle shared by `colocate` worker groups (one per policy)."""
    n_per_node: int
    nnodes: int
    colocate: int = 1
    use_gpu: bool = False

    @property
    def bundle(self) -> dict[str, float]:
        b = {"CPU": float(self.colocate)}
        if self.use_gpu:
            b["GPU"] = 1.0
        return b

    @property
    def node_need(self) -> dict[str, float]:
        """One node's placement group (all its bundles on that node)."""
        return {k: v * self.n_per_node for k, v in self.bundle.items()}

    @property
    def total(self) -> dict[str, float]:
        return {k: v * self.nnodes for k, v in self.node_need.items()}

    def local_cpus(self) -> int:
        """CPUs for a private Ray started for this run: every bundle's CPUs, plus two for the
        tasks outside the pool (the driver's own calls, verl's port probe), at least 4."""
        return max(4, int(self.total["CPU"]) + 2)

    def describe(self) -> str:
        per = ", ".join(f"{_num(v)} {k}" for k, v in self.bundle.items())
        need = " + ".join(f"{_num(v)} {k}" for k, v in self.total.items())
        return (f"{self.nnodes} node(s) x {self.n_per_node} rank(s), each rank {{{per}}} "
                f"({self.colocate} worker group(s) share each rank): {need} in all")


def _num(v: float) -> str:
    return f"{v:g}"


def node_summary(nodes: Sequence[Mapping[str, float]]) -> str:
    parts = [f"[{_num(n.get('CPU', 0))} CPU, {_num(n.get('GPU', 0))} GPU]" for n in nodes]
    return f"{len(nodes)} node(s): " + (", ".join(parts) if parts else "none")


def fits_on_nodes(need: Mapping[str, float], count: int, nodes: Sequence[Mapping[str, float]]) -> bool:
    """Whether `count` groups of `need` (each all on one node) fit the nodes' totals."""
    free = [dict(n) for n in nodes]
    for _ in range(count):
        for n in free:
            if all(n.get(k, 0.0) + 1e-9 >= v for k, v in need.items()):
                for k, v in need.items():
                    n[k] = n.get(k, 0.0) - v
                break
        else:
            return False
    return True


def check_verl(ask: VerlAsk, nodes: Sequence[Mapping[str, float]], device_setting: str) -> None:
    """ConfigError (one line) unless the cluster's nodes can hold verl's pool."""
    if ask.n_per_node < 1 or ask.nnodes < 1:
        raise ConfigError(f"trainer.n_gpus_per_node ({ask.n_per_node}) and trainer.nnodes ({ask.nnodes}) must be >= 1")
    has = node_summary(nodes)
    gpus = sum(n.get("GPU", 0.0) for n in nodes)
    if ask.use_gpu and gpus < 1:
        raise ConfigError(f"trainer.device={device_setting}: the Ray cluster has no GPU ({has}); "
                          "use trainer.device=cpu, or join a cluster with GPUs (trainer.verl.ray_address)")
    if fits_on_nodes(ask.node_need, ask.nnodes, nodes):
        return
    short = [f"{_num(v)} {k} asked, {_num(sum(n.get(k, 0.0) for n in nodes))} there"
             for k, v in ask.total.items() if sum(n.get(k, 0.0) for n in nodes) + 1e-9 < v]
    why = "; ".join(short) or "no node holds one node's share at once"
    more = "GPUs" if any("GPU" in s for s in short) else "CPUs per node (`ray start --num-cpus`)"
    raise ConfigError(f"trainer.backend=verl cannot be placed: it asks {ask.describe()}; the Ray cluster has "
                      f"{has} ({why}); lower {RANK_KNOBS}, or give the cluster more {more}")


def resolve_verl_device(device: str, cluster_gpus: float) -> str:
    """trainer.device for verl's ranks: cpu or cuda; auto is cuda when the Ray cluster has a GPU."""
    if device == "auto":
        return "cuda" if cluster_gpus >= 1 else "cpu"
    return device


def engine_gpus(n_gpus: int, n_engines: int, trainer_on: Optional[int] = None) -> list[Optional[int]]:
    """The one device rule for rollout engines in one process: engine i goes to GPU
    `gpus[i % len(gpus)]`, where `gpus` are the visible GPUs other than `trainer_on` (the GPU
    this process trains on) when there are others; None for every engine without a GPU."""
    if n_gpus < 1:
        return [None] * n_engines
    gpus = [g for g in range(n_gpus) if g != trainer_on] or list(range(n_gpus))
    return [gpus[i % len(gpus)] for i in range(n_engines)]


def engine_gpu_ids(n_gpus: int, n_engines: int, tp: int = 1, trainer_on: Optional[int] = None) -> list[Optional[list[int]]]:
    """`engine_gpus` for engines of `tp` GPUs each (tensor parallel): engine i's ids start at its
    `engine_gpus` slot; None where this process sees no GPU. A ConfigError if `tp` GPUs are not there."""
    if n_gpus < 1:
        return [None] * n_engines
    if tp > n_gpus:
        raise ConfigError(f"rollout.vllm.tensor_parallel_size={tp}: this process sees {n_gpus} GPU(s)")
    slots = engine_gpus(n_gpus // tp, n_engines, None if trainer_on is None else trainer_on // tp)
    return [[int(s) * tp + j for j in range(tp)] for s in slots]  # type: ignore[arg-type]


def rollout_worker_gpus(setting: object, cluster_gpus: float, workers: int, engine: str, tp: int = 1) -> float:
    """`ray.gpus_per_worker`: a number as set; `auto` is none on a cluster without GPUs or for the
    openai engine (or `tp` 0: an engine set to the CPU), else each worker's share: the engine's GPUs
    (`tp`: tensor_parallel_size for vLLM, 1 for hf) when every worker can have them, else an
    equal fraction of one."""
    if str(setting) != "auto":
        return float(setting)  # type: ignore[arg-type]
    if cluster_gpus < 1 or engine == "openai" or tp < 1:
        return 0.0
    need = float(tp if engine == "vllm" else 1)
    share = cluster_gpus / max(1, workers)
    if share >= need:
        return need
    return float(int(share)) if share >= 1 else round(share, 4) or 0.0001


def check_rollout_workers(workers: int, cpus: float, gpus: float, nodes: Sequence[Mapping[str, float]]) -> None:
    """ConfigError (one line) unless `workers` actors of {cpus, gpus} fit the cluster's nodes."""
    need = {"CPU": float(cpus)} | ({"GPU": float(gpus)} if gpus > 0 else {})
    if fits_on_nodes(need, workers, nodes):
        return
    ask = " + ".join(f"{_num(v * workers)} {k}" for k, v in need.items())
    raise ConfigError(f"trainer.backend=ray cannot place {workers} rollout worker(s) of {_num(cpus)} CPU"
                      f"{f' + {_num(gpus)} GPU' if gpus > 0 else ''} each ({ask} in all); the Ray cluster has "
                      f"{node_summary(nodes)}; lower ray.num_rollout_workers, ray.cpus_per_worker or "
                      "ray.gpus_per_worker, or raise ray.num_cpus")


_SAID: set[str] = set()


def attention_for(setting: str, device: str) -> str:
    """trainer.verl.attn_implementation: as set, or for `auto` flash_attention_2 on CUDA where the
    flash_attn package imports, else sdpa (said once in the log)."""
    import importlib.util
    import logging

    if setting != "auto":
        return setting
    flash = device == "cuda" and importlib.util.find_spec("flash_attn") is not None
    chosen = "flash_attention_2" if flash else "sdpa"
    if chosen not in _SAID:
        _SAID.add(chosen)
        why = "flash_attn is installed" if flash else ("flash_attn is not installed" if device == "cuda" else "CPU")
        logging.getLogger(__name__).info("trainer.verl.attn_implementation=auto: %s (%s)", chosen, why)
    return chosen
