"""trainer.backend=verl on CPU: the CPU platform shim, our samples as verl's batch, our loss
inside verl with global normalisation, and update parity with the local PolicyWorker on
1 and 2 ranks (real verl FSDP workers on Ray, gloo), full fine-tuning and LoRA; full
fine-tuning's engine sync through a file that rank 0 writes (no weights through the driver)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("ray")

from pettingllms.algorithms.loss import ppo_loss  # noqa: E402
from pettingllms.config.schema import AlgorithmConfig  # noqa: E402
from pettingllms.policies.verl import batch as vb  # noqa: E402
from pettingllms.policies.verl import cpu  # noqa: E402
from policy_helpers import TINY, make_cfg, make_samples  # noqa: E402
from verl_helpers import ray_local  # noqa: E402,F401


# ---------------------------------------------------------------- the CPU platform
def test_cpu_platform_registers_with_gloo_and_a_device_name():
    from verl.plugin.platform import PlatformRegistry

    cpu.register()
    platform = PlatformRegistry.get("cpu")()
    assert platform.device_name == "cpu"
    assert platform.communication_backend_name() == "gloo"
    assert platform.device_module.get_device_name() == "cpu"
    assert platform.device_module.is_available()
    assert torch.zeros(2).to(platform.current_device()).device.type == "cpu"
    assert not platform.is_platform_available(use_smi_check=True)  # never auto-picked on a GPU host
    env = cpu.worker_env(True)
    assert env["VERL_PLATFORM"] == "cpu" and env["VERL_USE_EXTERNAL_MODULES"] == cpu.MODULE
    assert cpu.worker_env(False) == {}


def test_one_device_setting_and_the_sync_folder(tmp_path):
    """verl's ranks follow trainer.device (its type; cuda:N's index is the HF engine's); full
    fine-tuning's sync files go to trainer.verl.sync_dir, else the run folder (stale ones cleared),
    else (evaluation) a folder the worker makes on this node."""
    from pettingllms.errors import ConfigError
    from pettingllms.policies.verl.setup import _device_type
    from pettingllms.trainer.backends import make_backend

    assert _device_type("cpu") == "cpu" and _device_type("cuda:1") == "cuda"
    with pytest.raises(ConfigError, match="cpu or cuda"):
        _device_type("mps")
    cfg = make_cfg({"trainer": {"backend": "verl"}})
    (tmp_path / "weight_sync" / "shared-old").mkdir(parents=True)
    assert make_backend(cfg, lambda: None, run_dir=tmp_path)._sync_dir() == tmp_path / "weight_sync"
    assert not (tmp_path / "weight_sync").exists()
    assert make_backend(cfg, lambda: None)._sync_dir() is None
    cfg = make_cfg({"trainer": {"backend": "verl", "verl": {"sync_dir": str(tmp_path / "shared")}}})
    assert make_backend(cfg, lambda: None, run_dir=tmp_path)._sync_dir() == tmp_path / "shared"


def test_master_port_range_avoids_ephemeral_ports_and_the_seeded_rng():
    """The process-group port comes from below the ephemeral range (where Ray's outgoing connections
    may take a port between verl's check and rank 0's bind) and above Ray's worker ports; two runs
    seeded alike still scan from different ports."""
    import random

    from pettingllms.policies.verl.setup import RayCluster

    starts = set()
    for _ in range(20):
        random.seed(0)
        lo, hi = RayCluster.master_port_range()
        assert 20000 <= lo < hi <= 32768 and hi - lo >= 100
        starts.add(lo)
    assert len(starts) > 1


# ---------------------------------------------------------------- the batch layout
def test_samples_become_verls_batch_without_retokenising():
    samples = make_samples("a", [1.0, -0.5, 0.25], seed=3)
    rows, mbs = vb.padded_rows(samples, 2)
    assert rows == [0, 1, 2, None] and mbs == 1
    assert vb.padded_rows(samples, 1, micro=2) == ([0, 1, 2, None], 2)
    assert vb.padded_rows(make_samples("a", [0.0] * 9), 2, micro=4) == (list(range(9)) + [None] * 7, 4)
    old = [s.logprobs for s in samples]
    proto = vb.to_verl_batch(samples, rows, pad_id=0, temperature=0.7, old=old)
    b = proto.batch
    P = b["prompts"].shape[1]
    for r, i in enumerate(rows):
        s = samples[i if i is not None else 0]
        p, n = len(s.prompt_ids), len(s.response_ids)
        assert b["prompts"][r, P - p:].tolist() == s.prompt_ids  # left-padded prompt, engine ids
        assert b["responses"][r, :n].tolist() == s.response_ids  # right-padded response
        assert b["attention_mask"][r].sum().item() == p + n
        real = i is not None
        assert b["response_mask"][r, :n].tolist() == [1.0 if real else 0.0] * n
        assert b["response_mask"][r, n:].sum() == 0
        if real:
            assert torch.allclose(b["advantages"][r, :n], torch.full((n,), s.advantage))
            assert torch.allclose(b["old_log_probs"][r, :n], torch.tensor(s.logprobs))
    # verl's own no-padding conversion; its slicing maps sequence position p-1+j to response token j
    td = vb.to_tensordict(proto, calculate_entropy=False)
    shifted = vb.response_values(td["input_ids"], td)
    for r, i in enumerate(rows):
        s = samples[i if i is not None else 0]
        seq = s.prompt_ids + s.response_ids
        p, n = len(s.prompt_ids), len(s.response_ids)
        assert shifted[r, :n].tolist() == seq[p - 1: p - 1 + n]


# ---------------------------------------------------------------- the loss inside verl
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_policy_loss_is_global_over_ranks_and_micro_batches(mode):
    """Split a batch over 2 "ranks" x 2 micro-batches: the per-call losses verl sums (and FSDP
    averages over ranks) add up to our loss on the whole batch."""
    from tensordict import TensorDict

    from verl.utils import tensordict_utils as tu

    cfg = make_cfg({"algorithm": {"loss_agg": mode, "entropy_coef": 0.01, "kl_coef": 0.05}})
    algo = vb.algo_dict(cfg.algorithm)
    g = torch.Generator().manual_seed(0)
    B, T = 8, 6
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lens[:, None]).float()
    lp = -torch.rand(B, T, generator=g) * 3
    old = lp + 0.3 * torch.randn(B, T, generator=g)
    ref = lp + 0.2 * torch.randn(B, T, generator=g)
    ent = torch.rand(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    whole, _ = ppo_loss(lp, old, adv, mask, AlgorithmConfig(**algo), ref_logprobs=ref, entropy=ent)

    import pettingllms.policies.verl.batch as mod
    original = mod.response_values
    mod.response_values = lambda t, td: t  # the model output here is already [B, T]
    try:
        dp, total = 2, 0.0
        for rank in range(dp):
            for micro in range(2):
                idx = torch.arange(B)[rank * 4 + micro * 2: rank * 4 + micro * 2 + 2]
                data = TensorDict({"response_mask": mask[idx], "advantages": adv[idx, None] * mask[idx],
                                   "old_log_probs": old[idx], "ref_log_prob": ref[idx]}, batch_size=[2])
                tu.assign_non_tensor(data, dp_size=dp, batch_num_tokens=float(mask.sum()), global_batch_size=B)
                loss, _ = vb.policy_loss(algo, {"log_probs": lp[idx], "entropy": ent[idx]}, data)
                total += float(loss)
    finally:
        mod.response_values = original
    assert total / dp == pytest.approx(float(whole), rel=1e-5, abs=1e-7)


# ---------------------------------------------------------------- parity with the local worker
def _trained(worker, is_lora: bool) -> dict[str, torch.Tensor]:
    """The local worker's trained weights under the names verl reports (peft / HF state-dict names)."""
    if is_lora:
        return worker._lora_base.adapter_state(worker.name)[0]
    return {k: v.detach().clone() for k, v in worker.model.state_dict().items()}


