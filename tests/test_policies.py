"""Agent -> policy mapping (L1 / L2 / L3 / mixed), per-policy control, and what each level
guarantees: L2 adapters train only on their own agents and leave base and siblings untouched,
L3 models of different shapes train side by side and reload, frozen policies stay frozen."""
from __future__ import annotations

import pytest
import torch

from numerics import forward_tol
from policy_helpers import TINY, VOCAB_LIMIT, all_equal, any_changed, make_cfg, make_samples, snapshot, update_all
from pettingllms.errors import ConfigError
from pettingllms.config.schema import PhaseConfig
from pettingllms.policies import resolve_policies, trainable_policies
from pettingllms.trainer.assemble import build_policy_set, mapping_config
from pettingllms.policies.logprobs import pack, response_logprobs
from pettingllms.utils.models import load_causal_lm

AGENTS = ["tool", "reasoner"]


# ---------------------------------------------------------------- mapping

def test_l1_default_is_one_shared_policy_with_fallbacks():
    cfg = make_cfg({"trainer": {"lr": 3e-4, "weight_decay": 0.05}}, lora=True)
    plan = resolve_policies(mapping_config(cfg), AGENTS)
    assert plan.agent_policy == {"tool": "shared", "reasoner": "shared"}
    spec = plan.specs["shared"]
    assert (spec.base, spec.lr, spec.weight_decay, spec.lora.rank) == (TINY, 3e-4, 0.05, 4)
    assert spec.agents == AGENTS
    assert resolve_policies(mapping_config(make_cfg()), AGENTS).specs["shared"].lora is None  # lora disabled: full FT


def test_l2_and_l3_modes_make_one_policy_per_agent():
    l2 = resolve_policies(mapping_config(make_cfg({"agents_mode": "per_agent_lora"})), AGENTS)
    assert l2.agent_policy == {"tool": "tool", "reasoner": "reasoner"}
    assert all(s.is_lora for s in l2.specs.values())  # per_agent_lora turns LoRA on
    assert len({s.model_key for s in l2.specs.values()}) == 1  # one shared base
    l3 = resolve_policies(mapping_config(make_cfg({"agents_mode": "per_agent_model",
                                                   "policies": {"reasoner": {"base": "tiny:other", "lr": 1e-3}}})),
                          AGENTS)
    assert l3.specs["reasoner"].base == "tiny:other" and l3.specs["reasoner"].lr == 1e-3
    assert l3.specs["tool"].base == TINY and l3.specs["tool"].lr == 1e-2
    assert len({s.model_key for s in l3.specs.values()}) == 2  # a model each


def test_mixed_explicit_mapping_and_overrides():
    cfg = make_cfg({
        "policies": {"duo": {"lora": {"enabled": True, "rank": 2}},
                     "solo": {"base": "tiny:solo", "lr": 5e-5, "weight_decay": 0.1}},
        "agents": {"tool": "duo", "reasoner": "duo", "critic": "solo"}})
    plan = resolve_policies(mapping_config(cfg), ["tool", "reasoner", "critic"])
    assert plan.specs["duo"].agents == ["tool", "reasoner"] and plan.specs["duo"].lora.rank == 2
    solo = plan.specs["solo"]
    assert solo.agents == ["critic"] and solo.lora is None and solo.base == "tiny:solo"
    assert (solo.lr, solo.weight_decay) == (5e-5, 0.1)


@pytest.mark.parametrize("extra, agents, message", [
    ({"policies": {"a": {}}, "agents": {"tool": "a", "reasoner": "nope"}}, AGENTS, "unknown policy 'nope'"),
    ({"policies": {"a": {}}, "agents": {"tool": "a"}}, AGENTS, r"\['reasoner'\] are not mapped"),
    ({"policies": {"a": {}}, "agents": {"tool": "a", "reasoner": "a", "ghost": "a"}}, AGENTS,
     "does not have"),
    ({"policies": {"a": {}, "b": {}}}, AGENTS, "no `agents:` map"),
    ({"policies": {"a": {}, "b": {}}, "agents": {"tool": "a", "reasoner": "a"}}, AGENTS, "no agents mapped"),
    ({"agents": {"tool": "shared", "reasoner": "other"}}, AGENTS, "unknown policy 'other'"),
    ({"agents_mode": "per_agent_lora", "policies": {"tool": {"base": "tiny:x"}}}, AGENTS, "one base"),
    ({"agents_mode": "per_agent_lora", "policies": {"planner": {}}}, AGENTS, "not env agents"),
    ({"agents_mode": "per_agent_model", "agents": {"tool": "reasoner"}}, AGENTS, "its own policy"),
    ({"trainer": {"phases": [{"start_step": 0, "train_policies": ["ghost"]}]}}, AGENTS, "unknown policies"),
    ({"trainer": {"phases": [{"start_step": 3}, {"start_step": 1}]}}, AGENTS, "increase"),
    ({}, [], "no agents"),
])
def test_mapping_errors_are_clear(extra, agents, message):
    with pytest.raises(ConfigError, match=message):
        resolve_policies(mapping_config(make_cfg(extra)), agents)


