"""MetaAgent-X training modes on the tiny model: the per-role learning-rate schedule (shared policy),
stage-wise alternation through trainer.phases (split policies) and that it really freezes the
other role, the SFT cold-start checkpoint as a starting point, the configs and recipes.

The designer's replies are scripted (tests/autoevol_fakes.py) so that designs exist; in this file
the executor is scripted too (its node calls still go through the real tiny-model engine and are
trained on). The 2-step runs with the real sandboxed executor are in test_autoevol_cotrain.py.
"""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from autoevol_fakes import DESIGN_A, DESIGN_B, NO_DESIGN, ScriptedDesigner, scripted_run_designs
from policy_helpers import all_equal, make_cfg, make_samples, snapshot
from pettingllms.cli.config_loading import load_config
from pettingllms.errors import ConfigError
from pettingllms.trainer.assemble import build_policy_set
from pettingllms.config.schema import RoleLrConfig
from pettingllms.policies.mapping import role_lrs_at
from pettingllms.trainer import assemble

PROBLEMS = [{"id": f"q{i}", "question": f"What is {i} + 5 - {i}?", "answer": "5", "source": "toy"}
            for i in range(4)]


def test_role_lr_schedule_swaps_every_period():
    sched = RoleLrConfig({"designer": 1e-9, "executor": 5e-6}, 10)
    assert role_lrs_at(sched, 1) == role_lrs_at(sched, 10) == {"designer": 1e-9, "executor": 5e-6}
    assert role_lrs_at(sched, 11) == role_lrs_at(sched, 20) == {"designer": 5e-6, "executor": 1e-9}
    assert role_lrs_at(sched, 21) == {"designer": 1e-9, "executor": 5e-6}
    assert role_lrs_at(RoleLrConfig({"a": 1.0, "b": 2.0}, 0), 99) == {"a": 1.0, "b": 2.0}
    assert role_lrs_at(RoleLrConfig({}, 3), 1) is None


def test_role_lr_zero_skips_that_role_in_a_shared_policy():
    """A shared worker trained with role rates {designer: 0, executor: lr} ends bit-identical to one
    trained on the executor's samples alone; with both rates on, the designer's samples count."""
    cfg = make_cfg()
    des = make_samples("designer", [1.0, -1.0, 0.5], seed=1)
    exe = make_samples("executor", [0.7, -0.7, 0.2, -0.2], seed=2)

    def trained(samples, role_lrs):
        ps = build_policy_set(cfg, ["designer", "executor"])
        w = ps.workers["shared"]
        report = w.update(samples, 1, role_lrs=role_lrs) if role_lrs else w.update(samples, 1)
        return snapshot(w.model.named_parameters()), report, w

    only_exe, _, _ = trained(exe, None)
    skipped, report, w = trained(des + exe, {"designer": 0.0, "executor": 1e-2})
    assert all_equal(only_exe, skipped)
    assert report["designer/lr"] == 0.0 and report["executor/lr"] == pytest.approx(1e-2)
    assert "designer/loss" not in report and report["executor/num_samples"] == 4.0
    # the schedule's own rate (base lr x its factor after one update) is back in place
    assert w.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * w.scheduler.lr_lambdas[0](1))
    both, report, _ = trained(des + exe, {"designer": 1e-2, "executor": 1e-2})
    assert not all_equal(only_exe, both) and report["designer/num_samples"] == 3.0


def _write_data(root):
    out = root / "autoevol_toy"
    out.mkdir(parents=True)
    pd.DataFrame(PROBLEMS).to_parquet(out / "train.parquet")
    pd.DataFrame(PROBLEMS[:2]).to_parquet(out / "test.parquet")


def autoevol_cfg(tmp_path, *overrides, config="autoevol_cotrain"):
    if not (tmp_path / "datasets" / "autoevol_toy").exists():
        _write_data(tmp_path / "datasets")
    return load_config(config, [
        "model=tiny", "env.data=autoevol_toy", f"env.data_root={tmp_path / 'datasets'}",
        "env.options.designs=3", "env.options.executions=2", "rollout.batch_size=2",
        "rollout.sampling.max_new_tokens=6", "rollout.max_prompt_tokens=128", "trainer.total_steps=2",
        f"trainer.output_dir={tmp_path / 'outputs'}", "trainer.logging.progress_bar=false", "trainer.logging.log_tensorboard=false",
        "trainer.micro_batch_size=8", "trainer.deterministic=true", "trainer.checkpoint.save_freq=0", *overrides])


def make_trainer(cfg, monkeypatch, log=None):
    from pettingllms.rollout import autoevol
    from pettingllms.trainer.local import LocalTrainer
    from pettingllms.utils.models import load_tokenizer

    monkeypatch.setattr(autoevol, "run_designs_in_sandbox", scripted_run_designs([] if log is None else log))
    import pettingllms.mas.prompts as prompts
    monkeypatch.setattr(prompts, "designer_messages",
                        lambda q, feedback=None: [{"role": "user", "content": f"Design for: {q}"}])
    agents = ["designer", "executor"]
    plan_bases = {n: str(cfg.model.path) for n in (["shared"] if cfg.agents_mode == "explicit" else agents)}
    engine = ScriptedDesigner(assemble.build_rollout_engine(cfg, plan_bases), load_tokenizer(str(cfg.model.path)),
                              [DESIGN_A, DESIGN_B, NO_DESIGN])
    return LocalTrainer(cfg, engine=engine)


