"""Token logprobs of sampled responses without batch x length x vocab logits.

The transformer body runs to hidden states; only the rows that predict response
tokens are gathered, and lm_head + log_softmax + gather (+ entropy) run over them
in chunks of `chunk` tokens. With grad enabled and more than one chunk, each chunk runs
under `torch.utils.checkpoint`, so backward recomputes that chunk's logits instead of
keeping them: peak logits memory is one chunk x vocab, not batch x length x vocab (with a
single chunk that peak is the same either way, so it is not recomputed).

The target's log-prob is one autograd function (`target_logprobs`): it keeps the chunk's
logits as the LM head made them (bf16 under autocast) and the row normalisers, and its
backward is softmax - onehot from those, instead of autograd's chain of an fp32 copy, the
temperature division, log_softmax (keeping its fp32 output) and a gather (whose backward
scatters into a zero [rows, vocab] tensor). Where the head is a plain nn.Linear, the head is
inside that function too (`linear_target_logprobs`): its backward turns a few rows of the
logits at a time into hidden (and head) gradients, so no [N, vocab] gradient is ever whole;
its fp32 temporaries are a few rows as well. That is the update's peak memory on CPU: the
logits chunk and its gradient sit on top of every saved activation.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pettingllms.records import Sample


@dataclass
class PackedBatch:
    """Right-padded [prompt + response] sequences and their response-token view."""
    input_ids: Tensor  # [B, L]
    attention_mask: Tensor  # [B, L]
    prompt_lens: list[int]
    response_lens: list[int]
    mask: Tensor  # [B, T] float, 1 on real response tokens (T = longest response)
    targets: Tensor  # [B, T] response token ids (0 on padding)
    row_idx: Tensor  # [N] batch row of each response token (N = sum of response lengths)
    col_idx: Tensor  # [N] its index within the response
    pos_idx: Tensor  # [N] the sequence position whose hidden state predicts it
    shared: Optional["SharedPrompts"] = None  # set when samples repeat a prompt (K candidates)
    pixels: Optional[dict] = None  # a VLM's pixel_values / image_grid_thw for these rows' images

    @property
    def num_tokens(self) -> int:
        return int(self.row_idx.numel())

    def to_padded(self, flat: Tensor) -> Tensor:
        """[N] per-token values -> [B, T] with zeros on padding (differentiable)."""
        out = flat.new_zeros(self.mask.shape)
        return out.index_put((self.row_idx.to(flat.device), self.col_idx.to(flat.device)), flat)

    def padded_values(self, rows: Sequence[Sequence[float]], dtype=torch.float32) -> Tensor:
        """Per-sample lists (one value per response token) -> [B, T]."""
        out = torch.zeros(self.mask.shape, dtype=dtype)
        for b, vals in enumerate(rows):
            if len(vals):
                out[b, : len(vals)] = torch.as_tensor(list(vals), dtype=dtype)
        return out


@dataclass
class SharedPrompts:
    """The same batch as distinct prompts (left-padded, run once) plus responses (right-padded,
    run on the prompts' KV cache expanded to every sample): K candidates of one prompt then cost
    one prompt forward instead of K. Same numbers as the [prompt + response] rows, up to rounding."""
    prompt_ids: Tensor  # [U, P] distinct prompts, left-padded
    prompt_mask: Tensor  # [U, P]
    owner: Tensor  # [B] the prompt row of each sample
    response_ids: Tensor  # [B, T] right-padded
    response_mask: Tensor  # [B, T]


def share_prompts(samples: Sequence[Sample], pad_id: int) -> Optional[SharedPrompts]:
    """The shared-prompt layout, or None when no two samples have the same prompt."""
    index: dict[tuple[int, ...], int] = {}
    owner = [index.setdefault(tuple(s.prompt_ids), len(index)) for s in samples]
    if len(index) == len(samples):
        return None
    P, T = max(len(p) for p in index), max(len(s.response_ids) for s in samples)
    prompt_ids = torch.full((len(index), P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(index), P), dtype=torch.long)
    for prompt, u in index.items():
        prompt_ids[u, P - len(prompt):] = torch.as_tensor(prompt, dtype=torch.long)
        prompt_mask[u, P - len(prompt):] = 1
    response_ids = torch.full((len(samples), T), pad_id, dtype=torch.long)
    response_mask = torch.zeros((len(samples), T), dtype=torch.long)
    for b, s in enumerate(samples):
        response_ids[b, : len(s.response_ids)] = torch.as_tensor(list(s.response_ids), dtype=torch.long)
        response_mask[b, : len(s.response_ids)] = 1
    return SharedPrompts(prompt_ids, prompt_mask, torch.tensor(owner), response_ids, response_mask)


def pack(samples: Sequence[Sample], pad_id: int = 0, share: bool = False) -> PackedBatch:
    if not samples:
        raise ValueError("pack() needs at least one sample")
    plens = [len(s.prompt_ids) for s in samples]
    rlens = [len(s.response_ids) for s in samples]
    if min(plens) < 1:
        raise ValueError("every sample needs at least one prompt token (the first response token is "
                         "predicted from the last prompt position)")
    B, L, T = len(samples), max(p + r for p, r in zip(plens, rlens)), max(rlens)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    targets = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    rows, cols, poss = [], [], []
    for b, s in enumerate(samples):
        p, r = plens[b], rlens[b]
        input_ids[b, : p + r] = torch.as_tensor(list(s.prompt_ids) + list(s.response_ids), dtype=torch.long)
        attention_mask[b, : p + r] = 1
        if r:
            targets[b, :r] = torch.as_tensor(list(s.response_ids), dtype=torch.long)
            mask[b, :r] = 1.0
            rows.append(torch.full((r,), b, dtype=torch.long))
            cols.append(torch.arange(r))
            poss.append(torch.arange(p - 1, p - 1 + r))
    empty = torch.zeros(0, dtype=torch.long)
    return PackedBatch(
        input_ids=input_ids, attention_mask=attention_mask, prompt_lens=plens, response_lens=rlens,
        mask=mask, targets=targets,
        row_idx=torch.cat(rows) if rows else empty, col_idx=torch.cat(cols) if cols else empty,
        pos_idx=torch.cat(poss) if poss else empty,
        shared=share_prompts(samples, pad_id) if share and T > 0 else None)


def at_least_fp32(x: Tensor) -> Tensor:
    """Upcast bf16/fp16 to fp32 for softmax; fp64 stays fp64 (tests check exactness in it)."""
    return x if x.dtype == torch.float64 else x.float()


# Rows of fp32 [rows, vocab] temporaries at a time in the target log-prob: the whole [N, vocab]
# block in fp32 would be twice the bf16 logits again, alive on top of the saved activations.
_ROWS = 128


def _target_and_lse(logits: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """Per row: log softmax(logits / T)[target] and logsumexp(logits / T), _ROWS rows at a time."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    lse = logits.new_empty(logits.shape[0], dtype=dtype)
    out = logits.new_empty(logits.shape[0], dtype=dtype)
    for s in range(0, logits.shape[0], _ROWS):
        x = _scaled_copy(logits[s: s + _ROWS], temperature)
        lse[s: s + _ROWS] = torch.logsumexp(x, dim=-1)
        out[s: s + _ROWS] = x.gather(-1, targets[s: s + _ROWS, None]).squeeze(-1) - lse[s: s + _ROWS]
    return out, lse


def _logits_grad(logits: Tensor, targets: Tensor, lse: Tensor, grad: Tensor, temperature: float) -> Tensor:
    """d(grad . target log-prob)/d logits of some rows: (onehot(target) - softmax(logits / T)) *
    grad / T, in the logits' dtype (computed in at least fp32)."""
    g = grad.to(lse.dtype)[:, None] / temperature
    probs = _scaled_copy(logits, temperature).sub_(lse[:, None]).exp_()
    return probs.mul_(-g).scatter_add_(-1, targets[:, None], g).to(logits.dtype)


class _TargetLogprob(torch.autograd.Function):
    """log softmax(logits / T)[target] per row, computed in (at least) fp32."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float) -> Tensor:
        out, lse = _target_and_lse(logits, targets, temperature)
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature = temperature
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, targets, lse = ctx.saved_tensors
        return _logits_grad(logits, targets, lse, grad, ctx.temperature), None, None


class _LinearTargetLogprob(torch.autograd.Function):
    """log softmax(linear(hidden) / T)[target] per row, the LM head inside: backward goes from
    the saved logits to the hidden gradient _ROWS rows at a time, so under a frozen head (LoRA)
    no [N, vocab] gradient is ever whole; fp32 temporaries are _ROWS rows either way. The
    matmuls run in the autocast dtype when autocast is on (as the head module would), the
    softmax in at least fp32."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Optional[Tensor], targets: Tensor,
                temperature: float) -> Tensor:
        kind = hidden.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else \
            torch.promote_types(hidden.dtype, weight.dtype)
        h, w = hidden.to(dtype), weight.to(dtype)
        with torch.autocast(kind, enabled=False):
            logits = F.linear(h, w, bias.to(dtype) if bias is not None else None)
        out, lse = _target_and_lse(logits, targets, temperature)
        ctx.save_for_backward(h, w, logits, targets, lse)
        ctx.temperature, ctx.dtypes = temperature, (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        h, w, logits, targets, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        need_b = need_b and ctx.dtypes[2] is not None

        def block(s: int) -> Tensor:
            rows = slice(s, s + _ROWS)
            return _logits_grad(logits[rows], targets[rows], lse[rows], grad[rows], ctx.temperature)

        grad_h = grad_w = grad_b = None
        if need_w or need_b:
            # The head trains (full fine-tuning): its gradient sums over every row, so the [N, vocab]
            # gradient is made whole, in the logits' dtype as the head module's backward makes it,
            # and each product is one GEMM (blocks of rows would add a [vocab, H] pass per block).
            gl = torch.empty_like(logits)
            for s in range(0, logits.shape[0], _ROWS):
                gl[s: s + _ROWS] = block(s)
            grad_h = gl.mm(w) if need_h else None
            grad_w = gl.t().mm(h) if need_w else None
            grad_b = gl.sum(0) if need_b else None
        elif need_h:
            grad_h = torch.empty_like(h)
            for s in range(0, logits.shape[0], _ROWS):
                torch.mm(block(s), w, out=grad_h[s: s + _ROWS])
        return tuple(g.to(d) if g is not None else None for g, d in zip((grad_h, grad_w, grad_b), ctx.dtypes)) \
            + (None, None)


def _scaled_copy(logits: Tensor, temperature: float) -> Tensor:
    x = logits.to(torch.promote_types(logits.dtype, torch.float32), copy=True)
    return x.div_(temperature) if temperature != 1.0 else x


def target_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """[N, V] logits, [N] targets -> [N] log-probs of the targets under softmax(logits / T)."""
    return _TargetLogprob.apply(logits, targets, float(temperature))


def linear_target_logprobs(hidden: Tensor, head: torch.nn.Linear, targets: Tensor,
                           temperature: float = 1.0) -> Tensor:
    """[N, H] hidden, [N] targets -> [N] log-probs of the targets under softmax(head(hidden) / T)."""
    return _LinearTargetLogprob.apply(hidden, head.weight, head.bias, targets, float(temperature))


def _plain_linear(module: torch.nn.Module) -> bool:
    """A bare nn.Linear whose call nothing observes (no hooks), so its weight can be used directly."""
    return (type(module) is torch.nn.Linear and not module._forward_hooks and not module._forward_pre_hooks
            and not torch.nn.modules.module._global_forward_hooks
            and not torch.nn.modules.module._global_forward_pre_hooks)


def _chunk_logprobs(hidden: Tensor, targets: Tensor, lm_head: torch.nn.Module, temperature: float,
                    softcap: Optional[float], with_entropy: bool):
    if not softcap and not with_entropy:
        if _plain_linear(lm_head):
            return linear_target_logprobs(hidden, lm_head, targets, temperature), None
        return target_logprobs(lm_head(hidden), targets, temperature), None
    logits = at_least_fp32(lm_head(hidden))
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return logp, None
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def token_logprobs(hidden: Tensor, targets: Tensor, lm_head: torch.nn.Module, chunk: int,
                   temperature: float = 1.0, softcap: Optional[float] = None,
                   with_entropy: bool = False) -> tuple[Tensor, Optional[Tensor]]:
    """hidden [N, H], targets [N] -> logprobs [N] (and entropy [N]), `chunk` rows at a time."""
    if chunk <= 0:
        raise ValueError("logprob chunk must be > 0")
    use_ckpt = torch.is_grad_enabled() and hidden.shape[0] > chunk
    lps, ents = [], []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start: start + chunk], targets[start: start + chunk]
        if use_ckpt:
            lp, ent = checkpoint(_chunk_logprobs, h, t, lm_head, temperature, softcap, with_entropy,
                                 use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(h, t, lm_head, temperature, softcap, with_entropy)
        lps.append(lp)
        ents.append(ent)
    if not lps:
        empty = at_least_fp32(hidden.new_zeros(0))
        return empty, (empty if with_entropy else None)
    return torch.cat(lps), (torch.cat(ents) if with_entropy else None)


def causal_lm_parts(model: torch.nn.Module):
    """(body, lm_head, softcap) of a HF causal LM, or of a peft model wrapping one.

    The body's LoRA layers are injected in place, so calling it runs the active adapter."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    lm_head = base.get_output_embeddings()
    softcap = getattr(base.config, "final_logit_softcapping", None)
    return body, lm_head, softcap


def response_logprobs(model: torch.nn.Module, batch: PackedBatch, chunk: int, temperature: float = 1.0,
                      with_entropy: bool = False) -> tuple[Tensor, Optional[Tensor]]:
    """[B, T] logprobs of the response tokens (zeros on padding), and entropy if asked."""
    body, lm_head, softcap = causal_lm_parts(model)
    device = lm_head.weight.device
    targets = batch.input_ids[batch.row_idx, batch.pos_idx + 1].to(device)
    if batch.shared is not None:
        rows = _shared_prompt_rows(body, batch, device)
    else:
        extra = {}
        if batch.pixels:  # a VLM: the multimodal body (vision tower + language model), its positions
            from pettingllms.utils.vision import rope_positions

            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            body = base.model
            extra = {k: v.to(device) for k, v in batch.pixels.items()}
            extra["position_ids"] = rope_positions(base, batch.input_ids.to(device), batch.attention_mask.to(device),
                                                   extra["image_grid_thw"])
        out = body(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                   use_cache=False, **extra)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        rows = hidden[batch.row_idx.to(device), batch.pos_idx.to(device)]
    lp, ent = token_logprobs(rows, targets, lm_head, chunk, temperature, softcap, with_entropy)
    return batch.to_padded(lp), (batch.to_padded(ent) if ent is not None else None)


def _shared_prompt_rows(body: torch.nn.Module, batch: PackedBatch, device: torch.device) -> Tensor:
    """[N, H] hidden states that predict the response tokens, from the shared-prompt layout: the
    distinct prompts run once into a KV cache, which is expanded (a differentiable gather) to the
    samples, whose responses then run on it at their true positions."""
    from transformers import DynamicCache

    sh = batch.shared
    pmask, owner = sh.prompt_mask.to(device), sh.owner.to(device)
    kwarg = "cache" if "cache" in inspect.signature(body.forward).parameters else "past_key_values"
    cache = DynamicCache(config=body.config)
    first = body(input_ids=sh.prompt_ids.to(device), attention_mask=pmask,
                 position_ids=(pmask.cumsum(-1) - 1).clamp(min=0), use_cache=True, **{kwarg: cache})
    cache.batch_select_indices(owner)
    plens = pmask.sum(-1)[owner]
    steps = torch.arange(sh.response_ids.shape[1], device=device)
    rest = body(input_ids=sh.response_ids.to(device), attention_mask=torch.cat([pmask[owner], sh.response_mask.to(device)], 1),
                position_ids=plens[:, None] + steps[None, :], use_cache=True, **{kwarg: cache})
    last = (first.last_hidden_state if hasattr(first, "last_hidden_state") else first[0])[:, -1:]
    later = rest.last_hidden_state if hasattr(rest, "last_hidden_state") else rest[0]
    # column j predicts response token j: the prompt's last position, then response positions
    hidden = torch.cat([last[owner], later[:, :-1]], dim=1)
    return hidden[batch.row_idx.to(device), batch.col_idx.to(device)]


def full_logits_logprobs(model: torch.nn.Module, batch: PackedBatch, temperature: float = 1.0,
                         with_entropy: bool = False) -> tuple[Tensor, Optional[Tensor]]:
    """The plain computation (all logits at once). Only for tests and small checks."""
    device = next(model.parameters()).device
    out = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                use_cache=False)
    logits = at_least_fp32(out.logits).cpu()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    B, T = batch.mask.shape
    lp = logits.new_zeros(B, T)
    ent = logits.new_zeros(B, T)
    per_pos = logp_all[:, :-1].gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ent_pos = -(logp_all.exp() * logp_all).sum(-1)
    lp = lp.index_put((batch.row_idx, batch.col_idx), per_pos[batch.row_idx, batch.pos_idx])
    ent = ent.index_put((batch.row_idx, batch.col_idx), ent_pos[batch.row_idx, batch.pos_idx])
    return lp, (ent if with_entropy else None)
