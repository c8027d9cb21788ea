"""The PPO loss: hand-computed small cases, and equality with verl's core_algos where installed."""
from __future__ import annotations

import math

import pytest
import torch

from pettingllms.algorithms.loss import agg_loss, low_var_kl, ppo_loss
from pettingllms.config.schema import AlgorithmConfig


def _cfg(**over):
    return AlgorithmConfig(**{**dict(clip_low=0.2, clip_high=0.28, dual_clip_c=3.0, kl_coef=0.0,
                                     entropy_coef=0.0, loss_agg="token-mean"), **over})


def _logp_pair(ratios):
    """logprobs / old_logprobs whose ratio exp(new - old) is each of `ratios`."""
    old = torch.full((1, len(ratios)), -1.0, dtype=torch.float64)
    new = old + torch.log(torch.tensor([ratios], dtype=torch.float64))
    return new.requires_grad_(), old


def test_clip_low_and_high_by_hand():
    new, old = _logp_pair([1.5, 0.5, 1.0])
    mask = torch.ones(1, 3)
    # A = +1: -min(r, clip(r, 0.8, 1.28)) = -1.28, -0.5, -1 -> mean -2.78 / 3
    loss, m = ppo_loss(new, old, torch.tensor([1.0]), mask, _cfg())
    assert loss.item() == pytest.approx(-2.78 / 3)
    assert m["clipfrac"] == pytest.approx(1 / 3)  # only r = 1.5 was clipped
    assert m["ratio_mean"] == pytest.approx(1.0)
    assert m["approx_kl"] == pytest.approx(-(math.log(1.5) + math.log(0.5)) / 3)
    loss.backward()
    # d/dlogp of -r * A is -r for unclipped tokens, 0 where the clip is active; / 3 for the mean
    assert new.grad.tolist()[0] == pytest.approx([0.0, -0.5 / 3, -1.0 / 3])
    # A = -1: max(r, clip(r)) = 1.5, 0.8, 1 -> mean 3.3 / 3; r = 0.5 clipped at 1 - clip_low
    loss, m = ppo_loss(new, old, torch.tensor([-1.0]), mask, _cfg())
    assert loss.item() == pytest.approx(3.3 / 3)
    assert m["clipfrac"] == pytest.approx(1 / 3)


def test_dual_clip_only_for_negative_advantages():
    new, old = _logp_pair([5.0])
    mask = torch.ones(1, 1)
    # A = -1, r = 5: PPO clip gives max(5, 1.28) = 5; dual clip caps it at c = 3
    loss, m = ppo_loss(new, old, torch.tensor([-1.0]), mask, _cfg())
    assert loss.item() == pytest.approx(3.0)
    assert m["clipfrac_dual"] == pytest.approx(1.0)
    loss, _ = ppo_loss(new, old, torch.tensor([-1.0]), mask, _cfg(dual_clip_c=None))
    assert loss.item() == pytest.approx(5.0)
    from fakes import make_cfg  # the schema config: `dual_clip_c: null` disables it too
    loss, _ = ppo_loss(new, old, torch.tensor([-1.0]), mask, make_cfg(algorithm={"dual_clip_c": None}).algorithm)
    assert loss.item() == pytest.approx(5.0)
    loss, _ = ppo_loss(new, old, torch.tensor([-1.0]), mask, make_cfg().algorithm)  # default c = 3
    assert loss.item() == pytest.approx(3.0)
    # A = +2, r = 5: ordinary clip, -2 * 1.28; dual clip does not apply
    loss, m = ppo_loss(new, old, torch.tensor([2.0]), mask, _cfg())
    assert loss.item() == pytest.approx(-2.56)
    assert m["clipfrac_dual"] == 0.0
    with pytest.raises(ValueError, match="dual_clip_c"):
        ppo_loss(new, old, torch.tensor([1.0]), mask, _cfg(dual_clip_c=1.0))


LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # last row: all padding


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", (1 + 2 + 4) / 3),
    ("seq-mean-token-sum", ((1 + 2) + 4) / 2),  # the all-padding row does not count
    ("seq-mean-token-mean", ((1 + 2) / 2 + 4) / 2),
])
def test_aggregations_by_hand(mode, expected):
    assert agg_loss(LOSS_MAT, MASK, mode).item() == pytest.approx(expected)
    # Through ppo_loss: ratio 1 and A = -loss_mat makes the per-token loss equal loss_mat.
    logp = torch.zeros(3, 3)
    loss, _ = ppo_loss(logp, logp.clone(), -LOSS_MAT, MASK, _cfg(loss_agg=mode, dual_clip_c=None))
    assert loss.item() == pytest.approx(expected)


def test_global_denominators_make_micro_batches_add_up():
    for mode, key, total in [("token-mean", "global_tokens", 3.0), ("seq-mean-token-sum", "global_seqs", 2.0)]:
        full = agg_loss(LOSS_MAT, MASK, mode)
        parts = sum(agg_loss(LOSS_MAT[i:i + 1], MASK[i:i + 1], mode, **{key: total}) for i in range(3))
        assert parts.item() == pytest.approx(full.item())


def test_bad_agg_mode():
    with pytest.raises(ValueError, match="loss_agg"):
        agg_loss(LOSS_MAT, MASK, "token-sum-ish")