def test_phase_schedule():
    phases = [PhaseConfig(2, ["a"]), PhaseConfig(5, ["b"]), PhaseConfig(8, [])]
    names = ["a", "b"]
    assert [sorted(trainable_policies(phases, s, names)) for s in (0, 2, 4, 5, 8, 100)] == [
        ["a", "b"], ["a"], ["a"], ["b"], ["a", "b"], ["a", "b"]]
    assert trainable_policies([], 3, names) == {"a", "b"}


# ---------------------------------------------------------------- L2

def test_l2_adapter_trains_only_on_its_agent_and_leaves_base_and_sibling_bit_identical():
    cfg = make_cfg({"agents_mode": "per_agent_lora"}, dtype="bfloat16")  # bf16 base, fp32 adapters
    ps = build_policy_set(cfg, AGENTS)
    tool, reasoner = ps.workers["tool"], ps.workers["reasoner"]
    lora_base = tool._lora_base
    assert reasoner._lora_base is lora_base and tool.model is reasoner.model  # ONE base in memory
    assert {p.dtype for _, p in lora_base.base_params()} == {torch.bfloat16}
    assert {p.dtype for _, p in lora_base.adapter_params("tool")} == {torch.float32}

    start_tool, start_reas = snapshot(lora_base.adapter_params("tool")), snapshot(lora_base.adapter_params("reasoner"))
    update_all(ps, make_samples("reasoner", [1.0, -1.0, 0.5], seed=20), 0)  # B's agent only
    assert all_equal(start_tool, snapshot(lora_base.adapter_params("tool")))
    assert any_changed(start_reas, snapshot(lora_base.adapter_params("reasoner")))
    base0 = snapshot(lora_base.base_params())
    tool0 = snapshot(lora_base.adapter_params("tool"))
    reas0 = snapshot(lora_base.adapter_params("reasoner"))
    opt_reas0 = {k: {f: v.clone() for f, v in s.items()} for k, s in reasoner.optimizer.state.items()}

    metrics = update_all(ps, make_samples("tool", [1.0, -1.0, 0.5, -0.5], seed=21), 1)
    assert metrics["tool"]["num_samples"] == 4 and metrics["reasoner"]["num_samples"] == 0
    assert all_equal(base0, snapshot(lora_base.base_params()))
    assert all_equal(reas0, snapshot(lora_base.adapter_params("reasoner")))
    assert any_changed(tool0, snapshot(lora_base.adapter_params("tool")))
    # Separate optimizer state, untouched for the idle adapter.
    assert set(map(id, tool._params)).isdisjoint(map(id, reasoner._params))
    for k, s in reasoner.optimizer.state.items():
        assert all(torch.equal(v, opt_reas0[k][f]) for f, v in s.items())

    # A policy refuses another agent's samples.
    with pytest.raises(ValueError, match="own agents"):
        tool.update(make_samples("reasoner", [1.0], seed=22), step=2)

    merged = reasoner.generation_weights()  # computed out of place
    assert {w.dtype for w in merged.values()} == {torch.bfloat16}
    assert all_equal(base0, snapshot(lora_base.base_params()))


def test_l2_generation_weights_reproduce_each_adapter():
    """A plain model loaded with generation_weights() of B scores tokens as the peft model with
    adapter B does (fp32 so the check is tight), and not as with A."""
    ps = build_policy_set(make_cfg({"agents_mode": "per_agent_lora"}), AGENTS)
    tool, reasoner = ps.workers["tool"], ps.workers["reasoner"]
    update_all(ps, make_samples("tool", [1.0, -1.0], seed=26) + make_samples("reasoner", [-1.0, 1.0], seed=27), 0)
    samples = make_samples("reasoner", [0.0] * 3, seed=23)
    plain = load_causal_lm(TINY, torch.float32)
    batch = pack(samples)
    mask = batch.mask.bool()

    def plain_logprobs(weights):
        plain.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
        with torch.no_grad():
            return response_logprobs(plain, batch, chunk=8)[0][mask]
    lp_b = torch.cat([torch.tensor(r) for r in reasoner.logprobs(samples)])
    lp_a = torch.cat([torch.tensor(r) for r in tool.logprobs(samples)])
    assert (lp_a - lp_b).abs().max() > 0.1  # the adapters really differ
    # merged W + BA vs W x + B(A x): same fp32 math in another order, batched the same way
    tol = forward_tol(plain.config, max(map(len, batch.input_ids)), float(max(lp_a.abs().max(), lp_b.abs().max())))
    torch.testing.assert_close(plain_logprobs(reasoner.generation_weights()), lp_b, rtol=0, atol=tol)
    torch.testing.assert_close(plain_logprobs(tool.generation_weights()), lp_a, rtol=0, atol=tol)


