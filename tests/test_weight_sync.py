"""Weight sync through the engine seam: adapter tensors only for LoRA, full weights otherwise."""
from __future__ import annotations

import pytest
import torch

from pettingllms.trainer.assemble import build_policy_set
from pettingllms.rollout.engines import GenerationRequest, SamplingParams
from pettingllms.rollout.engines.hf import HFEngine
from pettingllms.rollout.engines.weights import FULL_WEIGHTS, LoraFactor, WeightUpdate, write_full_weights
from policy_helpers import TINY, make_cfg, make_samples, update_all

AGENTS = ["tool", "reasoner"]


def _requests(policies):
    return [GenerationRequest(messages=[{"role": "user", "content": f"Add {i} and 3."}], policy=p,
                              params=SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=11 + i),
                              request_id=f"r{i}") for i, p in enumerate(policies)]


def _outputs(engine, policies):
    return [[(c.response_ids, c.logprobs) for c in cs] for cs in engine.generate(_requests(policies))]


def test_l2_adapter_update_is_adapter_only_and_matches_merged_weights():
    """The HF engine merges each adapter update into its base: generation equals loading the
    worker's merged weights, for both adapters and after a second update (not stacked)."""
    ps = build_policy_set(make_cfg({"agents_mode": "per_agent_lora"}), AGENTS)
    bases = {n: TINY for n in AGENTS}
    synced, merged = HFEngine(bases, dtype="float32"), HFEngine(bases, dtype="float32")
    for step, seed in ((0, 30), (1, 40)):
        update_all(ps, make_samples("tool", [1.0, -1.0], seed=seed) + make_samples("reasoner", [-1.0, 1.0], seed=seed + 1),
                  step)
        for name, w in ps.workers.items():
            update = w.weight_update()
            assert update.kind == "lora" and update.version == step + 1
            assert update.tensors and all(".lora_A." in k or ".lora_B." in k for k in update.tensors)
            assert update.lora_config["r"] == 4 and update.lora_config["lora_alpha"] == 8
            synced.update_weights(update)
            merged.load_weights(name, w.generation_weights())
        policies = ["tool", "reasoner", "tool"]
        assert _outputs(synced, policies) == _outputs(merged, policies)
    full_bytes = sum(t.numel() * 4 for t in ps.workers["tool"].generation_weights().values())
    assert ps.workers["tool"].weight_update().num_bytes < full_bytes / 4


def test_full_update_carries_every_weight_and_changes_generation():
    ps = build_policy_set(make_cfg(), ["solo"])
    worker = ps.workers["shared"]
    engine = HFEngine({"shared": TINY}, dtype="float32")
    before = _outputs(engine, ["shared"])
    for step in range(2):
        worker.update(make_samples("solo", [1.0, -1.0, 0.5], seed=50 + step), step)
    update = worker.weight_update()
    assert update.kind == "full" and set(update.tensors) == set(worker.model.state_dict())
    engine.update_weights(update)
    after = _outputs(engine, ["shared"])
    assert after != before
    lp = torch.tensor(after[0][0][1])
    assert torch.isfinite(lp).all() and (lp <= 0).all()


def test_full_update_by_path_equals_the_tensors_and_fails_clearly_when_unseen(tmp_path):
    """A full update that names a file (trainer.backend=verl) gives the engine exactly the weights
    the tensors would; a path this node cannot see is one clear error, and the engine is unchanged."""
    ps = build_policy_set(make_cfg(), ["solo"])
    worker = ps.workers["shared"]
    worker.update(make_samples("solo", [1.0, -1.0, 0.5], seed=60), 0)
    update = worker.weight_update()
    folder = write_full_weights(update.tensors, tmp_path / "v1", torch.float32)  # tied embeddings too
    assert sorted(p.name for p in folder.iterdir()) == [FULL_WEIGHTS]
    by_path = WeightUpdate("shared", "full", {}, version=1, path=str(folder))
    assert by_path.num_bytes == 0
    by_tensors, by_file = HFEngine({"shared": TINY}, dtype="float32"), HFEngine({"shared": TINY}, dtype="float32")
    before = _outputs(by_file, ["shared"])
    by_tensors.update_weights(update)
    by_file.update_weights(by_path)
    assert _outputs(by_file, ["shared"]) == _outputs(by_tensors, ["shared"]) != before

    with pytest.raises(FileNotFoundError, match="shared by every node"):
        by_file.update_weights(WeightUpdate("shared", "full", {}, version=2, path=str(tmp_path / "elsewhere")))
    assert _outputs(by_file, ["shared"]) == _outputs(by_tensors, ["shared"])
    with pytest.raises(ValueError, match="full update only"):
        WeightUpdate("shared", "full", update.tensors, path=str(folder))


