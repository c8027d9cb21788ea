"""PolicyWorker: one trainable policy (full fine-tuning or one LoRA adapter).

update(samples, step) runs algorithm.ppo_epochs x algorithm.mini_batches AdamW steps
over micro-batches with gradient accumulation. Weights that train are kept in
model.train_dtype (fp32 master for full fine-tuning; fp32 adapters over a frozen
base for LoRA) so small updates do not vanish in bf16 rounding; the forward pass
runs under bf16 autocast when model.dtype resolves to bf16 (auto: utils.precision's pick).

Offload (policy.offload: true, L3): after `release()` the worker writes its state
(weights, optimizer, scheduler) to a private temp dir and drops the model; the next
call that needs it rebuilds the model from its base and reloads that state. The
trainer calls `release()` once the engine has the new weights.
"""
from __future__ import annotations

import gc
import logging
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Mapping, Optional, Sequence

import torch
from torch import Tensor

from pettingllms.algorithms.loss import ppo_loss, sft_nll_loss
from pettingllms.policies.checkpoint_io import load_worker_state, save_worker_state
from pettingllms.policies.logprobs import at_least_fp32, pack, response_logprobs
from pettingllms.policies.lora import SharedLoraBase
from pettingllms.policies.mapping import PolicySpec
from pettingllms.policies.settings import WorkerSettings
from pettingllms.policies.training import (BATCH_LOSSES, ROLE_KEYS, adamw_kernel, check_samples, combine_reports,
                                           lr_lambda, mini_batch_plan)
from pettingllms.records import Sample
from pettingllms.rollout.engines.weights import WeightUpdate, to_dtype
from pettingllms.utils.models import load_causal_lm, resolve_device, resolve_model_path, torch_dtype
from pettingllms.utils.precision import resolve_dtype
from pettingllms.utils.vision import is_vision_config, is_vision_folder, load_vision_lm, sample_pixels

log = logging.getLogger(__name__)


def load_model(path: str, dtype: torch.dtype, device: torch.device | None = None) -> torch.nn.Module:
    load = load_vision_lm if is_vision_folder(resolve_model_path(path)) else load_causal_lm
    return load(path, dtype, device=str(device or resolve_device("auto")))


