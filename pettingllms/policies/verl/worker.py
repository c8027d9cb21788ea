"""VerlPolicyWorker: one policy trained by a verl worker group (FSDP, 1..N ranks, 1..M nodes).

The same surface as `pettingllms.policies.worker.PolicyWorker` (update, logprobs,
generation_weights, save/load, release, close), so the trainer loop does not change.
The driver keeps the loop; verl's `TrainingWorker`s (through `RayWorkerGroup`) run the
forward/backward/optimizer step with our loss (`batch.policy_loss`). Each optimizer
step trains on exactly the mini-batch the local worker would use (`mini_batch_plan`),
so a verl update and a local update on the same samples agree to float rounding.

LoRA: the adapter is initialised here exactly as the local worker does it (same seed,
same peft call) and handed to verl as `lora_adapter_path`; engine sync moves only the
adapter tensors (a WeightUpdate). Full fine-tuning: rank 0 of the worker group writes the
full weights to a versioned folder under `sync_dir` and the WeightUpdate carries only that
path; each engine reads the file itself, so full weights never pass through the driver.
"""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from pettingllms.errors import ConfigError
from pettingllms.policies.mapping import PolicySpec
from pettingllms.policies.training import check_samples, lr_lambda, mini_batch_plan
from pettingllms.policies.verl import batch as vb
from pettingllms.policies.verl.setup import RayCluster, VerlSettings, training_worker_config
from pettingllms.records import Sample
from pettingllms.utils.models import resolve_model_path, torch_dtype
from pettingllms.utils.precision import resolve_dtype

log = logging.getLogger(__name__)


def _get(result: Any) -> Any:
    """A non-blocking worker-group call's value (verl returns a future-like object)."""
    return result.get() if hasattr(result, "get") and not isinstance(result, dict) else result


def _metrics(out: Any) -> dict[str, float]:
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import Metric

    raw = tu.get(out, "metrics")
    if isinstance(raw, list):  # one copy per data-parallel rank after collect; all equal
        raw = raw[0]
    flat: dict[str, float] = {}
    for k, v in dict(raw).items():
        if isinstance(v, Metric):
            v = v.aggregate()
        elif isinstance(v, list):
            v = Metric.aggregate_dp(v) if v and isinstance(v[0], Metric) else (sum(v) / len(v) if v else 0.0)
        flat[k] = float(v)
    return flat