def test_lora_update_that_does_not_fit_changes_nothing():
    """The engine merges an adapter one weight at a time, so every weight's fit is checked
    first: an update whose last layer does not fit leaves every weight as it was."""
    ps = build_policy_set(make_cfg(lora=True), ["solo"])
    worker = ps.workers["shared"]
    worker.update(make_samples("solo", [1.0, -1.0, 0.5], seed=60), 0)
    update = worker.weight_update()
    engine = HFEngine({"shared": TINY}, dtype="float32")
    before = {k: v.clone() for k, v in engine._slot("shared").params.items()}
    last_b = [k for k in update.tensors if k.endswith(".lora_B.weight")][-1]
    bad = dict(update.tensors, **{last_b: torch.zeros(update.tensors[last_b].shape[0] + 1,
                                                      update.tensors[last_b].shape[1])})
    with pytest.raises(ValueError, match="does not fit"):
        engine.update_weights(WeightUpdate("shared", "lora", bad, update.lora_config, version=1))
    after = engine._slot("shared").params
    assert all(torch.equal(before[k], after[k]) for k in before)
    engine.update_weights(update)  # the intact update merges: the adapted weights move
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all(k.endswith(".weight") for k in changed)


def test_lora_factor_shape_follows_fan_in_fan_out():
    a, b = torch.ones(4, 7), torch.ones(5, 4)  # rank 4, in 7, out 5
    assert LoraFactor(a, b, 2.0).shape == (5, 7) == tuple(LoraFactor(a, b, 2.0).delta().shape)
    assert LoraFactor(a, b, 2.0, fan_in_fan_out=True).shape == (7, 5)
    assert tuple(LoraFactor(a, b, 2.0, fan_in_fan_out=True).delta().shape) == (7, 5)
    assert torch.equal(LoraFactor(a, b, 2.0).delta(), torch.full((5, 7), 8.0))


def test_engine_merges_into_the_trainers_frozen_base_and_generates_the_same():
    """A LoRA trainer and an HF engine in one process keep one base: the engine takes the
    worker's frozen base tensors instead of a copy, and generates what an engine with its own
    copy generates after every update; the trainer's base is never written. Tensors that are not
    the engine's current values (another model, an update already applied) are refused."""
    ps = build_policy_set(make_cfg(lora=True, dtype="bfloat16"), ["solo"])
    worker = ps.workers["shared"]
    base = worker.frozen_base_weights()
    assert base and all(k.endswith(".weight") and "lora" not in k and "base_layer" not in k for k in base)
    adapted = {k for k in base if any(t in k for t in ("_proj.", "fc"))}
    assert adapted and "model.embed_tokens.weight" in base and "model.norm.weight" in base  # the rest too
    kept = {k: v.clone() for k, v in base.items()}
    shared, own = HFEngine({"shared": TINY}, dtype="bfloat16"), HFEngine({"shared": TINY}, dtype="bfloat16")
    assert shared.share_base("shared", base) == len(base)
    slot = shared._slot("shared")
    assert all(slot.base[k].data_ptr() == v.data_ptr() for k, v in base.items())  # no copy
    # until an update writes them, the engine's live weights are the trainer's tensors themselves
    assert all(slot.params[k].data_ptr() == v.data_ptr() for k, v in base.items())
    for step in range(2):
        worker.update(make_samples("solo", [1.0, -1.0, 0.5], seed=70 + step), step)
        update = worker.weight_update()
        shared.update_weights(update)
        own.update_weights(update)
        assert _outputs(shared, ["shared"]) == _outputs(own, ["shared"])
    assert all(torch.equal(base[k], kept[k]) for k in base)
    merged = {k for k in base if slot.params[k].data_ptr() != base[k].data_ptr()}  # written by the merges
    assert merged and merged == set(slot.merged) and merged <= adapted
    assert slot.params["model.embed_tokens.weight"].data_ptr() == base["model.embed_tokens.weight"].data_ptr()
    # a full write of a shared tensor goes into the engine's own buffer, never the trainer's
    shared.load_weights("shared", {"model.norm.weight": torch.zeros_like(base["model.norm.weight"])})
    assert torch.equal(base["model.norm.weight"], kept["model.norm.weight"])
    assert not slot.params["model.norm.weight"].any()
    # an engine with its own snapshot of the merged weights still takes those no update touched
    assert own.share_base("shared", base) == len(base) - len(merged)
    fresh = HFEngine({"shared": TINY}, dtype="bfloat16")
    fresh.update_weights(update)
    assert fresh.share_base("shared", {k: v + 1 for k, v in base.items()}) == 0
    full = build_policy_set(make_cfg(), ["solo"]).workers["shared"]
    assert full.frozen_base_weights() == {}  # full fine-tuning: its weights train