def _engine_logprobs(engine, policy: str):
    """Seeded completions of two prompts (temperature 1: the logprobs are the plain softmax)."""
    from pettingllms.rollout.engines import GenerationRequest, SamplingParams

    reqs = [GenerationRequest(messages=[{"role": "user", "content": f"Add {i} and 3."}], policy=policy,
                              params=SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=5 + i),
                              request_id=f"r{i}") for i in range(2)]
    return [c for cs in engine.generate(reqs) for c in cs]


def _check_file_sync(worker, engine, before, initial, sync_dir: Path) -> None:
    """Full fine-tuning: the update names a file under sync_dir that rank 0 wrote; no weight tensor
    reaches the driver; the previous version (applied before the update) is gone; the engine that
    applies it generates with the updated policy's logprobs.

    Tolerance: both sides run the same HF modules in fp32 on the same weights, only batched and
    padded differently; a logprob is a log-softmax over the vocabulary of 2-layer, 64-wide
    activations, so the two round apart by ~1e-6; 1e-4 leaves room for other CPUs' kernels, while
    stale weights (one Adam step at lr 1e-2 on every weight) are off by far more."""
    from pettingllms.records import Sample
    from pettingllms.rollout.engines.weights import FULL_WEIGHTS

    def through_driver():
        raise AssertionError("full weights went through the driver")

    worker.trained_weights = through_driver  # weight_update must not fetch the weights
    try:
        update = worker.weight_update()
    finally:
        del worker.trained_weights
    assert update.kind == "full" and update.tensors == {} and update.num_bytes == 0
    assert update.version == 1 and Path(update.path).parent.parent == sync_dir
    assert (Path(update.path) / FULL_WEIGHTS).is_file()
    assert not Path(initial.path).exists()
    engine.update_weights(update)
    after = _engine_logprobs(engine, worker.name)
    assert [(c.response_ids, c.logprobs) for c in after] != [(c.response_ids, c.logprobs) for c in before]
    samples = [Sample(agent="a", turn=0, problem_id="p", episode_id=f"e{i}", prompt_ids=c.prompt_ids,
                      response_ids=c.response_ids, logprobs=c.logprobs, candidate=i, advantage=0.0)
               for i, c in enumerate(after)]
    for c, ref in zip(after, worker.logprobs(samples)):
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(ref), rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2])  # 1 rank is the same code with no all-reduce (CI budget)
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_one_update_matches_local(ray_local, tmp_path, ranks, lora):
    """Same samples, same initial weights: verl on 1 or 2 ranks gives local's loss (1e-5) and weights.

    Tolerance: fp32 throughout. The two sides sum the same terms in a different order, so gradients
    differ by ~N * 2^-24 relative (N <= 1e4 terms per reduction: < 1e-3). AdamW's first step is
    lr * g / (|g| + eps), which turns a relative gradient error d into at most lr * d / 4: so a
    weight may differ by lr * 1e-3, plus fp32 rounding of the weight itself. The exception is a
    gradient element that is a near-cancelling sum (|g| about its own rounding error): its relative
    error is unbounded and its step can land anywhere in [-lr, lr]. Those are rare, so at most 0.1%
    of the elements may miss the tight bound, and none may differ by more than 2 lr."""
    from pettingllms.policies import resolve_policies
    from pettingllms.policies.verl.setup import RayCluster
    from pettingllms.trainer.assemble import mapping_config, verl_settings, worker_settings
    from pettingllms.policies.verl.worker import VerlPolicyWorker
    from pettingllms.policies.worker import PolicyWorker

    cfg = make_cfg({"trainer": {"n_gpus_per_node": ranks, "device": "cpu"},
                    "algorithm": {"clip_low": 0.2, "clip_high": 0.28}}, lora=lora)
    spec = resolve_policies(mapping_config(cfg), ["a"]).specs["shared"]
    samples = make_samples("a", [1.0, -1.0, 0.5, -0.5, 2.0], seed=1)  # 5: padded to 6 on 2 ranks

    local = PolicyWorker(spec, worker_settings(cfg, "cpu"))
    start = _trained(local, lora)
    m_local = local.update(samples, step=1)
    end_local = _trained(local, lora)

    settings = verl_settings(cfg)
    cluster = RayCluster.start(settings)
    sync_dir = tmp_path / "sync"
    worker = None
    try:  # a failed start must not leave this pool's placement groups to the next test
        worker = VerlPolicyWorker(spec, settings, cluster, name_prefix=f"parity{ranks}{int(lora)}_", sync_dir=sync_dir)
        assert sync_dir in worker._tmp.parents  # the initial adapter where every node's ranks read it
        start_v = worker.trained_weights()[0]
        assert set(start_v) == set(start)
        for k in start:  # the same initial weights (LoRA: the adapter local initialised, handed over)
            torch.testing.assert_close(start_v[k].float(), start[k].float(), rtol=0, atol=0)
        initial = worker.weight_update()  # the sync a run does before its first step
        if not lora:
            from pettingllms.rollout.engines.hf import HFEngine
            engine = HFEngine({worker.name: TINY}, dtype="float32")
            engine.update_weights(initial)
            before = _engine_logprobs(engine, worker.name)
        m_verl = worker.update(samples, step=1)
        end_v = worker.trained_weights()[0]
        if lora:
            update = worker.weight_update()
            assert update.kind == "lora" and set(update.tensors) == set(end_v) and not update.path
        else:
            _check_file_sync(worker, engine, before, initial, sync_dir)
    finally:
        if worker is not None:
            worker.close()
        cluster.shutdown()

    assert m_verl["loss"] == pytest.approx(m_local["loss"], abs=1e-5)
    lr = float(cfg.trainer.optim.lr)
    moved = loose = total = 0
    for k in start:
        diff = (end_v[k].float() - end_local[k].float()).abs()
        assert float(diff.max()) <= 2 * lr * (1 + 1e-3), k  # one Adam step moves a weight by <= lr
        loose += int((diff > lr * 1e-3 + 1e-6 * end_local[k].float().abs()).sum())
        total += diff.numel()
        moved += int(not torch.equal(end_local[k], start[k]))
    assert loose <= max(1, total // 1000), f"{loose} of {total} weights off by more than lr * 1e-3"
    assert moved > 0  # the update really changed weights on both sides
