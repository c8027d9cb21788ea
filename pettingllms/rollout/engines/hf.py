"""In-process rollout engine on Hugging Face transformers (the CPU default backend).

Why a hand-written decode loop instead of `model.generate`:
  * finished rows leave the batch and the KV cache at once, so no work is spent on them;
  * the n copies of a prompt, and requests with identical prompt ids (a rollout's K candidates),
    share one prefill (the cache is expanded afterwards);
  * the reported logprobs are exactly those of the distribution sampled from (`hf_runtime.sampling`:
    repetition penalty, temperature, min-p, top-k, then top-p, nothing else; docs/algorithm.md);
  * sampling is per row: each (request, copy) owns a seeded uniform stream, so a request's result
    does not depend on what else shares the batch (up to float rounding of the batched forward);
  * Llama-architecture models (Llama, SmolLM, Qwen2) run `hf_runtime.lean_llama.LeanLlama`, the
    same ops with fused GEMMs and none of transformers' per-step plumbing;
    `rollout.engine_options.lean_forward=false` turns it off. Its products (a bf16 GEMM), SwiGLU,
    and each decode step's norms, rotary embedding and attention run in our C++ kernels
    (`hf_runtime.cpu_kernels`) where the CPU has AVX512-BF16; on CPUs with only AVX2 + FMA
    `hf_runtime.avx2_kernels` (bf16 weights, fp32 sums): a bf16 model's products, or, for a float32
    model whose weights are all bf16 values, its products from bf16-held weights and its decode ops
    in fp32 C++;
    `rollout.engine_options.cpu_kernels=false` keeps oneDNN's GEMM and the torch ops.

This module is the engine: policies, weights and requests, and the decode loop over them. What
the loop runs on (KV cache, forward, sampler, kernels) is `hf_runtime/`.

Policies that share a base model share one generation model. Each policy's weights that differ
from the base are kept aside and copied into the shared model's tensors only when the active
policy changes. `update_weights` takes full weights as they are (`load_weights`, full or partial
state dicts, or the file a full update's path names) and merges a LoRA adapter here, in fp32,
into the base weights the model had before its first adapter update, so only adapter tensors
cross the seam. It merges one weight at a time, straight into the model's tensor: in one pass of
our kernel where the lean forward runs the kernels, else through one weight's fp32 delta.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Iterable, Mapping

import torch

from pettingllms.rollout.engines.base import (Completion, GenerationRequest, RolloutEngine, check_params,
                                              prompt_ids)
from pettingllms.rollout.engines.hf_runtime.kv_cache import buffered_cache, drop_front
from pettingllms.rollout.engines.hf_runtime.lean_llama import LeanLlama
from pettingllms.rollout.engines.hf_runtime.linear import last_position, pack_linears
from pettingllms.rollout.engines.hf_runtime.sampling import penalised, sample
from pettingllms.rollout.engines.weights import LoraFactor, WeightUpdate, full_weights, lora_factors
from pettingllms.utils.models import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path
from pettingllms.utils.precision import resolve_dtype
from pettingllms.utils.seeding import derive_seed
from pettingllms.utils.vision import (encode_prompt, image_hash, is_vision_folder, load_processor, load_vision_lm,
                                      rope_positions)


def own_memory(model: torch.nn.Module) -> None:
    """Move CPU weights that still live in the checkpoint's file mapping into memory of their own.
    A private file mapping keeps every page a LoRA merge writes until all of its tensors are
    gone, so weights that `sleep` frees would free nothing; once every tensor is copied, the
    mapping goes. Values are unchanged."""
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.device.type == "cpu":
            tensor.data = tensor.data.clone()


@dataclass
class _ModelSlot:
    """One generation model and the policies that run on it."""
    path: str
    model: Any
    tokenizer: Any
    eos_ids: set[int]
    cache_kwarg: str  # "cache" (transformers >= 5.2x) or "past_key_values"
    params: dict[str, torch.Tensor]  # name -> live tensor (tied names share storage)
    policies: list[str]
    active: str | None = None  # None: base weights
    base: dict[str, torch.Tensor] = field(default_factory=dict)  # base copies of overridden tensors
    lean: LeanLlama | None = None  # the lean forward, where it covers the model
    merged: dict[str, LoraFactor] = field(default_factory=dict)  # one policy: live = base + this factor
    released: dict[str, torch.Size] = field(default_factory=dict)  # merged weights freed by sleep()
    aliased: set[str] = field(default_factory=set)  # live tensors that are a trainer's (share_base)
    processor: Any = None  # a vision-language model's processor (pettingllms.utils.vision)


@dataclass
class _Row:
    """One completion being generated: request `request`, copy `copy` of its n."""
    request: int
    copy: int
    seed: int
    temperature: float
    top_k: int
    top_p: float
    max_new: int
    stops: list[str]
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seen: set[int] = field(default_factory=set)  # prompt and reply ids, kept only under a repetition penalty
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str | None = None  # set when a stop string cut the text
    finish: str | None = None


class HFEngine(RolloutEngine):
    def __init__(self, policies: Mapping[str, str], dtype: str = "auto", seed: int = 0,
                 max_prompt_tokens: int = 1024, device: str = "cpu", max_batch_size: int = 64,
                 threads: int = 0, drop_finished: bool = True, lean_forward: bool = True,
                 cpu_kernels: bool = True):
        if not policies:
            raise ValueError("HFEngine needs at least one policy (name -> model path)")
        if max_prompt_tokens < 1 or max_batch_size < 1:
            raise ValueError("max_prompt_tokens and max_batch_size must be >= 1")
        if threads > 0:
            torch.set_num_threads(threads)
        self.seed = int(seed)
        self.device = torch.device(device)
        self.dtype = resolve_dtype(dtype, self.device)  # auto: bf16 only where the hardware computes it natively
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.max_batch_size = int(max_batch_size)
        self.drop_finished = drop_finished  # off only to check that dropping changes nothing
        self._calls = 0
        self.decoded_tokens = 0  # tokens sampled so far, counted as they come (progress lines read it)
        self._slots: dict[str, _ModelSlot] = {}  # resolved path -> slot
        self._policy_slot: dict[str, _ModelSlot] = {}
        self._overrides: dict[str, dict[str, torch.Tensor]] = {}  # policy -> its own tensors
        for policy, path in policies.items():
            local = resolve_model_path(path)
            if local not in self._slots:
                vision = is_vision_folder(local)
                model = (load_vision_lm if vision else load_causal_lm)(local, self.dtype, device)
                model.requires_grad_(False)
                own_memory(model)
                pack_linears(model)
                processor = load_processor(local) if vision else None
                tokenizer = processor.tokenizer if vision else load_tokenizer(local)
                params = dict(model.state_dict(keep_vars=True))
                kwarg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
                lean = LeanLlama(model, kernels=cpu_kernels) if lean_forward and LeanLlama.supports(model) else None
                self._slots[local] = _ModelSlot(local, model, tokenizer, set(eos_token_ids(model, tokenizer)),
                                                kwarg, params, [], lean=lean, processor=processor)
            self._slots[local].policies.append(policy)
            self._policy_slot[policy] = self._slots[local]

    # ------------------------------------------------------------ weights

    def _slot(self, policy: str) -> _ModelSlot:
        try:
            return self._policy_slot[policy]
        except KeyError:
            raise ValueError(f"unknown policy {policy!r}; this engine serves {sorted(self._policy_slot)}") from None

    def tokenizer(self, policy: str) -> Any:
        return self._slot(policy).tokenizer

    @torch.no_grad()
    def load_weights(self, policy: str, weights: Mapping[str, Any]) -> None:
        slot = self._slot(policy)
        self._wake(slot)
        checked = {}
        for name, value in weights.items():  # validate everything before changing anything
            if name not in slot.params:
                raise KeyError(f"load_weights({policy!r}): {slot.path} has no tensor named {name!r}")
            tensor = torch.as_tensor(value).detach()
            if tuple(tensor.shape) != tuple(slot.params[name].shape):
                raise ValueError(f"load_weights({policy!r}): {name} has shape {tuple(tensor.shape)}, "
                                 f"expected {tuple(slot.params[name].shape)}")
            checked[name] = tensor
        if len(slot.policies) > 1:
            self._snapshot_base(slot, checked)  # all snapshots before any copy: tied names share storage
        for name in checked:
            slot.merged.pop(name, None)
        self._write(slot, policy, ((name, lambda out, t=t: out.copy_(t)) for name, t in checked.items()))

    def _write(self, slot: _ModelSlot, policy: str, items: Iterable[tuple[str, Callable[[torch.Tensor], Any]]]) -> None:
        """Store checked tensors as `policy`'s, one at a time: each item's `fill(out)` writes the
        tensor into a tensor shaped and typed like the live one (the live one itself when no other
        policy uses this model)."""
        own = self._overrides.setdefault(policy, {}) if len(slot.policies) > 1 else None
        for name, fill in items:
            live = slot.params[name]
            if own is None:  # nobody else uses this model: write straight into it
                if name in slot.aliased:  # never into the trainer's tensor: a buffer of our own
                    live.data = torch.empty_like(live)
                    slot.aliased.discard(name)
                fill(live)
                continue
            own[name] = torch.empty_like(live)
            fill(own[name])
            if slot.active == policy:
                live.copy_(own[name])

    @staticmethod
    def _snapshot_base(slot: _ModelSlot, names: Any) -> None:
        """Keep the base value of each tensor before its first override by any policy (until
        then the live tensor still holds the base)."""
        for name in names:
            if name not in slot.base:
                slot.base[name] = slot.params[name].detach().clone()

    @torch.no_grad()
    def update_weights(self, update: WeightUpdate) -> None:
        if update.kind == "full":  # its tensors, or the file its path names
            self.load_weights(update.policy, dict(full_weights(update)))
            return
        slot = self._slot(update.policy)
        factors = lora_factors(update)
        for name, f in factors.items():
            shape = slot.released.get(name, slot.params[name].shape if name in slot.params else None)
            if shape is None or tuple(shape) != f.shape:
                raise ValueError(f"LoRA update of {update.policy!r}: {name} (shape {f.shape}) does "
                                 f"not fit {slot.path}")
        self._wake(slot, overwritten=factors)
        self._snapshot_base(slot, factors)
        if len(slot.policies) == 1:
            slot.merged.update(factors)
        # Merged one weight at a time, straight into its destination (our kernel where the lean
        # forward runs ours: one pass; else one fp32 delta at a time, not the whole model's).
        kernel = slot.lean.kernel if slot.lean is not None else None
        self._write(slot, update.policy, ((name, lambda out, f=f, base=slot.base[name]: f.merge(base, out, kernel))
                                          for name, f in factors.items()))

    @torch.no_grad()
    def share_base(self, policy: str, tensors: Mapping[str, torch.Tensor]) -> int:
        """Take `tensors` (model names) as the base values that LoRA updates of `policy` merge
        into, instead of snapshotting this engine's own copies: a trainer in this process holds the
        same frozen base, so the engine need not keep a second one. On a model that serves only
        `policy`, the live weights become those tensors too until an update writes them (then
        into a buffer of the engine's own), so weights no adapter changes (embeddings, norms)
        are never held twice. Only tensors equal to what the engine holds now (same dtype and
        device, no update applied yet) are taken; the caller must never write them. Returns how
        many were taken."""
        slot = self._slot(policy)
        self._wake(slot)
        taken = 0
        for name, tensor in tensors.items():
            live = slot.params.get(name)
            if live is None or name in slot.base or tensor.dtype != live.dtype or tensor.device != live.device \
                    or tensor.shape != live.shape or not torch.equal(tensor, live):
                continue
            slot.base[name] = tensor.detach()
            if len(slot.policies) == 1:
                live.data = slot.base[name]
                slot.aliased.add(name)
            taken += 1
        return taken

    @torch.no_grad()
    def sleep(self) -> None:
        """While the policies train: drop what the next weight sync rewrites or the next
        generation rebuilds anyway: the lean forward's packed weight copies (or `pack_linears`'
        oneDNN copies) and, on a model that serves one policy, the weights a LoRA update merged
        (base + adapter; merged again from the same factors if no new update comes first)."""
        for slot in self._slots.values():
            if slot.lean is not None:
                slot.lean.release()
            for module in slot.model.modules():
                if getattr(module, "_packed_key", None) is not None:
                    module._packed, module._packed_key = None, None
            for name in slot.merged:
                if name not in slot.released and name in slot.base:
                    live = slot.params[name]
                    slot.released[name] = live.shape
                    live.data = live.new_empty(0)

    @torch.no_grad()
    def _wake(self, slot: _ModelSlot, overwritten: Container[str] = ()) -> None:
        """Give back the weights `sleep` freed: merged again from their factors, or only
        allocated for the names in `overwritten` (the caller writes them next)."""
        kernel = slot.lean.kernel if slot.lean is not None else None
        for name, shape in slot.released.items():
            live = slot.params[name]
            live.data = torch.empty(shape, dtype=live.dtype, device=live.device)
            if name not in overwritten:
                slot.merged[name].merge(slot.base[name], live, kernel)
        slot.released.clear()

    @torch.no_grad()
    def _activate(self, slot: _ModelSlot, policy: str) -> None:
        self._wake(slot)
        if slot.active == policy:
            return
        current = self._overrides.get(slot.active, {}) if slot.active is not None else {}
        wanted = self._overrides.get(policy, {})
        for name in current:
            if name not in wanted:
                slot.params[name].copy_(slot.base[name])
        for name, tensor in wanted.items():
            slot.params[name].copy_(tensor)
        slot.active = policy

    # ------------------------------------------------------------ requests

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        requests = [r if isinstance(r, GenerationRequest) else GenerationRequest.from_dict(r) for r in requests]
        for r in requests:
            check_params(r)
            self._slot(r.policy)
        call = self._calls
        self._calls += 1
        results: list[list[Completion]] = [[] for _ in requests]
        for policy in dict.fromkeys(r.policy for r in requests):  # policies in first-seen order
            slot = self._slot(policy)
            self._activate(slot, policy)
            prompts, pixels = self._prompts(slot, {i: r for i, r in enumerate(requests) if r.policy == policy})
            rows = []
            for i in prompts:
                p = requests[i].params
                for c in range(p.n):
                    seed = derive_seed(p.seed, c) if p.seed is not None else derive_seed(self.seed, call, i, c)
                    penalty = float(p.repetition_penalty)
                    rows.append(_Row(i, c, seed, float(p.temperature), int(p.top_k), float(p.top_p),
                                     int(p.max_new_tokens), list(p.stop), float(p.min_p), penalty,
                                     set(prompts[i]) if penalty != 1.0 else set()))
            for start in range(0, len(rows), self.max_batch_size):
                self._decode(slot, rows[start:start + self.max_batch_size], prompts, pixels)
            for row in rows:
                text = row.text if row.text is not None else slot.tokenizer.decode(row.tokens, skip_special_tokens=True)
                req = requests[row.request]
                results[row.request].append(Completion(
                    request_id=req.request_id, policy=policy, index=row.copy,
                    prompt_ids=list(prompts[row.request]), response_ids=row.tokens,
                    logprobs=row.logprobs, text=text, finish_reason=row.finish or "length"))
        return results

    def _prompts(self, slot: _ModelSlot, requests: dict[int, GenerationRequest]) -> tuple[dict, dict]:
        """Prompt ids per request and, on a vision model, (image hashes, pixel inputs) per request."""
        if slot.processor is None:
            return {i: prompt_ids(slot.tokenizer, r, self.max_prompt_tokens) for i, r in requests.items()}, {}
        prompts, pixels = {}, {}
        for i, r in requests.items():
            if r.prompt_ids is not None:  # ids given (a text chat extending an earlier call): no images
                prompts[i], pixels[i] = prompt_ids(slot.tokenizer, r, self.max_prompt_tokens), ((), {})
                continue
            ids, images, px = encode_prompt(slot.processor, r.messages, self.max_prompt_tokens, r.request_id)
            prompts[i], pixels[i] = ids, (tuple(image_hash(im) for im in images), px)
        return prompts, pixels

    # ------------------------------------------------------------ decoding

    def _forward(self, slot: _ModelSlot, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: Any, pixels: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        if slot.lean is not None:
            return slot.lean.forward(ids, mask, positions, cache)
        # An all-ones mask is the same as none; passing none lets attention take its fast path.
        out = slot.model(input_ids=ids, attention_mask=None if bool(mask.all()) else mask,
                         position_ids=positions, use_cache=True, logits_to_keep=last_position(ids),
                         **{slot.cache_kwarg: cache}, **(pixels or {}))
        return out.logits[:, -1, :].float()

    def _prefill_pixels(self, slot: _ModelSlot, order: list[int], pixels: dict, ids: torch.Tensor,
                        mask: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The prefill's pixel inputs (the distinct prompts' images, in row order: each image is
        encoded once per distinct prompt, so K candidates share one vision encoding) and its
        [3, B, L] multimodal positions."""
        parts = [pixels[i][1] for i in order if pixels[i][1]]
        px = {k: torch.cat([p[k] for p in parts]).to(self.device) for k in ("pixel_values", "image_grid_thw")} \
            if parts else {}
        return px, rope_positions(slot.model, ids, mask, px.get("image_grid_thw"))

    @torch.inference_mode()
    def _decode(self, slot: _ModelSlot, rows: list[_Row], prompts: dict[int, list[int]],
                pixels: dict | None = None) -> None:
        dev = self.device
        # Prefill each distinct prompt once: a request's n copies, and separate requests with the
        # same prompt (ids and images: a rollout's K candidates sent as K requests) share its cache rows.
        def key_of(i: int) -> tuple:
            return (tuple(prompts[i]), pixels[i][0] if pixels else ())

        first: dict[tuple, int] = {}  # prompt -> position in `order`
        order: list[int] = []  # one request per distinct prompt, in first-seen order
        for r in rows:
            key = key_of(r.request)
            if key not in first:
                first[key] = len(order)
                order.append(r.request)
        longest = max(len(prompts[i]) for i in order)
        ids = torch.full((len(order), longest), slot.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(order), longest), dtype=torch.long)
        for j, i in enumerate(order):  # left padding: every prompt ends at the last column
            ids[j, longest - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[j, longest - len(prompts[i]):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        px: dict[str, torch.Tensor] = {}
        if slot.processor is not None:
            px, positions = self._prefill_pixels(slot, order, pixels, ids, mask)
            last = positions.amax(0)  # a prompt ends in text: its three position rows agree there
        else:
            positions = last = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = buffered_cache(slot.model.config, longest + max(r.max_new for r in rows))
        logits = self._forward(slot, ids, mask, positions, cache, px)
        # Expand prompts to their n copies: the cache rows are shared, not recomputed.
        expand = torch.tensor([first[key_of(r.request)] for r in rows], device=dev)
        if len(order) != len(rows) or bool((expand != torch.arange(len(rows), device=dev)).any()):
            cache.batch_select_indices(expand)
            logits, mask = logits[expand], mask[expand]
        next_pos = last[expand, -1] + 1
        uniforms = torch.zeros((len(rows), max(r.max_new for r in rows)))
        for j, r in enumerate(rows):  # each row's own stream: independent of batch composition
            uniforms[j, :r.max_new] = torch.rand(r.max_new, generator=torch.Generator().manual_seed(r.seed))
        live = list(range(len(rows)))  # row indices, aligned with the batch dimension
        step = 0
        while True:
            active = [rows[i] for i in live]
            tokens, logprobs = sample(penalised(logits, active), active, uniforms[live, step].to(dev),
                                      slot.lean.kernel if slot.lean is not None else None)
            for row, tok, lp in zip(active, tokens.tolist(), logprobs.tolist()):
                if row.finish is None:  # with drop_finished off, finished rows ride along unused
                    row.tokens.append(tok)
                    row.logprobs.append(lp)
                    if row.repetition_penalty != 1.0:
                        row.seen.add(tok)
                    self._check_finished(slot, row)
                    self.decoded_tokens += 1
            step += 1
            keep = [j for j, i in enumerate(live) if rows[i].finish is None]
            if not keep:
                return
            if self.drop_finished and len(keep) < len(live):
                keep_t = torch.tensor(keep, device=dev)
                cache.batch_select_indices(keep_t)
                mask, tokens, next_pos = mask[keep_t], tokens[keep_t], next_pos[keep_t]
                live = [live[j] for j in keep]
                mask = self._trim_left_padding(cache, mask)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            logits = self._forward(slot, tokens[:, None], mask, next_pos[:, None], cache)
            next_pos = next_pos + 1

    @staticmethod
    def _trim_left_padding(cache: Any, mask: torch.Tensor) -> torch.Tensor:
        """Drop cache columns that are padding for every remaining row (left after rows finished)."""
        first = int(mask.any(0).to(torch.int8).argmax())
        if first == 0 or not drop_front(cache, first):
            return mask
        return mask[:, first:]

    def _check_finished(self, slot: _ModelSlot, row: _Row) -> None:
        if row.tokens[-1] in slot.eos_ids:
            row.finish = "stop"
            return
        if row.stops:
            text = slot.tokenizer.decode(row.tokens, skip_special_tokens=True)
            hits = [i for i in (text.find(s) for s in row.stops) if i >= 0]
            if hits:  # checked every token, so this token completed the earliest stop string
                row.text, row.finish = text[:min(hits)], "stop"
                return
        if len(row.tokens) >= row.max_new:
            row.finish = "length"
