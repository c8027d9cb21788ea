"""Every acting agent gets a learning signal under the DEFAULT config (issue 12).

For each env, a scripted engine gives every agent candidates of different quality (a right
and a wrong one), played through the public Rollout API with the env's own config file and
the schema's default reward mix and algorithm. Each agent that acts must own at least one
group whose rewards differ (a group with equal rewards carries no gradient). Where the issue
found starvation (the math tool at turn >= 1, the grid tool, the code tester), the test also
shows that team reward alone would starve the agent, so the check can fail.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fakes import ScriptedEngine, make_cfg
from pettingllms.algorithms.advantages import compute_advantages
from pettingllms.trainer.assemble import rollout_settings
from pettingllms.envs import make_env
from pettingllms.envs.grid.splits import split_seed
from pettingllms.rollout.runner import Rollout
from pettingllms.trainer.metrics import agent_signal_metrics

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "env"


def _agent_turn(req):
    *_, turn, agent = req.request_id.split("/")
    return agent, int(turn[1:])


def _play(env_file: str, problem: dict, texts, **reward):
    """One problem under configs/env/<env_file>.yaml and the schema defaults; texts(agent,
    turn) -> candidate texts. Returns the batch and the config."""
    env_cfg = OmegaConf.load(CONFIGS / f"{env_file}.yaml")
    cfg = make_cfg(env=env_cfg, **({"reward": reward} if reward else {}))
    options = OmegaConf.to_container(cfg.env.options, resolve=True) or {}

    def factory():
        return make_env(str(cfg.env.name), max_turns=int(cfg.env.max_turns), **options)

    agents = factory().agents
    engine = ScriptedEngine(lambda req: texts(*_agent_turn(req)))
    batch = Rollout(engine, factory, {a: "shared" for a in agents}, rollout_settings(cfg)).run([problem], seed=0)
    compute_advantages(batch.samples, cfg.algorithm)
    return batch, cfg, agents


def _groups(batch):
    out = {}
    for s in batch.samples:
        out.setdefault(tuple(s.group_key), []).append(s.reward)
    return out


def _mixed_agents(batch) -> set[str]:
    return {key[-1] for key, rewards in _groups(batch).items() if max(rewards) > min(rewards)}


def _check_every_agent_has_signal(batch, agents):
    acted = {s.agent for s in batch.samples}
    assert acted == set(agents)
    assert _mixed_agents(batch) == set(agents), _groups(batch)
    m = agent_signal_metrics(batch.samples, list(agents))
    for a in agents:
        assert m[f"groups/zero_var_frac/{a}"] < 1.0 and m[f"advantage/abs_mean/{a}"] > 0.0


# ---------------------------------------------------------------------------- math

MATH_PROBLEM = {"id": "m0", "question": "What is 2 + 2?", "answer": "4"}


def _math_texts(agent, turn):
    if agent == "tool":  # a right and a wrong program at every turn
        return ["```python\nprint(2 + 2)\n```", "```python\nprint(5)\n```"]
    # reasoner: wrong at turn 0 (so the episode goes on to turn 1), then right or wrong
    return ["\\boxed{5}", "\\boxed{3}"] if turn == 0 else ["\\boxed{4}", "\\boxed{6}"]


def test_math_every_agent_and_the_tool_at_every_turn():
    batch, cfg, agents = _play("math", MATH_PROBLEM, _math_texts)
    assert cfg.reward.local_weight > 0
    _check_every_agent_has_signal(batch, agents)
    groups = _groups(batch)
    for turn in (0, 1):  # the tool's own answer decides its reward at turn 1 too
        rewards = groups[("m0", turn, "tool")]
        assert max(rewards) > min(rewards)
    # The committed tool branch at turn 1 is a right program, not the tie rule's pick.
    (tool1,) = [s for s in batch.samples if s.agent == "tool" and s.turn == 1 and s.committed]
    assert "2 + 2" in tool1.text
    # Team reward alone: every tool candidate at turn 1 gets the turn-0 reasoner's 0.
    batch, _, _ = _play("math", MATH_PROBLEM, _math_texts, team_weight=1.0, local_weight=0.0)
    assert set(_groups(batch)[("m0", 1, "tool")]) == {0.0}


def test_math_single():
    batch, _, agents = _play("math_single", MATH_PROBLEM, lambda a, t: ["\\boxed{4}", "\\boxed{9}"])
    _check_every_agent_has_signal(batch, agents)


# ---------------------------------------------------------------------------- code

CODE_PROBLEM = {
    "id": "c0", "source": "unit", "kind": "function", "entry_point": "add",
    "question": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
    "starter": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
    "reference": "def add(a: int, b: int) -> int:\n    return a + b\n",
    "tests": json.dumps(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]),
}
GOOD_CODE = "```python\ndef add(a, b):\n    return a + b\n```"
BAD_CODE = "```python\ndef add(a, b):\n    return a - b\n```"
GOOD_TESTS = "```python\nassert add(2, 2) == 4\nassert add(0, 7) == 7\n```"
BAD_TESTS = "```python\nassert add(2, 2) == 5\n```"  # rejects the reference: invalid


def _code_texts(agent, turn):
    return {"coder": [GOOD_CODE, BAD_CODE], "tester": [GOOD_TESTS, BAD_TESTS],
            "solver": [GOOD_CODE + "\n" + GOOD_TESTS.replace("```python", "```tests"),
                       BAD_CODE + "\n" + BAD_TESTS.replace("```python", "```tests")]}[agent]


@pytest.mark.parametrize("env_file", ["code", "code_single"])
def test_code(env_file):
    batch, _, agents = _play(env_file, CODE_PROBLEM, _code_texts)
    _check_every_agent_has_signal(batch, agents)
    if env_file == "code":  # team reward alone: every tester candidate sees the same code
        batch, _, _ = _play(env_file, CODE_PROBLEM, _code_texts, team_weight=1.0, local_weight=0.0)
        assert "tester" not in _mixed_agents(batch)


# ---------------------------------------------------------------------------- grids

def _grid_problem(env: str) -> tuple[dict, str]:
    """A generated test puzzle and a right action line for it."""
    import importlib
    data = importlib.import_module(f"pettingllms.envs.{env}.data")
    seed = split_seed("test", 0)
    row = {"id": f"{env}-0", "seed": seed, **data.make_row(seed)}
    if env == "sudoku":
        puzzle, solution = json.loads(row["puzzle"]), json.loads(row["solution"])
        moves = [f"({r + 1}, {c + 1}, {solution[r][c]})" for r in range(len(puzzle))
                 for c in range(len(puzzle)) if puzzle[r][c] == 0]
        return row, "Actions: " + ", ".join(moves)
    return row, "Actions: " + ", ".join(row["solution"])


def _grid_texts(right: str):
    program = f"```python\nprint({right!r})\n```"

    def texts(agent, turn):
        if agent == "tool":  # a program that prints the solution, and one that crashes
            return [program, "```python\nprint(undefined_name)\n```"]
        return [right, "I am not sure what to do."]
    return texts


@pytest.mark.parametrize("env", ["sudoku", "sokoban", "plan_path"])
def test_grid_envs(env):
    problem, right = _grid_problem(env)
    batch, _, agents = _play(env, problem, _grid_texts(right))
    _check_every_agent_has_signal(batch, agents)
    # Team reward alone: the tool's moves are only tried on a copy, so its candidates tie.
    batch, _, _ = _play(env, problem, _grid_texts(right), team_weight=1.0, local_weight=0.0)
    assert "tool" not in _mixed_agents(batch)
    single, _, single_agents = _play(f"{env}_single", problem, _grid_texts(right))
    _check_every_agent_has_signal(single, single_agents)


# ---------------------------------------------------------------------------- starvation

def _sample(agent, key, reward, advantage=0.0):
    from pettingllms.records import Sample
    return Sample(agent=agent, turn=0, problem_id="p", episode_id="e", prompt_ids=[], response_ids=[],
                  logprobs=[], group_key=key, reward=reward, advantage=advantage)


def test_agent_signal_metrics_by_hand():
    samples = [_sample("tool", ("p", 0, "tool"), 1.0), _sample("tool", ("p", 0, "tool"), 1.0),
               _sample("tool", ("q", 0, "tool"), 0.0, 0.5), _sample("tool", ("q", 0, "tool"), 1.0, -0.5),
               _sample("plan", ("p", 0, "plan"), 0.0), _sample("plan", ("p", 0, "plan"), 0.0),
               _sample("plan", ("q", 0, "plan"), 0.3)]  # a lone sample: no signal either
    m = agent_signal_metrics(samples, ["tool", "plan", "idle"])
    assert m["groups/zero_var_frac/tool"] == 0.5 and m["groups/zero_var_frac/plan"] == 1.0
    assert m["advantage/abs_mean/tool"] == 0.25 and m["advantage/abs_mean/plan"] == 0.0
    assert m["groups/zero_var_frac/idle"] != m["groups/zero_var_frac/idle"]  # nan: never acted


def test_starvation_warning_after_n_flat_steps():
    from pettingllms.trainer.metrics import starved_agents
    row = lambda tool, plan: {"groups/zero_var_frac/tool": tool, "groups/zero_var_frac/plan": plan}
    history = [row(1.0, 0.5), row(1.0, 1.0), row(1.0, 1.0)]
    assert starved_agents(history, ["tool", "plan"], 3) == [("tool", 3)]
    assert starved_agents(history, ["tool", "plan"], 2) == [("plan", 2)]  # tool at 3: not a multiple
    assert starved_agents(history + [row(1.0, 0.0)], ["tool", "plan"], 2) == [("tool", 4)]
    assert starved_agents(history, ["tool", "plan"], 0) == []
    assert make_cfg().trainer.logging.starvation_warn_steps > 0


def test_tie_rule_is_seeded_among_the_best_and_logged_once(monkeypatch, caplog):
    import logging
    import random

    from pettingllms.rollout.strategies import tree

    monkeypatch.setattr(tree, "_tie_logged", False)
    strategy = tree.TreeStrategy()
    with caplog.at_level(logging.INFO, logger=tree.__name__):
        picks = {strategy.choose([0.0, 1.5, 0.5, 1.5], random.Random(seed)) for seed in range(40)}
        assert strategy.choose([0.0, 2.0, 1.0], random.Random(0)) == 1
    assert picks == {1, 3}  # both tied best branches occur, never a worse one, never index order alone
    assert [r.getMessage() for r in caplog.records].count(tree.TIE_RULE) == 1


@pytest.mark.slow  # two real update steps of the tiny model
def test_trainer_warns_about_a_starved_agent(tmp_path, caplog):
    # rollout.k=1: every group holds one sample, so no agent ever gets a signal
    import logging

    from pettingllms.trainer.local import LocalTrainer
    from trainer_fixtures import RandomTokenEngine, trainer_cfg

    cfg = trainer_cfg(tmp_path, "rollout.k=1", "trainer.total_steps=2", "trainer.logging.starvation_warn_steps=2",
                      "trainer.checkpoint.save_freq=0", "trainer.run_name=starve")
    trainer = LocalTrainer(cfg, engine=RandomTokenEngine())
    try:
        with caplog.at_level(logging.WARNING, logger="pettingllms.trainer.local"):
            history = trainer.fit()
    finally:
        trainer.close()
    assert [row["groups/zero_var_frac/writer"] for row in history] == [1.0, 1.0]
    warned = [r.getMessage() for r in caplog.records if "no learning signal" in r.getMessage()]
    assert len(warned) == 2 and "'writer'" in warned[0] + warned[1] and "2 steps" in warned[0]
