"""Our Samples as verl's batch, and our PPO loss as verl's loss function.

`to_verl_batch` lays the engine's own token ids out the way verl's trainer does
(prompts left-padded, responses right-padded, per-token advantages, old logprobs)
as a DataProto, then converts it with verl's own `left_right_2_no_padding`: nothing
is re-tokenised.

`policy_loss` runs inside verl's FSDP engine (`TrainingWorker.set_loss_fn`). It is
`pettingllms.algorithms.loss.ppo_loss` with verl's global normalisation: each rank
divides by the token count of the whole mini-batch (all ranks) and multiplies by the
data-parallel size, because FSDP averages gradients over ranks. The result is the
same objective on 1 or N ranks (tests/test_verl_backend.py checks it against local).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from pettingllms.records import Sample

ALGO_KEYS = ("clip_low", "clip_high", "dual_clip_c", "kl_coef", "entropy_coef", "loss_agg")


def algo_dict(algo: Any) -> dict[str, Any]:
    """The loss fields of `algorithm`, as plain values (the loss runs in Ray workers)."""
    return {k: (None if algo[k] is None else (str(algo[k]) if k == "loss_agg" else float(algo[k])))
            for k in ALGO_KEYS}


def padded_rows(samples: Sequence[Sample], ranks: int, micro: int = 1) -> tuple[list[Optional[int]], int]:
    """Sample indices padded with None so each of `ranks` gets the same number of rows, a multiple
    of its micro-batch size (verl splits evenly); returns (rows, micro-batch size per rank)."""
    ranks = max(1, ranks)
    per_rank = -(-len(samples) // ranks)
    mbs = max(1, min(micro, per_rank))
    per_rank = -(-per_rank // mbs) * mbs
    rows: list[Optional[int]] = list(range(len(samples)))
    rows += [None] * (per_rank * ranks - len(rows))
    return rows, mbs


def to_verl_batch(samples: Sequence[Sample], rows: Sequence[Optional[int]], pad_id: int, temperature: float,
                  old: Optional[Sequence[Sequence[float]]] = None,
                  ref: Optional[Sequence[Sequence[float]]] = None):
    """A DataProto in verl's padded layout. A None row repeats the first sample with an
    all-zero response mask: it adds nothing to the loss or to the token count."""
    from verl import DataProto

    src = [samples[i] if i is not None else samples[0] for i in rows]
    real = [i is not None for i in rows]
    B = len(src)
    P = max(len(s.prompt_ids) for s in src)
    R = max(len(s.response_ids) for s in src)
    prompts = torch.full((B, P), pad_id, dtype=torch.long)
    responses = torch.full((B, R), pad_id, dtype=torch.long)
    attention = torch.zeros((B, P + R), dtype=torch.long)
    response_mask = torch.zeros((B, R), dtype=torch.float32)
    advantages = torch.zeros((B, R), dtype=torch.float32)
    old_t = torch.zeros((B, R), dtype=torch.float32)
    ref_t = torch.zeros((B, R), dtype=torch.float32)
    for b, s in enumerate(src):
        p, r = len(s.prompt_ids), len(s.response_ids)
        prompts[b, P - p:] = torch.as_tensor(list(s.prompt_ids), dtype=torch.long)
        responses[b, :r] = torch.as_tensor(list(s.response_ids), dtype=torch.long)
        attention[b, P - p: P + r] = 1
        if real[b]:
            response_mask[b, :r] = 1.0
            advantages[b, :r] = float(s.advantage)
            if old is not None:
                old_t[b, :r] = torch.as_tensor(list(old[rows[b]]), dtype=torch.float32)
            if ref is not None:
                ref_t[b, :r] = torch.as_tensor(list(ref[rows[b]]), dtype=torch.float32)
    position_ids = torch.clamp(attention.cumsum(dim=-1) - 1, min=0)
    tensors = {"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
               "attention_mask": attention, "position_ids": position_ids, "response_mask": response_mask,
               "advantages": advantages}
    if old is not None:
        tensors["old_log_probs"] = old_t
    if ref is not None:
        tensors["ref_log_prob"] = ref_t
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": float(temperature)})


def to_tensordict(batch: Any, **meta: Any):
    """verl's no-padding TensorDict (nested token ids) plus the given non-tensor fields."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    td = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(td, **meta)
    return td


def response_values(nested: torch.Tensor, td: Any) -> torch.Tensor:
    """verl's per-token output over [prompt + response] -> [B, R] on the response tokens."""
    from verl.workers.utils.padding import no_padding_2_padding
    return no_padding_2_padding(nested, td)


def policy_loss(algo: dict[str, Any], model_output: dict, data: Any, dp_group: Any = None):
    """verl loss-function signature; our ppo_loss with verl's global token/sequence counts."""
    from verl.utils.metric import AggregationType, Metric

    from pettingllms.algorithms.loss import ppo_loss
    from pettingllms.config.schema import AlgorithmConfig

    log_prob = response_values(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = response_values(entropy, data)
    fields = [k for k in ("response_mask", "advantages", "old_log_probs", "ref_log_prob") if k in data.keys()]
    padded = data.select(*fields).to_padded_tensor()
    mask = padded["response_mask"].to(log_prob.dtype)
    old = padded["old_log_probs"].float() if "old_log_probs" in fields else log_prob.detach().float()
    ref = padded["ref_log_prob"].float() if "ref_log_prob" in fields else None
    dp = float(data["dp_size"])
    tokens = float(data["batch_num_tokens"])
    seqs = float(data["global_batch_size"])
    loss, m = ppo_loss(log_prob.float(), old, padded["advantages"].float(), mask, AlgorithmConfig(**algo),
                       ref_logprobs=ref, entropy=entropy.float() if entropy is not None else None,
                       global_tokens=tokens / dp, global_seqs=seqs / dp)
    # Globally normalised terms add up over micro-batches (verl averages SUM metrics over ranks, as
    # FSDP does gradients); ratios are per-call means. verl reports the loss itself.
    m.pop("loss", None)
    summed = ("pg_loss", "entropy", "kl")
    metrics = {k: Metric(AggregationType.SUM if k in summed else AggregationType.MEAN, v) for k, v in m.items()}
    return loss, metrics