def test_split_phases_really_freeze_the_other_role(tmp_path, monkeypatch):
    cfg = autoevol_cfg(tmp_path, "trainer.optim.lr=1e-2", "trainer.phases=[{start_step: 1, train_policies: [executor]},"
                       "{start_step: 2, train_policies: [designer]}]", "rollout.batch_size=1", config="autoevol_cotrain_split")
    trainer = make_trainer(cfg, monkeypatch)
    try:
        state = lambda name: trainer.workers[name].trainable_state()  # noqa: E731
        d0, e0 = state("designer"), state("executor")
        m1 = trainer.fit(max_steps=1)[-1]
        d1, e1 = state("designer"), state("executor")
        assert all_equal(d0, d1), "the frozen designer adapter moved in an executor phase"
        assert not all_equal(e0, e1)
        assert m1["policies/trained"] == 1.0 and "policy/designer/num_samples" not in m1
        assert m1["policy/executor/num_samples"] == 6.0 and m1["policy/executor/grad_norm"] > 0
        m2 = trainer.fit(max_steps=1)[-1]
        d2, e2 = state("designer"), state("executor")
        assert all_equal(e1, e2), "the frozen executor adapter moved in a designer phase"
        assert not all_equal(d1, d2)
        assert "policy/executor/num_samples" not in m2 and m2["policy/designer/num_samples"] == 3.0
        assert m1["reward/designer/mean"] == pytest.approx((0.6 + 0.55 - 0.1) / 3)
        assert m1["reward/executor/mean"] == pytest.approx(3 / 6)
    finally:
        trainer.close()


def test_shared_policy_role_lr_alternation_then_init_from(tmp_path, monkeypatch):
    """Two steps whose per-role rates swap every step, then a run that starts from their checkpoint."""
    cfg = autoevol_cfg(tmp_path, "trainer.role_lr.lrs={designer: 0.0, executor: 0.01}", "trainer.role_lr.swap_every=1",
                       "rollout.batch_size=1")
    trainer = make_trainer(cfg, monkeypatch)
    try:
        w = trainer.workers["shared"]
        before = w.trainable_state()
        h = trainer.fit()
        assert [r["policy/shared/designer/lr"] for r in h] == [0.0, 0.01]
        assert [r["policy/shared/executor/lr"] for r in h] == [0.01, 0.0]
        assert "policy/shared/designer/loss" not in h[0] and "policy/shared/executor/loss" in h[0]
        assert "policy/shared/designer/loss" in h[1] and "policy/shared/executor/loss" not in h[1]
        assert not all_equal(before, w.trainable_state())
        assert (trainer.run_dir / "checkpoints" / "step_000002" / "COMPLETE").exists()
    finally:
        trainer.close()
    run_dir = trainer.run_dir
    # trainer.checkpoint.init_from: the weights of that run, a fresh optimizer and schedule
    cfg = autoevol_cfg(tmp_path, f"trainer.checkpoint.init_from={run_dir}", "trainer.run_name=from_ckpt")
    trainer = make_trainer(cfg, monkeypatch)
    try:
        ref = torch.load(run_dir / "checkpoints" / "step_000002" / "policies" / "shared" / "optimizer.pt",
                         weights_only=True)
        assert ref["state"], "the source checkpoint has optimizer state"
        assert not trainer.workers["shared"].optimizer.state_dict()["state"]  # fresh optimizer
        assert trainer.workers["shared"].updates == 0 and trainer.step == 0
        from safetensors.torch import load_file
        saved = load_file(str(next((run_dir / "checkpoints" / "step_000002" / "policies" / "shared" / "model")
                                   .glob("*.safetensors"))))
        now = trainer.workers["shared"].trainable_state()
        assert all(torch.equal(now[k], saved[k]) for k in saved if k in now)
    finally:
        trainer.close()
    bad = autoevol_cfg(tmp_path, f"trainer.checkpoint.init_from={tmp_path / 'nowhere'}", "trainer.run_name=bad")
    with pytest.raises(ConfigError, match="trainer.checkpoint.init_from"):
        make_trainer(bad, monkeypatch)


def test_configs_reproduce_the_published_recipe():
    cfg = load_config("autoevol_cotrain")
    assert cfg.env.name == "autoevol" and cfg.rollout.strategy == "autoevol"
    assert (cfg.env.options.designs, cfg.env.options.executions) == (4, 4)
    assert cfg.env.options.executor_group == "question" and cfg.agents_mode == "explicit" and not cfg.policies
    assert dict(cfg.trainer.role_lr.lrs) == {"designer": 1e-9, "executor": 5e-6}
    assert cfg.trainer.role_lr.swap_every == 10
    split = load_config("autoevol_cotrain_split")
    assert split.agents_mode == "per_agent_lora"
    assert [(p.start_step, list(p.train_policies)) for p in split.trainer.phases] == [
        (1, ["executor"]), (11, ["designer"]), (21, ["executor"]), (31, ["designer"])]


def test_bad_autoevol_configs_fail_clearly(tmp_path):
    with pytest.raises(ConfigError, match="env=autoevol and rollout=autoevol"):
        load_config("autoevol_cotrain", ["rollout=tree"])
    cfg = autoevol_cfg(tmp_path, "trainer.role_lr.lrs={designer: 0.1, critic: 0.1}")
    from pettingllms.trainer.local import check_role_lr
    with pytest.raises(ConfigError, match="critic"):
        check_role_lr(cfg.trainer.role_lr, ["designer", "executor"])