def test_l2_adapters_save_and_export_on_their_own(tmp_path):
    cfg = make_cfg({"agents_mode": "per_agent_lora"})
    ps = build_policy_set(cfg, AGENTS)
    update_all(ps, make_samples("tool", [1.0, -1.0], seed=24) + make_samples("reasoner", [2.0, -2.0], seed=25), 0)
    ps.workers["tool"].save(tmp_path / "tool")
    exported = tmp_path / "tool" / "adapter"
    assert (exported / "adapter_config.json").exists() and (exported / "adapter_model.safetensors").exists()
    # The exported folder is a standard peft adapter on the base.
    from peft import PeftModel
    peft = PeftModel.from_pretrained(load_causal_lm(TINY, torch.float32), str(exported))
    mine = dict(ps.workers["tool"]._lora_base.adapter_params("tool"))
    theirs = {n.replace(".default.", ".tool."): p for n, p in peft.named_parameters() if "lora_" in n}
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    # Loading one adapter back leaves the other untouched.
    fresh = build_policy_set(cfg, AGENTS)
    reas_before = fresh.workers["reasoner"].trainable_state()
    fresh.workers["tool"].load(tmp_path / "tool")
    assert all_equal(fresh.workers["tool"].trainable_state(), ps.workers["tool"].trainable_state())
    assert all_equal(fresh.workers["reasoner"].trainable_state(), reas_before)


# ---------------------------------------------------------------- L3

