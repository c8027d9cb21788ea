"""algorithm.group_filter (none | zero_var | dapo) and rollout.max_refill: a filtered step never
trains on a zero-variance group, costs no update when every group is flat, and DAPO refills."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_fixtures import ENV_NAME, RandomTokenEngine, VowelEnv, trainer_cfg  # noqa: E402

from pettingllms.algorithms.filtering import filter_batches, split_groups  # noqa: E402
from pettingllms.envs.base import ENV_REGISTRY, StepResult, register_env  # noqa: E402
from pettingllms.records import Sample  # noqa: E402

FLAT_CHECKER = "test_vowels_flat_checker"


class FlatCheckerEnv(VowelEnv):
    """The vowel env whose checker is scored 0 whatever it writes and whose team reward is the
    writer's: every checker group has zero variance, the writer's groups mostly do not."""

    def step(self, agent: str, action: str) -> StepResult:
        if agent == "checker":
            return StepResult(local_reward=0.0, info={})
        return super().step(agent, action)

    def team_reward(self) -> float:
        return self.scores["writer"]


if FLAT_CHECKER not in ENV_REGISTRY:
    register_env(FLAT_CHECKER)(FlatCheckerEnv)


def sample(key: tuple, reward: float, padding: bool = False) -> Sample:
    return Sample(problem_id=str(key[0]), turn=key[1], agent=key[2], episode_id="e", prompt_ids=[1],
                  response_ids=[2], logprobs=[-1.0], reward=reward, group_key=key,
                  info={"padding": True} if padding else {})


def test_split_and_filter_groups():
    a, b, c = ("p0", 0, "w"), ("p0", 0, "c"), ("p1", 0, "w")
    samples = [sample(a, 1.0), sample(a, 0.0), sample(b, 0.5), sample(b, 0.5), sample(c, 1.0),
               sample(c, 0.0, padding=True)]  # c: one real sample plus padding -> no variance
    signal, flat = split_groups(samples)
    assert [g[0].group_key for g in signal] == [a] and [g[0].group_key for g in flat] == [b, c]
    kept, m = filter_batches([samples], "zero_var")
    assert {s.group_key for s in kept} == {a} and m["filter/groups_dropped"] == 2.0
    assert m["filter/samples_dropped"] == 4.0 and m["filter/dropped_frac"] == pytest.approx(2 / 3)
    assert filter_batches([samples], "none") == (samples, {})
    # dapo keeps at most as many groups as the first rollout had, in rollout order
    refill = [sample(("p2", 0, "w"), r) for r in (0.0, 1.0)] + [sample(("p3", 0, "w"), r) for r in (0.2, 0.4)]
    kept, m = filter_batches([samples, refill, refill[:2]], "dapo")
    assert m["filter/groups_kept"] == 3.0 and m["filter/refills"] == 2.0
    assert [s.problem_id for s in kept] == ["p0", "p0", "p2", "p2", "p3", "p3"]
    with pytest.raises(ValueError, match="group_filter"):
        filter_batches([samples], "mean")


def spy_updates(trainer) -> list[list[Sample]]:
    """Record what each real worker.update is handed (the update itself runs unchanged)."""
    seen: list[list[Sample]] = []
    for worker in trainer.workers.values():
        real = worker.update

        def update(samples, step, _real=real, **kw):
            seen.append(list(samples))
            return _real(samples, step, **kw)

        worker.update = update
    return seen


def run(tmp_path, *overrides: str):
    from pettingllms.trainer.local import LocalTrainer

    cfg = trainer_cfg(tmp_path, "trainer.total_steps=1", "trainer.checkpoint.save_freq=0", "trainer.run_name=f",
                      *overrides)
    trainer = LocalTrainer(cfg, engine=RandomTokenEngine())
    seen = spy_updates(trainer)
    before = {n: [p.detach().clone() for p in w.model.parameters()] for n, w in trainer.workers.items()}
    try:
        history = trainer.fit()
        after = {n: list(w.model.parameters()) for n, w in trainer.workers.items()}
    finally:
        trainer.close()
    moved = any(not torch.equal(x, y) for n in before for x, y in zip(before[n], after[n]))
    return history[-1], seen, moved


def test_a_filtered_step_never_trains_on_a_zero_variance_group(tmp_path):
    last, seen, moved = run(tmp_path, f"env.name={FLAT_CHECKER}", "algorithm.group_filter=zero_var", "rollout.k=3")
    trained = [s for batch in seen for s in batch]
    assert trained and moved and last["filter/groups_dropped"] >= 2  # every checker group, at least
    assert {s.agent for s in trained} == {"writer"}
    for members in split_groups(trained)[1]:
        pytest.fail(f"trained on the zero-variance group {members[0].group_key}")
    # unfiltered, the same step hands the checker's flat groups to the update
    _, seen_all, _ = run(tmp_path / "none", f"env.name={FLAT_CHECKER}", "rollout.k=3")
    assert "checker" in {s.agent for batch in seen_all for s in batch}


@pytest.mark.parametrize("mode", ["zero_var", "dapo"])
def test_a_step_whose_groups_are_all_flat_costs_no_update(tmp_path, mode):
    # rollout.k=1: every group holds one sample, so no group has variance
    last, seen, moved = run(tmp_path, f"env.name={ENV_NAME}", "rollout.k=1", f"algorithm.group_filter={mode}",
                            "rollout.max_refill=2")
    assert seen == [] and not moved and last["policies/trained"] == 0.0
    assert last["filter/groups_kept"] == 0.0 and last["filter/dropped_frac"] == 1.0
    # dapo tried its two refills on further problems (batch 2 each); zero_var never refills
    assert last["filter/refills"] == (2.0 if mode == "dapo" else 0.0)
    assert last["data/consumed"] == (6 if mode == "dapo" else 2)
    # the refills' own episodes are reported apart from the first rollout's (metrics name which they cover)
    assert last.get("refill/episode/count") == (4.0 if mode == "dapo" else None)
    assert last["episode/count"] == 2.0


def test_bad_values_are_one_line():
    from pettingllms.cli.config_loading import load_config
    from pettingllms.errors import ConfigError

    with pytest.raises(ConfigError, match="group_filter"):
        load_config("tiny_test", ["algorithm.group_filter=mean"])
    with pytest.raises(ConfigError, match="max_refill"):
        load_config("tiny_test", ["rollout.max_refill=-1"])
