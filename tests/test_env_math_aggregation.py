"""The math_aggregation env: two samplers then an aggregator; gold answers, rewards, hostile
replies, and one AT-GRPO step (tiny model; the embedded model in a slow test)."""
from __future__ import annotations

import copy

import pytest

from pettingllms.envs import make_env

ROW = {"id": "m", "question": "What is 17 + 25?", "answer": "42"}


def play(replies: dict[str, str], **options):
    env = make_env("math_aggregation", **options)
    env.reset(ROW, seed=0)
    results = {a: env.step(a, replies[a]) for a in env.agents}
    env.end_turn()
    return env, results


def test_the_gold_answer_everywhere_succeeds_and_rewards_every_agent():
    env, results = play({a: "17 + 25 = 42, so \\boxed{42}" for a in ("sampler_1", "sampler_2", "aggregator")})
    assert env.done and env.success and env.team_reward() == 1.0
    assert all(r.local_reward == 1.0 for r in results.values())


def test_the_aggregator_reads_both_samples_and_its_answer_is_the_teams():
    env = make_env("math_aggregation")
    env.reset(ROW, seed=0)
    env.step("sampler_1", "\\boxed{41}")
    assert env.team_reward() == 0.0
    env.step("sampler_2", "I think it is \\boxed{42}")
    assert env.team_reward() == 1.0  # before the aggregator: the last sampler's answer
    prompt = env.observation("aggregator")[1]["content"]
    assert "Solution 1:\n\\boxed{41}" in prompt and "(answer read from it: 42)" in prompt
    assert "Solution" not in env.observation("sampler_1")[1]["content"]  # samplers are independent
    wrong = copy.deepcopy(env)
    assert wrong.step("aggregator", "\\boxed{41}").local_reward == 0.0 and wrong.team_reward() == 0.0
    assert env.step("aggregator", "Solution 2 is right: \\boxed{42}").local_reward == 1.0 and env.success


def test_an_aggregator_without_an_answer_gets_another_turn_up_to_max_turns():
    env, _ = play({"sampler_1": "\\boxed{42}", "sampler_2": "\\boxed{42}", "aggregator": "hmm"}, max_turns=2)
    assert not env.done and "no answer" in env.observation("sampler_1")[1]["content"]
    env, _ = play({"sampler_1": "\\boxed{42}", "sampler_2": "\\boxed{42}", "aggregator": "hmm"})
    assert env.done and not env.success  # max_turns 1


@pytest.mark.parametrize("reply", ["", "no idea", "\x00\xff" * 1000, "\\boxed{" + "9" * 100_000 + "}", None])
def test_garbage_replies_score_zero(reply):
    env, results = play({a: reply for a in ("sampler_1", "sampler_2", "aggregator")}, strict_boxed=True)
    assert env.team_reward() == 0.0 and all(r.local_reward == 0.0 for r in results.values())
    with pytest.raises(TypeError):
        make_env("math_aggregation", colour="red")


def one_step(tmp_path, *extra: str) -> dict:
    from pettingllms.cli.config_loading import load_config
    from trainer_fixtures import fit

    cfg = load_config("tiny_test", ["env=math_aggregation", "env.data=math_easy", f"env.data_root={tmp_path}",
                                    "trainer.total_steps=1", f"trainer.output_dir={tmp_path / 'out'}",
                                    "trainer.run_name=r", *extra])
    last = fit(cfg)[-1]
    assert last["step"] == 1 and last["samples/count"] == 2 * 2 * 3  # batch 2, k 2, three agents
    assert all(f"reward/{a}/mean" in last for a in ("sampler_1", "sampler_2", "aggregator"))
    return last


def test_one_at_grpo_step_on_the_tiny_model(tmp_path):
    one_step(tmp_path)


@pytest.mark.slow  # the embedded model (SmolLM2-135M, LoRA), one AT-GRPO step
def test_one_at_grpo_step_on_the_embedded_model(tmp_path):
    one_step(tmp_path, "model=embedded", "model.lora.enabled=true", "rollout.sampling.max_new_tokens=24",
             "trainer.micro_batch_size=2", "trainer.deterministic=false")
