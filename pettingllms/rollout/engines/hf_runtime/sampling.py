"""The HF engine's sampler: one token per row from a batch of last-position logits, and its
log-prob under the distribution it was drawn from.

* The reported logprobs are exactly those of the distribution sampled from, in vLLM's order:
  repetition penalty (`penalised`, on the tokens of the prompt and the reply so far), temperature,
  min-p, top-k, then top-p on what is left (renormalised), and nothing else. Greedy rows
  (temperature 0) report the log-prob under the penalised softmax (temperature 1, no truncation)
  of the token they pick.
* Each row draws by inverse CDF with a uniform the engine gives it (each (request, copy) owns a
  seeded stream), so a row's token does not depend on what else shares the batch.
* Truncated draws look only at each row's candidate tokens (`_candidates`), found by the C++
  kernel where it runs (`cpu_kernels.top_candidates`) else by torch's topk; the same token for the
  same uniform as a draw over the whole vocabulary.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch


class RowParams(Protocol):
    """What the sampler reads of a row: its sampling parameters (the engine's `_Row`)."""
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    seen: set[int]  # token ids of the prompt and the reply so far (read when repetition_penalty != 1)


def penalised(logits: torch.Tensor, rows: Sequence[RowParams]) -> torch.Tensor:
    """`logits` with each row's repetition penalty on the tokens it has seen: a positive logit
    divided by it, a negative one multiplied (the rule of transformers and vLLM). A copy where any
    row has one; `logits` itself otherwise."""
    todo = [j for j, r in enumerate(rows) if r.repetition_penalty != 1.0 and r.seen]
    if not todo:
        return logits
    logits = logits.clone()
    for j in todo:
        ids = torch.tensor(sorted(rows[j].seen), device=logits.device)
        vals = logits[j, ids]
        penalty = float(rows[j].repetition_penalty)
        logits[j, ids] = torch.where(vals > 0, vals / penalty, vals * penalty)
    return logits


def sample(logits: torch.Tensor, rows: Sequence[RowParams], uniforms: torch.Tensor,
           kernel: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row, and its log-prob under the distribution it was drawn from.
    `kernel`: the C++ kernels (`cpu_kernels`) for the truncated draws' candidates, or None."""
    vocab = logits.shape[-1]
    dev = logits.device
    temps = torch.tensor([r.temperature for r in rows], device=dev)
    greedy = temps == 0
    divisor = torch.where(greedy, torch.ones_like(temps), temps)
    if kernel is not None and (logits.dtype != torch.float32 or logits.device.type != "cpu"):
        kernel = None
    top_k = torch.tensor([r.top_k if r.temperature > 0 and 0 < r.top_k < vocab else vocab for r in rows], device=dev)
    top_p = torch.tensor([r.top_p if r.temperature > 0 and r.top_p < 1 else 2.0 for r in rows], device=dev)  # 2.0: off
    min_p = torch.tensor([float(r.min_p) if r.temperature > 0 else 0.0 for r in rows], device=dev)
    cut = (top_k < vocab) | (top_p <= 1) | (min_p > 0)  # rows drawn from a truncated distribution
    if bool(cut.all()):  # the common case: every row from its few candidate tokens
        return _draw_truncated(_Scaled(logits, divisor, kernel), top_k, top_p, min_p, uniforms)
    logp = torch.log_softmax(logits / divisor[:, None], dim=-1)
    # greedy rows' tokens (the argmax of a batch of vocabulary rows is not free: only if any)
    tokens = logits.argmax(-1) if bool(greedy.any()) else torch.zeros(len(rows), dtype=torch.long, device=dev)
    sampled = ~greedy & ~cut
    if bool(sampled.any()):
        tokens = torch.where(sampled, _draw(logp, uniforms), tokens)
    chosen = _checked(logp, tokens)
    if bool(cut.any()):
        at = cut.nonzero().squeeze(1)
        tokens[at], chosen[at] = _draw_truncated(_Scaled(logits[at], divisor[at], kernel), top_k[at], top_p[at],
                                                 min_p[at], uniforms[at])
    return tokens, chosen


def _draw(logp: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Column index drawn by inverse CDF, each row with its own uniform (columns in their order)."""
    cdf = logp.exp().cumsum(-1)
    drawn = torch.searchsorted(cdf, (uniforms[:, None] * cdf[:, -1:]).contiguous(), right=True)
    return drawn.squeeze(1).clamp(max=logp.shape[-1] - 1)


def _checked(logp: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """logp at `index`; where float rounding at the very top of the CDF drew an excluded column
    (log-prob -inf), the row's mode instead (`index` is updated in place)."""
    chosen = logp.gather(1, index[:, None]).squeeze(1)
    bad = ~torch.isfinite(chosen)
    if bool(bad.any()):
        index.copy_(torch.where(bad, logp.argmax(-1), index))
        chosen = logp.gather(1, index[:, None]).squeeze(1)
    return chosen


class _Scaled:
    """A batch's logits over the rows' temperatures, as the truncated draw asks for them: each
    row's `count` largest values and its logsumexp over the vocabulary. Through the C++ kernel
    where it runs (one pass over the vocabulary instead of a division, a topk and a logsumexp;
    the same values, the logsumexp summed in another order), else torch."""

    def __init__(self, logits: torch.Tensor, divisor: torch.Tensor, kernel: Any = None):
        self.logits, self.divisor, self.kernel = logits, divisor, kernel
        self.vocab = logits.shape[-1]
        self._full: torch.Tensor | None = None
        self._lse: torch.Tensor | None = None

    @property
    def full(self) -> torch.Tensor:
        if self._full is None:
            self._full = self.logits / self.divisor[:, None]
        return self._full

    def top(self, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, count] values, largest first, and their token ids."""
        if self.kernel is not None and count < self.vocab:
            values, ids, lse = self.kernel.top_candidates(self.logits.contiguous(), self.divisor.float().contiguous(), count)
            self._lse = lse[:, None]
            return values, ids
        return self.full.topk(count, dim=-1)

    def logsumexp(self) -> torch.Tensor:
        """[B, 1]."""
        if self._lse is None:
            self._lse = self.full.logsumexp(-1, keepdim=True)
        return self._lse


def _draw_truncated(scaled: _Scaled, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
                    uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw from each row's min-p / top-k / top-p set over its candidate tokens only. The candidates
    are in vocabulary order, so the CDF is the full vocabulary's with the zeros left out: the same
    token for the same uniform as a full-vocabulary draw."""
    values, ids = _candidates(scaled, top_k, top_p, min_p)
    logp = torch.log_softmax(values, dim=-1)
    index = _draw(logp, uniforms)
    chosen = _checked(logp, index)
    return ids.gather(1, index[:, None]).squeeze(1), chosen


_NUCLEUS_LADDER = (64, 1024)  # top-p looks among this many largest logits in turn; a full sort only if short


def _candidates(scaled: _Scaled, top_k: torch.Tensor, top_p: torch.Tensor,
                min_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's min-p set (tokens at least min_p x as likely as the most likely one) cut to
    its top k, then the top-p nucleus of that distribution (renormalised), as (logits with -inf
    outside the set, token ids), both [B, C] with columns in vocabulary order.

    top_k == vocab, top_p > 1 and min_p == 0 mean "off"; every row has one of them on. Both
    min-p and top-k keep a prefix of the sorted logits, so their order does not matter. Looks among the 64
    largest logits, then 1024 (torch's topk costs ~linearly in k here), then sorts the whole
    vocabulary, until every row's set is inside the candidates.
    """
    vocab = scaled.vocab
    need = int(torch.where(top_k < vocab, top_k, torch.zeros_like(top_k)).max())  # a top-k row needs its k
    for count in [c for c in _NUCLEUS_LADDER if need <= c < vocab] + [vocab]:
        values, order = scaled.top(count)  # sorted, largest first
        ranks = torch.arange(count, device=values.device)
        floor = values[:, :1] + min_p.log()[:, None]  # -inf where min-p is off
        # a min-p set wider than the candidates (and no top-k to cut it): look among more
        short = (min_p > 0) & (top_k > count) & (values[:, -1] >= floor[:, 0]) & (count < vocab)
        values = values.masked_fill((ranks[None, :] >= top_k[:, None]) | (values < floor), float("-inf"))
        # Normaliser of the min-p / top-k distribution: over the candidates if they hold its whole set.
        whole = ((top_k > count) & (min_p <= 0))[:, None]  # both off: the whole vocabulary's
        norm = values.logsumexp(-1, keepdim=True)
        if bool(whole.any()):
            norm = torch.where(whole, scaled.logsumexp(), norm)
        probs = (values - norm).exp()
        mass = probs.cumsum(-1)
        if count == vocab or not bool((whole.squeeze(1) & (mass[:, -1] < top_p)).any() | short.any()):
            break  # else some nucleus is wider than the candidates
    outside = (mass - probs) >= top_p[:, None]  # mass of the strictly more likely tokens
    outside[:, 0] = False  # the most likely token always stays
    values = values.masked_fill(outside, float("-inf"))
    ids, perm = order.sort(dim=-1)
    return values.gather(1, perm), ids