class VerlPolicyWorker:
    def __init__(self, spec: PolicySpec, settings: VerlSettings, cluster: RayCluster, name_prefix: str, colocate: int = 1,
                 sync_dir: Optional[Path] = None):
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup

        from pettingllms.policies.verl.remote import PolicyTrainingWorker

        self.spec, self.settings, self.name = spec, settings.worker, spec.name
        self.trainable = True
        self.algo = settings.worker.algorithm
        self.seed = int(settings.worker.seed)
        self.dtype = torch_dtype(resolve_dtype(settings.worker.dtype, cluster.device))  # verl's ranks' device
        temp = float(settings.worker.temperature if spec.temperature is None else spec.temperature)
        self.temperature = temp if temp > 0 else 1.0
        self.updates = 0
        self.micro = max(1, int(settings.worker.micro_batch_size))
        if float(self.algo.kl_coef) > 0 and not spec.is_lora:
            raise ConfigError("algorithm.kl_coef > 0 with full fine-tuning is not supported on trainer.backend=verl "
                              "(it needs a second, reference worker group); use LoRA or trainer.backend=local")
        # Every rank reads the initial adapter from here: under sync_dir, which every node sees (the
        # driver's /tmp is on the driver's node only); evaluation (no sync_dir): this node.
        shared = Path(sync_dir) if sync_dir is not None else None
        if shared is not None:
            shared.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=f"pettingllms-verl-{spec.name}-", dir=shared))
        if cluster.nnodes > 1 and Path(resolve_model_path(spec.base)).is_dir():
            log.warning("policy %s: its ranks on %d nodes read the model from %s: every node must see that "
                        "folder (a shared file system), else give a hub id", spec.name, cluster.nnodes,
                        resolve_model_path(spec.base))
        # Full fine-tuning's sync folder: every node with an engine must see it (None: this node only).
        self._sync: Optional[Path] = None
        if not spec.is_lora:
            root = Path(sync_dir) if sync_dir is not None else self._tmp
            root.mkdir(parents=True, exist_ok=True)
            self._sync = Path(tempfile.mkdtemp(prefix=f"{spec.name}-", dir=root))
        adapter_dir = None
        if spec.is_lora:
            adapter_dir = self._initial_adapter()
        tok = self._tokenizer()
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
        config = training_worker_config(settings, spec, resolve_model_path(spec.base), adapter_dir, cluster.device)
        self.world_size = cluster.world_size
        cls = RayClassWithInitArgs(cls=cluster.remote(PolicyTrainingWorker), config=config)
        self.group = RayWorkerGroup(resource_pool=cluster.resource_pool(colocate), ray_cls_with_init=cls, name_prefix=name_prefix,
                                    device_name=cluster.device, worker_env=cluster.worker_env,
                                    master_port_range=cluster.master_port_range())
        try:
            self._start(cluster.start_timeout_s)
            self.group.set_loss_fn(partial(vb.policy_loss, vb.algo_dict(self.algo)))
        except BaseException:
            self.close()  # a rank that failed to start leaves the others waiting on its process group
            raise

    # ---------------------------------------------------------------- building
    def _start(self, timeout_s: float) -> None:
        """Every rank up, then verl's `reset` (the FSDP model, optimizer and LR schedule on every
        rank), each within `timeout_s`: a rank that cannot start ends the run in one line."""
        from pettingllms.utils.ray_waits import wait_refs

        what, knob = f"policy {self.name}: verl ranks", "trainer.verl.start_timeout_s"
        wait_refs([w.__ray_ready__.remote() for w in self.group.workers], timeout_s, f"{what} starting", knob)
        wait_refs(self.group.execute_all_async("reset"), timeout_s, f"{what} building the model", knob)

    def _tokenizer(self):
        from pettingllms.utils.models import load_tokenizer
        return load_tokenizer(self.spec.base)

    def _initial_adapter(self) -> Path:
        """The local worker's adapter init (seeded by policy name), saved for verl to start from."""
        from pettingllms.policies.lora import SharedLoraBase
        from pettingllms.policies.worker import load_model

        base = load_model(self.spec.base, self.dtype, torch.device("cpu"))
        lora_base = SharedLoraBase(base, self.spec.base, torch_dtype(self.settings.train_dtype))
        lora_base.add_adapter(self.name, self.spec.lora, self.seed)
        folder = self._tmp / "initial_adapter"
        lora_base.save_adapter(self.name, folder)
        return folder

    @property
    def data_parallel_size(self) -> int:
        return self.world_size

    # ---------------------------------------------------------------- batches
    def _td(self, samples: Sequence[Sample], rows: Sequence[Optional[int]], old=None, ref=None, **meta):
        proto = vb.to_verl_batch(samples, rows, self.pad_id, self.temperature, old=old, ref=ref)
        seq_lens = [len(samples[i].prompt_ids) + len(samples[i].response_ids) if i is not None else 0 for i in rows]
        return vb.to_tensordict(proto, global_token_num=seq_lens, **meta)

    def _infer(self, samples: Sequence[Sample], reference: bool = False) -> list[Tensor]:
        """Per-sample [R] logprobs under the current policy (or the base, LoRA reference)."""
        from verl.utils import tensordict_utils as tu

        rows, mbs = vb.padded_rows(samples, self.world_size, self.micro)
        meta = dict(compute_loss=False, calculate_entropy=False, micro_batch_size_per_gpu=mbs)
        if reference:
            meta["no_lora_adapter"] = True
        td = self._td(samples, rows, **meta)
        out = _get(self.group.infer_batch(td))
        lp = vb.response_values(tu.get(out, "log_probs"), td).float().cpu()
        return [lp[b, : len(samples[i].response_ids)] for b, i in enumerate(rows) if i is not None]

    # ---------------------------------------------------------------- the PolicyWorker surface
    def logprobs(self, samples: Sequence[Sample]) -> list[list[float]]:
        samples = list(samples)
        return [r.tolist() for r in self._infer(samples)] if samples else []

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        if not self.trainable:
            return {"frozen": 1.0}
        samples = list(samples)
        check_samples(self.spec, self.algo, samples)
        samples = [s for s in samples if s.response_ids]
        if not samples:
            return {"num_samples": 0.0}
        t0 = time.perf_counter()
        plan = mini_batch_plan(len(samples), self.algo, self.seed, step)
        mode = str(self.algo.old_logprobs)
        old = None
        if mode == "engine":
            old = [list(s.logprobs) for s in samples]
        elif len(plan) > 1:  # several optimizer steps: the ratio needs the pre-update policy
            old = [r.tolist() for r in self._infer(samples)]
        ref = [r.tolist() for r in self._infer(samples, reference=True)] if float(self.algo.kl_coef) > 0 else None
        logprob_s = time.perf_counter() - t0
        sums: dict[str, float] = {}
        for j, mini in enumerate(plan):
            part = [samples[i] for i in mini]
            rows, mbs = vb.padded_rows(part, self.world_size, self.micro)
            td = self._td(part, rows, old=[old[i] for i in mini] if old else None, micro_batch_size_per_gpu=mbs,
                          ref=[ref[i] for i in mini] if ref else None,
                          calculate_entropy=float(self.algo.entropy_coef) > 0, global_batch_size=len(mini),
                          update_lr_scheduler=j == len(plan) - 1, disable_auto_offload=False)
            m = _metrics(_get(self.group.train_batch(td)))
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + v
        n_steps = len(plan)
        # verl's perf/* are machine-wide memory readings and mfu a GPU estimate: not the policy's.
        metrics = {k: v / n_steps for k, v in sums.items() if not k.startswith("perf/") and k != "mfu"}
        # verl reports the LR after its scheduler step; like local, report the LR this update used.
        op = self.settings.optim
        metrics["lr"] = float(self.spec.lr) * lr_lambda(int(op.warmup_steps), int(self.settings.total_steps),
                                                        float(op.min_lr_ratio), str(op.lr_schedule))(self.updates)
        metrics.update({"logprob_s": logprob_s, "optimizer_steps": float(n_steps),
                        "num_samples": float(len(samples)),
                        "num_tokens": float(sum(len(s.response_ids) for s in samples)),
                        "update_s": time.perf_counter() - t0})
        self.updates += 1
        return metrics

    def trained_weights(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """(tensors, peft config): the adapter (peft names) or the full model (HF names), from rank 0."""
        out = self.group.trained_weights()
        return next(w for w in out if w is not None)

    @torch.no_grad()
    def weight_update(self) -> Any:
        """The engine's sync record: adapter tensors only (LoRA), or the path of the full weights
        that rank 0 wrote (full fine-tuning). Only the newest version is kept: a sync applies its
        update on every engine before it returns, so older folders are no longer read."""
        from pettingllms.rollout.engines.weights import WeightUpdate

        if self.spec.is_lora:
            tensors, lora_config = self.trained_weights()
            return WeightUpdate(self.name, "lora", tensors, lora_config, version=self.updates)
        folder = self._sync / f"v{self.updates:06d}"
        path = next(p for p in self.group.write_full_weights(str(folder), resolve_dtype(self.dtype)) if p)
        for old in self._sync.iterdir():
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
        return WeightUpdate(self.name, "full", {}, version=self.updates, path=path)

    @torch.no_grad()
    def generation_weights(self) -> dict[str, Tensor]:
        """Full merged weights (HF names) in the generation dtype, through the driver: for export
        and checks only (engine sync uses `weight_update`)."""
        from pettingllms.rollout.engines.weights import WeightUpdate, lora_deltas, to_dtype

        tensors, lora_config = self.trained_weights()
        if not self.spec.is_lora:
            return to_dtype(tensors, self.dtype)
        update = WeightUpdate(self.name, "lora", tensors, lora_config, version=self.updates)
        from pettingllms.policies.worker import load_model
        base = load_model(self.spec.base, torch.float32, torch.device("cpu")).state_dict()
        for name, delta in lora_deltas(update).items():
            base[name] = base[name] + delta
        return to_dtype(base, self.dtype)

    def release(self) -> None:
        """verl keeps its own placement (param/optimizer offload are trainer.verl settings)."""
        return None

    # ---------------------------------------------------------------- checkpoints
    def save(self, folder: str | Path) -> None:
        """verl's sharded checkpoint (model, optimizer, LR schedule, RNG) under verl/, plus a plain
        HF folder (model/) or peft adapter (adapter/) that needs no verl to load."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.group.save_checkpoint(str(folder / "verl"), global_step=self.updates)
        self.group.export_pretrained(str(folder / ("adapter" if self.spec.is_lora else "model")))
        if not self.spec.is_lora:
            try:
                self._tokenizer().save_pretrained(str(folder / "model"))
            except Exception:  # a base without a tokenizer still exports its weights
                pass
        meta = {"name": self.name, "kind": "lora" if self.spec.is_lora else "full", "base": self.spec.base,
                "updates": self.updates, "trainable": self.trainable, "backend": "verl",
                "world_size": self.world_size}
        (folder / "policy.json").write_text(json.dumps(meta, indent=1))

    def load(self, folder: str | Path) -> None:
        folder = Path(folder)
        meta_path = folder / "policy.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"no policy checkpoint at {folder}")
        meta = json.loads(meta_path.read_text())
        kind = "lora" if self.spec.is_lora else "full"
        if meta.get("kind") != kind:
            raise ValueError(f"checkpoint at {folder} is a {meta.get('kind')} policy; '{self.name}' is {kind}")
        if not (folder / "verl").is_dir():
            raise ValueError(f"checkpoint at {folder} was not written by trainer.backend=verl (no verl/ folder)")
        if int(meta.get("world_size", self.world_size)) != self.world_size:
            raise ValueError(f"checkpoint at {folder} has {meta.get('world_size')} ranks; this run has "
                             f"{self.world_size} (verl's FSDP checkpoints are sharded per rank)")
        self.group.load_checkpoint(str(folder / "verl"), del_local_after_load=False)
        self.updates = int(meta.get("updates", 0))

    def close(self) -> None:
        import ray
        for w in getattr(self.group, "workers", []):
            try:
                ray.kill(w)
            except Exception:  # already gone
                pass
        shutil.rmtree(self._tmp, ignore_errors=True)
        if self._sync is not None:
            shutil.rmtree(self._sync, ignore_errors=True)
