"""The policy loss: PPO clip (separate low/high), dual clip, KL to the initial
policy (low_var_kl), entropy bonus, and three ways to aggregate tokens.

Semantics follow verl's `core_algos` (compute_policy_loss_vanilla, agg_loss,
kl_penalty "low_var_kl") and its actor loss (pg - entropy_coef * H + kl_coef * KL,
each aggregated the same way), so a run here and a run on verl optimise the
same objective. tests/test_loss.py checks this against verl where installed.
"""
from __future__ import annotations


import torch

from pettingllms.config.schema import AlgorithmConfig

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
_LOG_RATIO_CLAMP = 20.0  # as verl: keeps exp() finite for wildly off-policy tokens
_KL_CLAMP = 10.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / (mask.sum() + 1e-8)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, *,
             global_tokens: float | None = None, global_seqs: float | None = None) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to a scalar.

    token-mean           sum over all real tokens / number of real tokens
    seq-mean-token-sum   mean over sequences of each sequence's token sum
    seq-mean-token-mean  mean over sequences of each sequence's token mean
    Sequences with no real token do not count in the seq-means (as in verl 0.9).
    `global_tokens` / `global_seqs` replace the local denominators, so that
    micro-batches with gradient accumulation add up to the full-batch loss.
    """
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        denom = mask.sum() if global_tokens is None else global_tokens
        return (loss_mat * mask).sum() / denom
    if mode not in ("seq-mean-token-sum", "seq-mean-token-mean"):
        raise ValueError(f"unknown loss_agg '{mode}'; choose from {list(LOSS_AGG_MODES)}")
    seq_tokens = mask.sum(dim=-1)
    seq_losses = (loss_mat * mask).sum(dim=-1)
    if mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (seq_tokens + 1e-8)
    real_seqs = (seq_tokens > 0).to(loss_mat.dtype)
    denom = real_seqs.sum() if global_seqs is None else global_seqs
    return (seq_losses * real_seqs).sum() / denom


def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of KL(pi || ref) per token: exp(d) - d - 1, d = ref - logp.

    Always >= 0; clamped to [-10, 10] like verl.
    """
    d = torch.clamp(ref_logprobs - logprobs, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(d) - d - 1, -_KL_CLAMP, _KL_CLAMP)


def ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
             mask: torch.Tensor, algo: AlgorithmConfig, ref_logprobs: torch.Tensor | None = None,
             entropy: torch.Tensor | None = None, *, global_tokens: float | None = None,
             global_seqs: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO loss over [B, T] tensors; `advantages` may be [B] (one per sequence).

    `algo` is the `algorithm` block (clip_low, clip_high, dual_clip_c, kl_coef,
    entropy_coef, loss_agg). Dual clip bounds the loss of negative-advantage
    tokens at -A * dual_clip_c however large the ratio grows; None disables it.
    Returns the scalar loss and float metrics computed on this call's tokens.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.expand_as(logprobs).to(logprobs.dtype)
    mask = mask.to(logprobs.dtype)
    if old_logprobs.shape != logprobs.shape or mask.shape != logprobs.shape:
        raise ValueError(f"shape mismatch: logprobs {tuple(logprobs.shape)}, old_logprobs "
                         f"{tuple(old_logprobs.shape)}, mask {tuple(mask.shape)}")
    clip_low = float(algo.clip_low)
    clip_high = float(algo.clip_high)
    dual_clip_c = algo.dual_clip_c
    kl_coef = float(algo.kl_coef)
    entropy_coef = float(algo.entropy_coef)
    mode = str(algo.loss_agg)
    if dual_clip_c is not None and float(dual_clip_c) <= 1.0:
        raise ValueError(f"algorithm.dual_clip_c must be > 1 (or null to disable), got {dual_clip_c}")

    log_ratio = torch.clamp(logprobs - old_logprobs, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_losses = torch.maximum(loss_unclipped, loss_clipped)
    metrics: dict[str, float] = {}
    with torch.no_grad():
        metrics["clipfrac"] = masked_mean((loss_clipped > loss_unclipped).to(mask.dtype), mask).item()
    if dual_clip_c is not None:
        loss_dual = -advantages * float(dual_clip_c)
        negative = advantages < 0
        with torch.no_grad():
            hit = (pg_losses > loss_dual) & negative
            metrics["clipfrac_dual"] = masked_mean(hit.to(mask.dtype), mask).item()
        pg_losses = torch.where(negative, torch.minimum(pg_losses, loss_dual), pg_losses)

    agg = dict(global_tokens=global_tokens, global_seqs=global_seqs)
    pg_loss = agg_loss(pg_losses, mask, mode, **agg)
    loss = pg_loss
    with torch.no_grad():
        metrics["pg_loss"] = pg_loss.item()
        metrics["approx_kl"] = masked_mean(-log_ratio, mask).item()  # k1 estimate of KL(old || new)
        metrics["ratio_mean"] = masked_mean(ratio, mask).item()

    if entropy is not None:
        entropy_agg = agg_loss(entropy.to(logprobs.dtype), mask, mode, **agg)
        loss = loss - entropy_coef * entropy_agg
        metrics["entropy"] = entropy_agg.item()
    if kl_coef != 0.0 or ref_logprobs is not None:
        if ref_logprobs is None:
            raise ValueError("algorithm.kl_coef is set but no ref_logprobs were given")
        kl = agg_loss(low_var_kl(logprobs, ref_logprobs), mask, mode, **agg)
        if kl_coef != 0.0:
            loss = loss + kl_coef * kl
        metrics["kl"] = kl.item()
    metrics["loss"] = loss.item()
    return loss, metrics


def sft_nll_loss(logprobs: torch.Tensor, mask: torch.Tensor, total_tokens: float) -> torch.Tensor:
    """Supervised fine-tuning: token-level negative log-likelihood of the reply tokens.

    `logprobs` [B, T] are the reply tokens' logprobs (the prompt is never a target: it is
    masked out by construction), `mask` marks real reply tokens. Dividing by the whole batch's
    `total_tokens` (not this micro-batch's) makes accumulated micro-batches add up to the
    batch's token mean.
    """
    return -(logprobs * mask.to(logprobs.dtype)).sum() / max(float(total_tokens), 1.0)