def test_low_var_kl_by_hand():
    # d = ref - logp = log 0.5: exp(d) - d - 1 = 0.5 + 0.6931472 - 1 = 0.1931472
    logp = torch.zeros(1, 2)
    ref = torch.tensor([[math.log(0.5), 0.0]])
    assert low_var_kl(logp, ref).tolist()[0] == pytest.approx([0.1931472, 0.0])
    # d = 20: exp(20) - 21 is huge, clamped to 10
    assert low_var_kl(torch.zeros(1, 1), torch.full((1, 1), 25.0)).item() == 10.0
    # In the loss: A = 0, kl_coef 0.1, token-mean over both tokens -> 0.1 * 0.1931472 / 2
    loss, m = ppo_loss(logp, logp.clone(), torch.zeros(1), torch.ones(1, 2), _cfg(kl_coef=0.1), ref_logprobs=ref)
    assert m["kl"] == pytest.approx(0.1931472 / 2)
    assert loss.item() == pytest.approx(0.1 * 0.1931472 / 2)
    with pytest.raises(ValueError, match="ref_logprobs"):
        ppo_loss(logp, logp.clone(), torch.zeros(1), torch.ones(1, 2), _cfg(kl_coef=0.1))


def test_entropy_bonus_by_hand():
    logp = torch.zeros(1, 2)
    entropy = torch.tensor([[1.0, 3.0]])
    # A = 0: loss = -0.01 * mean(1, 3) = -0.02
    loss, m = ppo_loss(logp, logp.clone(), torch.zeros(1), torch.ones(1, 2), _cfg(entropy_coef=0.01),
                       entropy=entropy)
    assert loss.item() == pytest.approx(-0.02)
    assert m["entropy"] == pytest.approx(2.0)


def test_masked_tokens_carry_no_gradient():
    new, old = _logp_pair([1.1, 0.9, 1.0])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    loss, _ = ppo_loss(new, old, torch.tensor([1.0]), mask, _cfg())
    loss.backward()
    assert new.grad[0, 1].item() == 0.0 and new.grad[0, 0].item() != 0.0


# ---- equality with verl (skipped unless verl is installed) ----

def _random_inputs(seed, B=6, T=9):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3
    new = old + torch.randn(B, T, generator=g) * 0.6  # large enough to hit both clips and dual clip
    ref = old + torch.randn(B, T, generator=g) * 0.3
    adv = torch.randn(B, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    mask[:, 0] = 1.0  # every sequence has a token
    entropy = torch.rand(B, T, generator=g) * 2
    return old, new, ref, adv, mask, entropy


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_verl_core_algos(mode, seed):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    old, new, ref, adv, mask, entropy = _random_inputs(seed)
    adv_tok = adv.unsqueeze(-1).expand_as(new) * mask
    vcfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                             "clip_ratio_c": 3.0, "global_batch_info": {}})
    v_pg, v_metrics = core_algos.compute_policy_loss_vanilla(old, new, adv_tok, mask, loss_agg_mode=mode, config=vcfg)
    v_kl = core_algos.agg_loss(core_algos.kl_penalty(new, ref, "low_var_kl"), mask, mode)
    v_ent = core_algos.agg_loss(entropy, mask, mode)
    v_total = v_pg - 0.01 * v_ent + 0.05 * v_kl  # verl's actor loss: pg - c_H * H + c_KL * KL

    cfg = _cfg(loss_agg=mode, kl_coef=0.05, entropy_coef=0.01)
    loss, m = ppo_loss(new, old, adv, mask, cfg, ref_logprobs=ref, entropy=entropy)
    # fp32 over 6x9 tensors: sums of <= 54 terms, 54 * eps32 = 6.4e-6 < rel 1e-5 (abs 1e-6 near 0).
    assert m["pg_loss"] == pytest.approx(v_pg.item(), rel=1e-5, abs=1e-6)
    assert m["kl"] == pytest.approx(v_kl.item(), rel=1e-5, abs=1e-6)
    assert m["entropy"] == pytest.approx(v_ent.item(), rel=1e-5, abs=1e-6)
    assert loss.item() == pytest.approx(v_total.item(), rel=1e-5, abs=1e-6)
    assert m["clipfrac"] == pytest.approx(v_metrics["actor/pg_clipfrac"], abs=1e-6)
    assert m["clipfrac_dual"] == pytest.approx(v_metrics["actor/pg_clipfrac_lower"], abs=1e-6)
    assert m["approx_kl"] == pytest.approx(v_metrics["actor/ppo_kl"], rel=1e-5, abs=1e-6)
    for mat in (torch.randn(6, 9), entropy):
        assert agg_loss(mat, mask, mode).item() == pytest.approx(core_algos.agg_loss(mat, mask, mode).item(),
                                                                 rel=1e-5, abs=1e-6)
    assert torch.allclose(low_var_kl(new, ref), core_algos.kl_penalty(new, ref, "low_var_kl"))


@pytest.mark.parametrize("seed", [0, 1])
def test_grpo_advantage_matches_verl(seed):
    pytest.importorskip("verl")
    import numpy as np
    from verl.trainer.ppo import core_algos

    from pettingllms.algorithms.advantages import compute_advantages
    from pettingllms.records import Sample

    rng = np.random.default_rng(seed)
    index = np.array([f"g{i % 4}" for i in range(16)], dtype=object)  # 4 groups of 4 (verl keeps size-1 raw)
    rewards = rng.integers(0, 3, size=16).astype(np.float32) / 2
    mask = torch.ones(16, 5)
    token_rewards = torch.zeros(16, 5)
    token_rewards[:, -1] = torch.tensor(rewards)
    v_adv, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index, epsilon=1e-6)
    samples = [Sample(agent="a", turn=0, problem_id="p", episode_id="e", prompt_ids=[], response_ids=[],
                      logprobs=[], reward=float(r), group_key=(g,)) for r, g in zip(rewards, index)]
    compute_advantages(samples, AlgorithmConfig(advantage="grpo", eps=1e-6))
    # verl works in fp32 (eps 1.2e-7) over groups of 4: a few ulps of values <= ~2, well under 1e-5.
    assert [s.advantage for s in samples] == pytest.approx(v_adv[:, 0].tolist(), rel=1e-5, abs=1e-5)