class PolicyWorker:
    """One policy. LoRA workers on the same base share `lora_base` (L2)."""

    def __init__(self, spec: PolicySpec, settings: WorkerSettings, lora_base: Optional[SharedLoraBase] = None):
        self.spec, self.settings, self.name = spec, settings, spec.name
        self.trainable = True
        self.device = torch.device(settings.device)
        self.dtype = torch_dtype(resolve_dtype(settings.dtype, self.device))
        self.train_dtype = torch_dtype(settings.train_dtype)
        self.algo, self.optim = settings.algorithm, settings.optim
        self.seed = int(settings.seed)
        temp = float(settings.temperature if spec.temperature is None else spec.temperature)
        self.temperature = temp if temp > 0 else 1.0  # logprobs under the sampling distribution
        self.autocast = self.dtype in (torch.bfloat16, torch.float16)
        self.updates = 0  # update() calls that trained (drives the LR schedule)
        self._lora_base, self._owns_lora_base = lora_base, spec.is_lora and lora_base is None
        self._offload_dir: Optional[Path] = None
        self._processor = None  # a VLM's processor (samples' images to pixel inputs)
        self.model = self.optimizer = self.scheduler = self.ref_model = None
        self._build()

    # ---------------------------------------------------------------- building
    def _build(self) -> None:
        if self.spec.is_lora:
            if self._owns_lora_base:
                base = load_model(self.spec.base, self.dtype, self.device)
                self._lora_base = SharedLoraBase(base, self.spec.base, self.train_dtype)
            self._lora_base.add_adapter(self.name, self.spec.lora, self.seed)
            self.model = self._lora_base.peft_model
            params = [p for _, p in self._lora_base.adapter_params(self.name)]
        else:
            self.model = load_model(self.spec.base, self.train_dtype, self.device)
            # a VLM's vision tower stays frozen unless model.train_vision
            frozen = "visual." if is_vision_config(self.model.config) and not self.settings.train_vision else None
            params = [p for n, p in self.model.named_parameters() if not (frozen and frozen in n)]
            self.model.requires_grad_(False)
            for p in params:
                p.requires_grad_(True)
            if float(self.algo.kl_coef) > 0:
                # The initial policy is the base checkpoint: a frozen copy in the generation
                # dtype, reloaded from the base (so a resumed run keeps the true reference).
                self.ref_model = load_model(self.spec.base, self.dtype, self.device).eval()
                for p in self.ref_model.parameters():
                    p.requires_grad_(False)
        if self.spec.is_lora and self.autocast:
            # Under autocast the adapters' matmuls run in the autocast dtype anyway, so peft's cast
            # of each input to the fp32 adapter dtype is an exact round trip (bf16 -> fp32 -> bf16):
            # two copies of every adapted layer's input per forward and one more in backward.
            for module in self.model.modules():
                if hasattr(module, "cast_input_dtype_enabled"):
                    module.cast_input_dtype_enabled = False
        if self.settings.gradient_checkpointing:
            target = self.model.get_base_model() if self.spec.is_lora else self.model
            target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._params = params
        if self.spec.frozen:  # every agent untrained: it only generates, so no optimizer state at all
            self.trainable = False
            for p in params:
                p.requires_grad_(False)
            return
        self.optimizer = torch.optim.AdamW(
            params, lr=self.spec.lr, betas=tuple(float(b) for b in self.optim.betas),
            weight_decay=self.spec.weight_decay, eps=1e-8, **adamw_kernel(params))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(
            int(self.optim.warmup_steps), int(self.settings.total_steps),
            float(self.optim.min_lr_ratio), str(self.optim.lr_schedule)))

    @property
    def loaded(self) -> bool:
        return self.model is not None

    def _ensure_loaded(self) -> None:
        if self.model is None:
            self._build()
            self._load_state(self._offload_dir)

    def release(self) -> None:
        """Offload policies leave memory until next used; others ignore this."""
        if not self.spec.offload or self.model is None:
            return
        if self._offload_dir is None:
            self._offload_dir = Path(tempfile.mkdtemp(prefix=f"pettingllms-offload-{self.name}-"))
        self._save_state(self._offload_dir)
        self.model = self.optimizer = self.scheduler = self.ref_model = None
        self._params = []
        if self._owns_lora_base:
            self._lora_base = None
        gc.collect()

    def frozen_base_weights(self) -> dict[str, Tensor]:
        """LoRA: the frozen base weights of the adapted layers (plain names), which an engine in
        this process may merge into instead of keeping its own copy (`HFEngine.share_base`). Empty
        for full fine-tuning (the weights train) or offloaded policies (their memory must go)."""
        if not self.spec.is_lora or self.spec.offload or self._lora_base is None:
            return {}
        return self._lora_base.base_weights()

    def close(self) -> None:
        if self._offload_dir is not None:
            shutil.rmtree(self._offload_dir, ignore_errors=True)
            self._offload_dir = None

    def _activate(self, train: bool) -> None:
        self._ensure_loaded()
        if self.spec.is_lora:
            self._lora_base.activate(self.name, train)
        self.model.train(train)

    def _autocast(self):
        if not self.autocast:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    # ---------------------------------------------------------------- logprobs
    def _pad_id(self) -> int:
        pad = getattr(self.model.config, "pad_token_id", None)
        return int(pad) if isinstance(pad, int) else 0

    def _share_prompts(self) -> bool:
        # K candidates of one prompt run the prompt once (logprobs.SharedPrompts). Gradient
        # checkpointing turns the KV cache off in training, so it keeps the plain rows.
        return not self.settings.gradient_checkpointing

    def _pixels(self, samples: Sequence[Sample]) -> dict[str, Tensor]:
        """pixel_values / image_grid_thw of the samples' images, in row order ({} without images)."""
        pixels, self._processor = sample_pixels(samples, self.model.config, self.spec.base, self._processor,
                                                f"policy {self.name!r}")
        return pixels

    def _forward(self, samples: Sequence[Sample], with_entropy: bool = False, model=None):
        pixels = self._pixels(samples)
        # image prompts run as whole rows: the shared-prompt layout has no pixel inputs
        batch = pack(samples, self._pad_id(), share=self._share_prompts() and not pixels)
        batch.pixels = pixels
        with self._autocast():
            lp, ent = response_logprobs(model or self.model, batch, int(self.settings.logprob_chunk),
                                        self.temperature, with_entropy)
        return batch, lp, ent

    @torch.no_grad()
    def _logprob_rows(self, samples: Sequence[Sample], reference: bool = False) -> list[Tensor]:
        """Per-sample [R] logprobs, no grad, eval mode, micro-batched."""
        self._activate(train=False)
        rows: list[Tensor] = []
        mb = max(1, int(self.settings.micro_batch_size))
        for i in range(0, len(samples), mb):
            chunk = samples[i: i + mb]
            if reference and self.spec.is_lora:
                with self.model.disable_adapter():
                    batch, lp, _ = self._forward(chunk)
            elif reference:
                batch, lp, _ = self._forward(chunk, model=self.ref_model)
            else:
                batch, lp, _ = self._forward(chunk)
            lp = at_least_fp32(lp).cpu()
            rows += [lp[b, :r] for b, r in enumerate(batch.response_lens)]
        return rows

    def logprobs(self, samples: Sequence[Sample]) -> list[list[float]]:
        """Current-policy logprobs of each sample's response tokens."""
        return [r.tolist() for r in self._logprob_rows(list(samples))]

    # ---------------------------------------------------------------- update
    def _check_samples(self, samples: Sequence[Sample]) -> None:
        check_samples(self.spec, self.algo, samples)

    def _contributing(self, samples: list[Sample]) -> list[bool]:
        """Which samples can move the weights. With no KL and no entropy term a sample's whole
        loss is -A * ratio, so one with advantage 0 (a zero-variance group, most often) adds
        exactly nothing to the gradient: it is not run. The loss denominators still count it,
        so the step is the same as over the whole batch (up to rounding order)."""
        if float(self.algo.kl_coef) != 0.0 or float(self.algo.entropy_coef) != 0.0:
            return [True] * len(samples)
        return [float(s.advantage) != 0.0 for s in samples]

    def _old_logprobs(self, samples: list[Sample], live: list[bool]) -> Optional[list[Optional[Tensor]]]:
        """Behaviour logprobs for the ratio (for the samples that run; None for the others);
        None means "this pass's own, detached".

        With one optimizer step per batch (ppo_epochs x mini_batches == 1) a separate no-grad
        pass would compute exactly what the training forward computes before its step, so
        `recompute` reuses the training forward's detached logprobs and saves a whole pass.
        """
        mode = str(self.algo.old_logprobs)
        if mode == "engine":
            return [torch.tensor(s.logprobs, dtype=torch.float32) for s in samples]
        if mode != "recompute":
            raise ValueError(f"algorithm.old_logprobs must be engine or recompute, got '{mode}'")
        if self._passes() == 1:
            return None
        rows = iter(self._logprob_rows([s for s, on in zip(samples, live) if on]))
        return [next(rows) if on else None for on in live]

    def _no_grad_mismatch(self, samples: list[Sample], mismatch: list[float]) -> None:
        """|trainer - engine| logprob (sum, max, tokens into `mismatch`) from a no-grad pass."""
        known = [s for s in samples if len(s.logprobs) == len(s.response_ids)]
        # the training micro-batches' order, so the result does not depend on the samples' order
        known = [known[i] for mb in self._micro_batches(list(range(len(known))), known) for i in mb]
        for s, row in zip(known, self._logprob_rows(known)):
            diff = (row.float() - torch.tensor(s.logprobs, dtype=torch.float32)).abs()
            mismatch[0] += float(diff.sum())
            mismatch[1] = max(mismatch[1], float(diff.max()))
            mismatch[2] += int(diff.numel())

    def _passes(self) -> int:
        return max(1, int(self.algo.ppo_epochs)) * max(1, int(self.algo.mini_batches))

    @staticmethod
    def _mismatch(samples: Sequence[Sample], batch, lp: Tensor) -> tuple[float, float, int]:
        """Sum and max |trainer - engine| logprob over tokens whose engine logprobs are known."""
        rows = [(b, s) for b, s in enumerate(samples) if len(s.logprobs) == len(s.response_ids)]
        if not rows:
            return 0.0, 0.0, 0
        eng = batch.padded_values([s.logprobs if len(s.logprobs) == len(s.response_ids) else []
                                   for s in samples]).to(lp.device)
        mask = batch.mask.to(lp.device).bool().clone()
        for b, s in enumerate(samples):
            if len(s.logprobs) != len(s.response_ids):
                mask[b] = False
        diff = (lp.detach().float() - eng).abs()[mask]
        if diff.numel() == 0:
            return 0.0, 0.0, 0
        return float(diff.sum()), float(diff.max()), int(diff.numel())

    def accumulate(self, samples: list[Sample], old: Optional[list[Tensor]], ref: Optional[list[Tensor]],
                   weight: float, mismatch: Optional[list[float]] = None) -> dict[str, float]:
        """Forward + backward of one micro-batch; the loss is scaled by `weight` (its share of
        the mini-batch), so accumulated gradients equal those of the whole mini-batch."""
        with_entropy = float(self.algo.entropy_coef) > 0
        batch, lp, ent = self._forward(samples, with_entropy=with_entropy)
        dev = lp.device
        lp = at_least_fp32(lp)
        old_t = batch.padded_values(old, lp.dtype).to(dev) if old is not None else lp.detach()
        if mismatch is not None:  # first pass: the current policy vs what the engine sampled with
            total, peak, count = self._mismatch(samples, batch, lp)
            mismatch[0] += total
            mismatch[1] = max(mismatch[1], peak)
            mismatch[2] += count
        ref_t = batch.padded_values(ref, lp.dtype).to(dev) if ref is not None else None
        adv = torch.tensor([float(s.advantage) for s in samples], dtype=lp.dtype, device=dev)
        loss, m = ppo_loss(lp, old_t, adv, batch.mask.to(dev), self.algo,
                           ref_logprobs=ref_t, entropy=at_least_fp32(ent) if ent is not None else None)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"policy '{self.name}': non-finite loss {float(loss)}")
        (loss * weight).backward()
        m = dict(m)
        m["loss"] = loss.item()
        return m

    def _tokens_run(self, micro: list[Sample]) -> int:
        """Prompt and response tokens one training forward over `micro` runs (without padding)."""
        prompts = ({tuple(s.prompt_ids) for s in micro} if self._share_prompts()
                   else [s.prompt_ids for s in micro])
        return sum(len(p) for p in prompts) + sum(len(s.response_ids) for s in micro)

    def _micro_batches(self, idx: list[int], samples: list[Sample]) -> list[list[int]]:
        # Sort by length so micro-batches carry little padding (with shared prompts: by prompt, so
        # that a prompt's candidates share a micro-batch, prompts by their longest response, the
        # padding every candidate gets); the sum is order-free.
        if self._share_prompts():
            longest: dict[tuple[int, ...], int] = {}
            for i in idx:
                key = tuple(samples[i].prompt_ids)
                longest[key] = max(longest.get(key, 0), len(samples[i].response_ids))
            idx = sorted(idx, key=lambda i: (longest[tuple(samples[i].prompt_ids)], tuple(samples[i].prompt_ids),
                                             len(samples[i].response_ids)))
        else:
            idx = sorted(idx, key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))
        mb = max(1, int(self.settings.micro_batch_size))
        return [idx[i: i + mb] for i in range(0, len(idx), mb)]

    def update(self, samples: Sequence[Sample], step: int,
               role_lrs: Optional[Mapping[str, float]] = None) -> dict[str, float]:
        """Train on this policy's samples; returns metrics (unprefixed).

        `role_lrs` (trainer.role_lr): agent -> learning rate for this step. Each listed agent's
        samples then get their own optimizer pass at that rate (times the schedule's factor), so
        two roles of one shared model can train at different rates; rate 0 skips the role.
        Metrics are then prefixed `<agent>/`. The LR schedule advances once per call either way.
        """
        if not self.trainable or self.spec.frozen:
            return {"frozen": 1.0}
        samples = list(samples)
        self._check_samples(samples)
        samples = [s for s in samples if s.response_ids]
        if not samples:
            return {"num_samples": 0.0}
        if not role_lrs:
            metrics = self._train(samples, step)
        else:
            metrics = {}
            factor = float(self.scheduler.lr_lambdas[0](self.scheduler.last_epoch))
            by_agent: dict[str, list[Sample]] = {}
            for s in samples:
                by_agent.setdefault(s.agent, []).append(s)
            parts = []
            for agent, part in by_agent.items():
                lr = float(role_lrs.get(agent, self.spec.lr))
                metrics[f"{agent}/lr"] = lr * factor
                if lr == 0.0:
                    continue
                for group in self.optimizer.param_groups:
                    group["lr"] = lr * factor
                parts.append(self._train(part, step))
                metrics.update({f"{agent}/{k}": parts[-1][k] for k in ROLE_KEYS})
            metrics.update(combine_reports(parts))
        self.scheduler.step()  # also puts the scheduled (unscaled) lr back
        self.updates += 1
        return metrics

    def _train(self, samples: list[Sample], step: int) -> dict[str, float]:
        """ppo_epochs x mini_batches optimizer steps on `samples` at the optimizer's current lr."""
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        live = self._contributing(samples)
        old = self._old_logprobs(samples, live)
        mismatch = [0.0, 0.0, 0]  # |trainer - engine| logprob: sum, max, tokens (first pass)
        if not any(live):  # nothing will run: the engine-vs-trainer check gets a no-grad pass of its own
            self._no_grad_mismatch(samples, mismatch)
        ref = self._logprob_rows(samples, reference=True) if float(self.algo.kl_coef) > 0 else None
        metrics["logprob_s"] = time.perf_counter() - t0  # no-grad passes (old / reference), if any
        self._activate(train=True)
        n = len(samples)
        n_mini = max(1, min(int(self.algo.mini_batches), n))
        token_agg = str(self.algo.loss_agg) == "token-mean"
        sums: dict[str, float] = {}
        ran: dict[str, float] = {}  # per metric, the share of the mini-batches' tokens (or sequences) that ran
        grad_norms = []
        tokens_run = 0  # tokens the training forwards computed (a shared prompt once per micro-batch)
        for mini in mini_batch_plan(n, self.algo, self.seed, step):
            self.optimizer.zero_grad(set_to_none=True)
            total = sum(len(samples[i].response_ids) for i in mini) if token_agg else len(mini)
            micros = self._micro_batches([i for i in mini if live[i]], samples)
            for micro in micros:
                tokens_run += self._tokens_run([samples[i] for i in micro])
                part = sum(len(samples[i].response_ids) for i in micro) if token_agg else len(micro)
                w = part / total
                m = self.accumulate([samples[i] for i in micro],
                                    [old[i] for i in micro] if old is not None else None,
                                    [ref[i] for i in micro] if ref is not None else None, w,
                                    mismatch if len(grad_norms) < n_mini else None)
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + w * float(v)
                    ran[k] = ran.get(k, 0.0) + w
            if not micros:  # every advantage 0: the step still runs, on zero gradients (Adam's moments decay)
                for p in self._params:
                    p.grad = torch.zeros_like(p)
            clip = float(self.optim.grad_clip)
            norm = torch.nn.utils.clip_grad_norm_(self._params, clip if clip > 0 else float("inf"))
            grad_norms.append(float(norm))
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        n_steps = len(grad_norms)
        metrics.update({k: v / (n_steps if k in BATCH_LOSSES else ran[k]) for k, v in sums.items()})
        for k in BATCH_LOSSES:
            metrics.setdefault(k, 0.0)
        if mismatch[2]:
            metrics["old_logprob_mismatch_mean"] = mismatch[0] / mismatch[2]
            metrics["old_logprob_mismatch_max"] = mismatch[1]
        metrics.update({
            "grad_norm": sum(grad_norms) / n_steps, "lr": float(self.optimizer.param_groups[0]["lr"]),
            "optimizer_steps": float(n_steps), "num_samples": float(n),
            "zero_advantage_skipped": float(n - sum(live)),
            "num_tokens": float(sum(len(s.response_ids) for s in samples)), "tokens_run": float(tokens_run),
            "update_s": time.perf_counter() - t0})
        return metrics

    def sft_update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One supervised optimizer step: token-mean NLL of the samples' response tokens (the
        prompt is context only), micro-batched, at temperature 1. Used by the SFT cold start."""
        if self.spec.frozen:
            raise ValueError(f"policy '{self.name}' serves only agents with trainable: false {self.spec.untrained}; "
                             "leave them out of sft.agents or make them trainable")
        samples = [s for s in samples if s.response_ids]
        if not samples:
            return {"num_samples": 0.0}
        t0 = time.perf_counter()
        self._activate(train=True)
        self.optimizer.zero_grad(set_to_none=True)
        total = sum(len(s.response_ids) for s in samples)
        nll = 0.0
        for micro in self._micro_batches(list(range(len(samples))), samples):
            batch = pack([samples[i] for i in micro], self._pad_id())
            with self._autocast():
                lp, _ = response_logprobs(self.model, batch, int(self.settings.logprob_chunk), 1.0)
            loss = sft_nll_loss(lp.float(), batch.mask.to(lp.device), total)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"policy '{self.name}': non-finite SFT loss {float(loss)}")
            loss.backward()
            nll += loss.item()
        clip = float(self.optim.grad_clip)
        norm = torch.nn.utils.clip_grad_norm_(self._params, clip if clip > 0 else float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.updates += 1
        return {"nll": nll, "grad_norm": float(norm), "lr": float(self.optimizer.param_groups[0]["lr"]),
                "num_samples": float(len(samples)), "num_tokens": float(total),
                "update_s": time.perf_counter() - t0}

    # ---------------------------------------------------------------- weights
    @torch.no_grad()
    def weight_update(self) -> WeightUpdate:
        """What the engine needs after an update: the adapter only (LoRA) or every weight in the
        generation dtype (full fine-tuning)."""
        self._ensure_loaded()
        if self.spec.is_lora:
            tensors, config = self._lora_base.adapter_state(self.name)
            return WeightUpdate(self.name, "lora", tensors, config, version=self.updates)
        return WeightUpdate(self.name, "full", to_dtype(self.model.state_dict(), self.dtype), version=self.updates)

    @torch.no_grad()
    def generation_weights(self) -> dict[str, Tensor]:
        """Full merged weights (HF names) in the generation dtype: for export and checks; weight
        sync uses `weight_update()`."""
        self._ensure_loaded()
        if self.spec.is_lora:
            return self._lora_base.merged_weights(self.name, self.dtype)
        return to_dtype(self.model.state_dict(), self.dtype)

    def trainable_state(self) -> dict[str, Tensor]:
        """The weights this policy trains (adapter or full model), detached copies."""
        self._ensure_loaded()
        if self.spec.is_lora:
            return {n: p.detach().clone() for n, p in self._lora_base.adapter_params(self.name)}
        return {n: p.detach().clone() for n, p in self.model.named_parameters()}

    # ---------------------------------------------------------------- checkpoints
    def save(self, folder: str | Path) -> None:
        """HF folder (full FT, fp32 master) or peft adapter folder (LoRA), plus optimizer,
        scheduler and a small meta file (policies/checkpoint_io.py)."""
        self._ensure_loaded()
        save_worker_state(self, Path(folder), with_tokenizer=True)

    def load(self, folder: str | Path, weights_only: bool = False) -> None:
        """Resume from a saved policy; `weights_only` (trainer.checkpoint.init_from) takes its weights and
        leaves the optimizer, LR schedule and update count fresh."""
        folder = Path(folder)
        if not (folder / "policy.json").exists():
            raise FileNotFoundError(f"no policy checkpoint at {folder}")
        self._ensure_loaded()
        load_worker_state(self, folder, weights_only)

    def _save_state(self, folder: Path) -> None:
        save_worker_state(self, folder)

    def _load_state(self, folder: Optional[Path], weights_only: bool = False) -> None:
        if folder is not None:
            load_worker_state(self, folder, weights_only)
