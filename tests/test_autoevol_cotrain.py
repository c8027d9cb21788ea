"""2-step MetaAgent-X co-training on the tiny model with the real sandboxed executor, shared policy
(L1, per-role learning rates) and split policies (L2 adapters, phases).

The designer's replies are scripted from the DSL templates (an untrained tiny model writes no valid
design); everything else is real: the executor runs each design in the sandbox, every node call is
sampled by the tiny model through the HF engine and trained on with its own token ids.
"""
from __future__ import annotations

import json

import pytest

from autoevol_fakes import NO_DESIGN, ScriptedDesigner
from test_autoevol_training import autoevol_cfg
from pettingllms.mas.templates import load_templates
from pettingllms.trainer import assemble
from pettingllms.trainer.local import LocalTrainer
from pettingllms.utils.models import load_tokenizer

DESIGNS = [f"```python\n{load_templates()[name]}```" for name in ("single", "sequential")] + [NO_DESIGN]


def _cotrain(cfg):
    names = ["shared"] if cfg.agents_mode == "explicit" else ["designer", "executor"]
    engine = ScriptedDesigner(assemble.build_rollout_engine(cfg, {n: str(cfg.model.path) for n in names}),
                              load_tokenizer(str(cfg.model.path)), DESIGNS)
    trainer = LocalTrainer(cfg, engine=engine)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    return trainer.run_dir, history


def _check_run(run_dir, history, policies):
    assert [m["step"] for m in history] == [1, 2]
    for m in history:
        assert m["samples/count"] > 3  # 3 designer samples + every node call of 4 executions
    episodes = [json.loads(line) for line in (run_dir / "trajectories" / "step_1.jsonl").read_text().splitlines()]
    samples = [s for e in episodes for s in e["samples"]]
    exe = [s for s in samples if s["agent"] == "executor"]
    assert exe and all(s["response_ids"] and len(s["logprobs"]) == len(s["response_ids"]) for s in exe)
    assert {tuple(s["group_key"]) for s in exe} == {(episodes[0]["problem_id"], "executor")}
    runs = [st for e in episodes for st in e["trajectory"]["steps"] if st["agent"] == "executor"]
    assert len(runs) == 4 and all(st["info"]["ok"] for st in runs), runs  # the templates run to an answer
    # designer reward = mean outcome of its executions + 0.1 x ran fraction (all ran) | -0.1 (no design)
    for e in episodes:
        (des,) = [s for s in e["samples"] if s["agent"] == "designer"]
        outcomes = [st["team_reward"] for st in e["trajectory"]["steps"] if st["agent"] == "executor"]
        mean = sum(outcomes) / 2 if outcomes else 0.0
        assert des["local_reward"] == pytest.approx(0.1 if outcomes else -0.1)
        assert des["reward"] == pytest.approx(mean + des["local_reward"]) and des["team_reward"] == mean
        for s in e["samples"][1:]:  # every node call carries its own execution's outcome
            assert s["reward"] == outcomes[int(s["info"]["job_id"].rsplit("x", 1)[1])]
    ckpt = run_dir / "checkpoints" / "step_000002" / "policies"
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(policies)


@pytest.mark.slow
def test_two_step_cotrain_shared_policy(tmp_path):
    cfg = autoevol_cfg(tmp_path, "rollout.batch_size=1", "env.options.executions=2",
                       "trainer.role_lr.lrs={designer: 1e-3, executor: 1e-3}")
    run_dir, history = _cotrain(cfg)
    _check_run(run_dir, history, ["shared"])
    assert all("policy/shared/executor/loss" in m for m in history)


@pytest.mark.slow
def test_two_step_cotrain_split_policies(tmp_path):
    cfg = autoevol_cfg(tmp_path, "rollout.batch_size=1", "env.options.executions=2", "trainer.optim.lr=1e-3",
                       "trainer.phases=[{start_step: 1, train_policies: [executor]},"
                       "{start_step: 2, train_policies: [designer]}]", config="autoevol_cotrain_split")
    run_dir, history = _cotrain(cfg)
    _check_run(run_dir, history, ["designer", "executor"])
    assert "policy/executor/num_samples" in history[0] and "policy/designer/num_samples" in history[1]
