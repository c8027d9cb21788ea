"""The local trainer loop on the tiny random model: outputs, checkpoints, data order, eval."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from pettingllms.errors import ConfigError
from pettingllms.records import Episode, Trajectory, read_episodes
from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.trainer.data import DataOrder
from pettingllms.trainer.assemble import evaluate_on
from pettingllms.trainer.evaluation import flat_metrics, format_table
from pettingllms.trainer.assemble import resolve_run_folder
from pettingllms.trainer.local import LocalTrainer, before_after, rollout_seed
from pettingllms.trainer.outputs import summary_line
from trainer_fixtures import ENV_NAME, RandomTokenEngine, trainer_cfg

REQUIRED = ["step", "reward/mean", "timing/step_s", "reward/writer/mean", "reward/checker/mean",
            "episode/success_rate", "advantage/mean", "advantage/std", "train/loss", "train/grad_norm",
            "train/lr", "train/old_logprob_mismatch_mean", "timing/generate_s", "timing/env_s",
            "timing/logprob_s", "timing/update_s", "timing/other_s", "tokens/response", "tokens/prompt",
            "groups/zero_var_frac/writer", "groups/zero_var_frac/checker", "advantage/abs_mean/writer",
            "advantage/abs_mean/checker"]


@pytest.fixture(scope="module")
def two_step_run(tmp_path_factory):
    """Two steps of the full loop: tiny model, HF engine, LoRA off, validation at step 2."""
    tmp = tmp_path_factory.mktemp("train")
    cfg = trainer_cfg(tmp, "trainer.run_name=r", "trainer.total_steps=2", "trainer.validation.val_freq=2",
                      "trainer.validation.val_before=true")
    trainer = LocalTrainer(cfg)
    before = {k: v.clone() for k, v in trainer.workers["shared"].trainable_state().items()}
    history = trainer.fit()
    after = trainer.workers["shared"].trainable_state()
    trainer.close()
    return trainer.run_dir, history, before, after


def test_run_writes_every_output(two_step_run):
    run_dir, history, _, _ = two_step_run
    assert (run_dir / "config.yaml").read_text().startswith("experiment: tiny_test")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows == json.loads(json.dumps(history))
    for key in REQUIRED:
        assert all(key in r for r in rows), key
        assert all(math.isfinite(r[key]) for r in rows), key
    # timing parts add up to the step
    for r in rows:
        parts = sum(r[f"timing/{p}_s"] for p in ("generate", "env", "logprob", "update", "other"))
        assert parts == pytest.approx(r["timing/step_s"], rel=1e-6)
        assert r["timing/generate_s"] > 0
    # validation at step 2 only, per benchmark (the `source` column)
    assert "val/test_vowels/avg@2" not in rows[0]
    for key in ("val/test_vowels/avg@2", "val/test_vowels/pass@2", "val/test_vowels/alpha/avg@2",
                "val/test_vowels/beta/pass@2"):
        assert 0.0 <= rows[1][key] <= 1.0
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    for step in (1, 2):
        episodes = read_episodes(run_dir / "trajectories" / f"step_{step}.jsonl")
        assert len(episodes) == 2 and all(e.env == ENV_NAME for e in episodes)
        # tree rollout: 2 agents x k=2 candidates, real token ids from the engine
        assert all(len(e.samples) == 4 and all(s.response_ids for s in e.samples) for e in episodes)
    ckpt = ckpt_io.latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.name == "step_000002"
    assert (ckpt / "policies" / "shared" / "policy.json").exists()
    state = ckpt_io.load_state(ckpt)
    assert state["step"] == 2 and state["data"]["consumed"] == 4 and len(state["metrics"]) == 2


def test_update_changes_weights_with_finite_loss(two_step_run):
    _, history, before, after = two_step_run
    assert any(r["advantage/nonzero_frac"] > 0 for r in history), "no learning signal in the toy env"
    assert all(math.isfinite(r["train/loss"]) for r in history)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_data_order_is_seeded_and_resumable():
    a = DataOrder(10, seed=3)
    first = a.next_indices(25)
    assert sorted(first[:10]) == list(range(10)) and sorted(first[10:20]) == list(range(10))
    assert first[:10] != first[10:20]  # a new shuffle each epoch
    b = DataOrder(10, seed=3)
    b.load_state_dict({"consumed": 7, "num_items": 10})
    assert b.next_indices(18) == first[7:25]
    assert DataOrder(10, seed=4).next_indices(10) != first[:10]
    with pytest.raises(ValueError, match="10 training problems"):
        DataOrder(11, seed=3).load_state_dict(a.state_dict())


def test_rollout_seed_depends_on_seed_and_step():
    assert rollout_seed(0, 1) == rollout_seed(0, 1)
    assert len({rollout_seed(s, t) for s in range(3) for t in range(5)}) == 15


def test_resume_needs_a_stable_run_folder(tmp_path):
    with pytest.raises(ConfigError, match="resume=auto needs a stable run folder"):
        resolve_run_folder(trainer_cfg(tmp_path, "trainer.checkpoint.resume=auto"))
    with pytest.raises(ConfigError, match="not a complete checkpoint"):
        resolve_run_folder(trainer_cfg(tmp_path, f"trainer.checkpoint.resume={tmp_path}"))


def test_existing_run_name_is_not_overwritten(two_step_run):
    run_dir, _, _, _ = two_step_run
    cfg = trainer_cfg(run_dir.parents[2], "trainer.run_name=r")
    with pytest.raises(ConfigError, match="run folder .* is not empty .*use trainer.checkpoint.resume=auto"):
        resolve_run_folder(cfg)


def test_torn_checkpoint_is_ignored(tmp_path):
    run = tmp_path / "run"
    for step, complete in ((1, True), (2, False)):
        d = ckpt_io.checkpoint_dir(run, step)
        d.mkdir(parents=True)
        torch.save({"step": step}, d / ckpt_io.STATE_FILE)
        if complete:
            (d / ckpt_io.MARKER).write_text("")
    assert ckpt_io.latest_checkpoint(run).name == "step_000001"
    ckpt_io.prune_checkpoints(run, keep=1)
    assert ckpt_io.latest_checkpoint(run).name == "step_000001"


def test_phase_schedule_freezes_a_policy(tmp_path):
    cfg = trainer_cfg(tmp_path, "trainer.run_name=p", "trainer.total_steps=1",
                      "trainer.phases=[{start_step: 0, train_policies: [nobody]}]")
    with pytest.raises(ConfigError, match="unknown policies \\['nobody'\\]"):
        LocalTrainer(cfg, engine=RandomTokenEngine())


def _episode(pid: str, success: bool, source: str) -> Episode:
    return Episode(problem_id=pid, episode_id=f"{pid}/x", env="toy",
                   trajectory=Trajectory(team_reward=float(success), success=success),
                   problem={"id": pid, "source": source})


class _ScriptedRollout:
    """k episodes per problem with fixed outcomes: p0 wins 1/2, p1 wins 0/2, p2 wins 2/2."""
    wins = {"p0": [True, False], "p1": [False, False], "p2": [True, True]}

    def run(self, problems, seed, k):
        from pettingllms.records import Batch
        return Batch(step=0, episodes=[_episode(p["id"], w, p["source"]) for p in problems
                                       for w in self.wins[p["id"]][:k]])


def test_eval_batch_problems_sets_the_problems_per_rollout_call(tmp_path):
    cfg = trainer_cfg(tmp_path)
    problems = [{"id": f"p{i % 3}", "source": "a"} for i in range(3)] * 3  # 9 problems, 3 ids

    class _Counting(_ScriptedRollout):
        calls: list[int] = []

        def run(self, problems, seed, k):
            self.calls.append(len(problems))
            return super().run(problems, seed, k)

    for batch_problems, sizes in ((None, [cfg.rollout.batch_size] * (9 // cfg.rollout.batch_size)), (4, [4, 4, 1])):
        cfg.eval.batch_problems = batch_problems
        _Counting.calls = []
        evaluate_on(lambda settings: _Counting(), cfg, problems, seed=0)
        assert _Counting.calls[:len(sizes)] == sizes and sum(_Counting.calls) == 9


def test_avg_and_pass_at_k_by_hand(tmp_path):
    cfg = trainer_cfg(tmp_path)
    problems = [{"id": "p0", "source": "a"}, {"id": "p1", "source": "a"}, {"id": "p2", "source": "b"}]
    seen = []
    cfg.eval.k = 2
    result = evaluate_on(lambda settings: seen.append(settings) or _ScriptedRollout(), cfg, problems, seed=0)
    assert seen[0].strategy == "flat" and seen[0].sampling["temperature"] == cfg.eval.temperature and seen[0].k == 2
    assert result["benchmarks"]["a"]["avg@2"] == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert result["benchmarks"]["a"]["pass@2"] == pytest.approx(0.5)
    assert result["benchmarks"]["b"]["avg@2"] == 1.0 and result["benchmarks"]["b"]["pass@2"] == 1.0
    assert result["overall"]["avg@2"] == pytest.approx(0.5) and result["overall"]["pass@2"] == pytest.approx(2 / 3)
    flat = flat_metrics(result)
    assert flat[f"val/{cfg.env.name}/a/avg@2"] == pytest.approx(0.25)
    table = format_table([result])
    assert "ALL" in table and "0.667" in table


def test_summary_line_is_one_line():
    line = summary_line({"step": 3, "reward/mean": 0.5, "timing/step_s": 2.0, "val/math/avg@4": 0.25,
                         "val/math/gsm8k/avg@4": 0.1}, 10)
    assert "\n" not in line and "step 3/10" in line and "math/avg@4 0.250" in line and "gsm8k" not in line


def test_evaluate_a_checkpoint_writes_json_and_table(two_step_run, capsys):
    import pettingllms.evaluate as evaluate

    run_dir, _, _, _ = two_step_run
    out = run_dir / "eval.json"
    cfg = trainer_cfg(run_dir.parents[2], f"eval.checkpoint={run_dir}", "eval.k=2", "eval.limit=4",
                      f"eval.output={out}")
    assert evaluate._evaluate(cfg) == 0
    result = json.loads(out.read_text())
    assert result["checkpoint"].endswith("step_000002") and result["num_problems"] == 4
    assert set(result["benchmarks"]) == {"alpha", "beta"}
    o = result["overall"]
    assert 0.0 <= o["avg@2"] <= o["pass@2"] <= 1.0
    printed = capsys.readouterr().out
    assert "avg@k" in printed and "alpha" in printed and "ALL" in printed
    with pytest.raises(ConfigError, match="not a complete checkpoint"):
        evaluate.run_evaluation(trainer_cfg(run_dir.parents[2], f"eval.checkpoint={run_dir / 'trajectories'}"))


def test_sandbox_and_judge_errors_are_step_metrics(two_step_run):
    _, history, _, _ = two_step_run
    for row in history:  # the vowel env runs no programs and asks no judge
        assert row["sandbox/runs"] == 0.0 and row["sandbox/errors"] == 0.0
        assert row["judge/errors"] == 0.0


def test_held_out_before_and_after_training(two_step_run):
    # trainer.validation.val_before: the untrained policy is validated once (kept for a resume) and the run
    # ends with one line comparing it with the last validation
    run_dir, history, _, _ = two_step_run
    before = json.loads((run_dir / "val_before.json").read_text())
    env = f"val/{ENV_NAME}"
    assert set(before) == {k for k in history[-1] if k.startswith("val/")} and f"{env}/avg@2" in before
    line = before_after(before, history)
    assert line.startswith(f"held-out {ENV_NAME} (untrained vs step 2): avg@2 {before[env + '/avg@2']:.3f} before -> ")
    fake = {f"{env}/avg@2": 0.25, f"{env}/pass@2": 0.5}
    after = [{"step": 1}, {"step": 2, f"{env}/avg@2": 0.5, f"{env}/pass@2": 0.5}]
    assert before_after(fake, after).endswith("avg@2 0.250 before -> 0.500 after (+0.250); "
                                              "pass@2 0.500 before -> 0.500 after (+0.000)")
    assert "no validation at the last step" in before_after(fake, after[:1] + [{"step": 2}])


def test_lora_trainer_and_its_engine_hold_one_base(tmp_path):
    """trainer.backend=local with LoRA: the HF engine merges updates into the worker's frozen base
    tensors (no second copy), and training and the weight sync run on it."""
    cfg = trainer_cfg(tmp_path, "trainer.run_name=shared_base", "trainer.total_steps=1", "model.lora.enabled=true")
    trainer = LocalTrainer(cfg)
    try:
        worker = trainer.workers["shared"]
        slot = trainer.backend.engine.inner._slot("shared")
        base = worker.frozen_base_weights()
        assert base and all(slot.base[k].data_ptr() == v.data_ptr() for k, v in base.items())
        metrics = trainer.train_step(1)
        assert math.isfinite(metrics["train/loss"]) and metrics["policies/trained"] == 1.0
        assert all(slot.base[k].data_ptr() == v.data_ptr() for k, v in base.items())
    finally:
        trainer.close()