@pytest.fixture(scope="module")
def other_model_dir(tmp_path_factory):
    """A second tiny model with a different shape and vocabulary (a different base)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=VOCAB_LIMIT, hidden_size=96, intermediate_size=160, num_hidden_layers=3,
                         num_attention_heads=3, num_key_value_heads=3, head_dim=32,
                         max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("other-model")
    LlamaForCausalLM(config).save_pretrained(folder)
    return str(folder)


def _l3_cfg(other, offload=False, lora_for_reasoner=False):
    reasoner = {"base": other, "offload": offload}
    if lora_for_reasoner:
        reasoner["lora"] = {"enabled": True, "rank": 2, "alpha": 4}
    return make_cfg({"agents_mode": "per_agent_model",
                     "policies": {"tool": {"offload": offload}, "reasoner": reasoner}})


def test_l3_two_different_models_train_and_each_checkpoint_reloads(tmp_path, other_model_dir):
    cfg = _l3_cfg(other_model_dir)
    ps = build_policy_set(cfg, AGENTS)
    tool, reasoner = ps.workers["tool"], ps.workers["reasoner"]
    assert tool.model is not reasoner.model
    assert tool.model.config.hidden_size != reasoner.model.config.hidden_size
    samples = make_samples("tool", [1.0, -1.0, 0.5], seed=30) + make_samples("reasoner", [1.0, -1.0], seed=31)
    before = {n: w.trainable_state() for n, w in ps.workers.items()}
    for step in (0, 1):
        metrics = update_all(ps, samples, step)
        assert all(m["num_samples"] > 0 for m in metrics.values())
    for n, w in ps.workers.items():
        assert any_changed(before[n], w.trainable_state())
    ps.save(tmp_path / "ckpt")
    fresh = build_policy_set(cfg, AGENTS)
    fresh.load(tmp_path / "ckpt")
    for n in AGENTS:
        assert all_equal(fresh.workers[n].trainable_state(), ps.workers[n].trainable_state())
        assert all_equal(fresh.workers[n].generation_weights(), ps.workers[n].generation_weights())
    with pytest.raises(ValueError, match="does not fit"):  # a checkpoint of one model into the other
        fresh.workers["reasoner"].load(tmp_path / "ckpt" / "tool")


def test_l3_offload_frees_idle_policy_and_trains_exactly_as_without(other_model_dir):
    samples = make_samples("tool", [1.0, -1.0, 0.5], seed=32) + make_samples("reasoner", [1.0, -1.0], seed=33)
    states = []
    for offload in (False, True):
        ps = build_policy_set(_l3_cfg(other_model_dir, offload=offload, lora_for_reasoner=True), AGENTS)
        for step in (0, 1, 2):
            update_all(ps, samples, step)
            ps.release()
            assert ps.workers["tool"].loaded == ps.workers["reasoner"].loaded == (not offload)
        states.append({n: w.trainable_state() for n, w in ps.workers.items()})
        assert ps.workers["tool"].updates == ps.workers["reasoner"].updates == 3
        ps.close()
    for n in AGENTS:
        assert all_equal(states[0][n], states[1][n])


# ---------------------------------------------------------------- mixed + freeze

def test_mixed_mapping_trains_each_policy_on_its_agents(other_model_dir):
    cfg = make_cfg({
        "policies": {"duo": {"lora": {"enabled": True, "rank": 4}}, "solo": {"base": other_model_dir}},
        "agents": {"tool": "duo", "reasoner": "duo", "critic": "solo"}})
    ps = build_policy_set(cfg, ["tool", "reasoner", "critic"])
    samples = (make_samples("tool", [1.0, -1.0], seed=40) + make_samples("reasoner", [0.5, -0.5], seed=41)
               + make_samples("critic", [1.0, -1.0], seed=42))
    before = {n: w.trainable_state() for n, w in ps.workers.items()}
    metrics = update_all(ps, samples, 0)
    assert metrics["duo"]["num_samples"] == 4 and metrics["solo"]["num_samples"] == 2
    for n, w in ps.workers.items():
        assert any_changed(before[n], w.trainable_state())
    with pytest.raises(ValueError, match="no policy serves"):
        ps.split(make_samples("stranger", [1.0]))


def test_freeze_schedule_leaves_frozen_policy_untouched():
    cfg = make_cfg({"agents_mode": "per_agent_lora", "trainer": {"phases": [
        {"start_step": 0, "train_policies": ["tool"]}, {"start_step": 1, "train_policies": []}]}})
    ps = build_policy_set(cfg, AGENTS)
    samples = make_samples("tool", [1.0, -1.0], seed=50) + make_samples("reasoner", [1.0, -1.0], seed=51)
    s0 = {n: w.trainable_state() for n, w in ps.workers.items()}
    m = update_all(ps, samples, 0)
    assert m["reasoner"] == {"frozen": 1.0} and ps.workers["reasoner"].updates == 0
    assert all_equal(s0["reasoner"], ps.workers["reasoner"].trainable_state())
    assert any_changed(s0["tool"], ps.workers["tool"].trainable_state())
    update_all(ps, samples, 1)  # phase 2: everyone trains
    assert any_changed(s0["reasoner"], ps.workers["reasoner"].trainable_state())


def test_per_policy_learning_rates_apply():
    cfg = make_cfg({"agents_mode": "per_agent_lora", "policies": {"reasoner": {"lr": 0.5}}})
    ps = build_policy_set(cfg, AGENTS)
    assert ps.workers["tool"].optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)
    assert ps.workers["reasoner"].optimizer.param_groups[0]["lr"] == pytest.approx(0.5)


def test_adapters_named_like_modules_own_only_their_weights():
    """Adapter names are matched as exact path components: `model` or `layers` (module names in
    every parameter path) must not capture the other adapters' weights."""
    from pettingllms.policies.lora import adapter_of

    assert adapter_of("base_model.model.model.layers.0.self_attn.q_proj.lora_A.model.weight") == "model"
    assert adapter_of("base_model.model.model.layers.0.self_attn.q_proj.lora_B.layers.weight") == "layers"
    assert adapter_of("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") is None
    cfg = make_cfg({"policies": {"model": {}, "layers": {}}, "agents": {"tool": "model", "reasoner": "layers"}},
                   lora=True)
    ps = build_policy_set(cfg, AGENTS)
    lora_base = ps.workers["model"]._lora_base
    own = {name: {n for n, _ in lora_base.adapter_params(name)} for name in ("model", "layers")}
    assert own["model"] and own["layers"] and own["model"].isdisjoint(own["layers"])
    assert len(own["model"]) == len(own["layers"])
    assert all(".lora_A.model." in n or ".lora_B.model." in n for n in own["model"])
    base = {n for n, _ in lora_base.base_params()}
    assert base.isdisjoint(own["model"] | own["layers"])
    # training one leaves the other bit-identical
    layers0 = snapshot(lora_base.adapter_params("layers"))
    update_all(ps, make_samples("tool", [1.0, -1.0], seed=31), step=0)
    assert all_equal(layers0, snapshot(lora_base.adapter_params("layers")))


def test_a_skipped_tokenizer_save_is_reported(tmp_path, monkeypatch, caplog):
    import logging

    from pettingllms.utils import models

    worker = build_policy_set(make_cfg(), ["solo"]).workers["shared"]

    def no_tokenizer(path, *a, **k):
        raise OSError(f"{path} has no tokenizer files")
    monkeypatch.setattr(models, "load_tokenizer", no_tokenizer)
    with caplog.at_level(logging.WARNING, logger="pettingllms.policies.checkpoint_io"):
        worker.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "policy.json").exists()  # the weights are saved anyway
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "no tokenizer saved" in lines[0] and "OSError" in lines[0]
