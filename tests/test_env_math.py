"""The math env: scripted episodes, rewards, hostile replies, and the math-verify judge."""
from __future__ import annotations

import copy
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pettingllms.envs import make_env
from pettingllms.envs.math.env import tool_answer_from_output
from pettingllms.envs.programs import extract_program
from pettingllms.envs.math.verify import answers_equal, extract_answer, is_safe_to_parse

PROBLEM = {"id": "p1", "question": "Tom has 3 apples and buys 4 more. How many apples?", "answer": "7"}
RIGHT_PROGRAM = "Here is my code:\n```python\napples = 3 + 4\nprint(apples)\n```"
WRONG_PROGRAM = "```python\nprint(3 * 4)\n```"
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "env"


def user_text(env, agent: str) -> str:
    messages = env.observation(agent)
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


def new_env(**options):
    env = make_env("math", **options)
    env.reset(PROBLEM, seed=0)
    return env


def test_agreeing_episode_ends_with_success():
    env = new_env(max_turns=3)
    assert env.agents == ("tool", "reasoner")
    assert "```python" in env.observation("tool")[0]["content"]
    assert "\\boxed{}" in env.observation("reasoner")[0]["content"]
    tool = env.step("tool", RIGHT_PROGRAM)
    assert tool.local_reward == 1.0 and tool.info["answer"] == "7" and tool.info["program_ok"]
    assert not env.done and env.team_reward() == 1.0  # before the reasoner acts: the tool's answer
    reasoner = env.step("reasoner", "3 + 4 = 7, so \\boxed{7}.")
    assert reasoner.local_reward == 1.0 and reasoner.info["agreed"]
    assert env.done and env.success and env.team_reward() == 1.0


def test_disagreement_continues_and_later_prompts_show_the_other_answer():
    env = new_env(max_turns=2)
    assert "12" not in user_text(env, "reasoner")
    assert env.step("tool", WRONG_PROGRAM).local_reward == 0.0
    # Turn 0 answers are independent: the reasoner does not see the tool's yet.
    assert "12" not in user_text(env, "reasoner")
    assert env.step("reasoner", "\\boxed{7}").local_reward == 1.0
    assert not env.done and env.team_reward() == 1.0
    env.end_turn()
    tool_prompt = user_text(env, "tool")
    assert "print(3 * 4)" in tool_prompt  # its last program
    assert "It printed: 12" in tool_prompt  # and what it printed
    assert "The reasoner's answer: 7" in tool_prompt
    env.step("tool", RIGHT_PROGRAM)
    reasoner_prompt = user_text(env, "reasoner")
    assert "Your last answer: 7" in reasoner_prompt
    assert "The Python tool's answer: 7" in reasoner_prompt
    env.step("reasoner", "I think it is \\boxed{8}")  # now they disagree again
    assert not env.agreed and env.team_reward() == 0.0
    env.end_turn()
    assert env.done  # max_turns reached
    late = env.step("tool", RIGHT_PROGRAM)
    assert late.local_reward == 0.0 and "over" in late.info["error"]


def test_team_reward_follows_the_reasoner_once_it_has_acted():
    env = new_env()
    env.step("tool", RIGHT_PROGRAM)
    assert env.team_reward() == 1.0
    env.step("reasoner", "\\boxed{5}")
    assert env.team_reward() == 0.0 and not env.success


@pytest.mark.parametrize("reply", ["", "   ", "asdf qwer zxcv", None, 12345, "x" * 1_000_000,
                                   "```python\n" + "#" * 1_000_000 + "\n```", "\\boxed{" * 5000,
                                   "```python\nprint('a' * 10**8)\n```", "```python\nwhile True: pass\n```",
                                   "```python\n1/0\n```", "```python\nprint()\n```"])
def test_garbage_replies_give_zero_and_never_raise(reply):
    env = new_env(timeout_s=1.0)
    start = time.monotonic()
    tool = env.step("tool", reply)
    reasoner = env.step("reasoner", reply)
    assert tool.local_reward == 0.0 and reasoner.local_reward == 0.0
    assert env.team_reward() == 0.0 and not env.done
    env.end_turn()
    assert len(user_text(env, "tool")) < 3000 and len(user_text(env, "reasoner")) < 1000
    assert time.monotonic() - start < 10


def test_tool_sees_why_its_program_failed():
    env = new_env(timeout_s=1.0)
    info = env.step("tool", "```python\nprint(1/0)\n```").info
    assert info["program_ok"] is False
    env.step("reasoner", "\\boxed{7}")
    env.end_turn()
    assert "ZeroDivisionError" in user_text(env, "tool")
    env2 = new_env(timeout_s=1.0)
    assert env2.step("tool", "```python\nwhile True: pass\n```").info["program_error"] in ("timeout", "cpu_time")


def test_strict_boxed_option():
    loose, strict = new_env(), new_env(strict_boxed=True)
    assert loose.step("reasoner", "The answer is 7.").local_reward == 1.0
    assert strict.step("reasoner", "The answer is 7.").local_reward == 0.0
    assert strict.step("reasoner", "\\boxed{7}").local_reward == 1.0


def test_options_are_checked_and_bad_calls_are_refused():
    with pytest.raises(TypeError, match="unknown options"):
        make_env("math", max_turns=2, temprature=0.3)
    with pytest.raises(ValueError):
        make_env("math", max_turns=0)
    env = new_env()
    assert env.step("critic", "\\boxed{7}").info["error"].startswith("unknown agent")
    with pytest.raises(ValueError, match="question"):
        env.reset({"id": "x"}, seed=0)


def test_branches_are_independent_deep_copies():
    env = new_env()
    left, right = copy.deepcopy(env), copy.deepcopy(env)
    assert left.step("tool", RIGHT_PROGRAM).local_reward == 1.0
    assert right.step("tool", WRONG_PROGRAM).local_reward == 0.0
    assert env.answers["tool"] is None and left.answers["tool"] == "7" and right.answers["tool"] == "12"


def test_env_configs_build_their_envs():
    for name in ("math", "math_single"):
        cfg = OmegaConf.load(CONFIGS / f"{name}.yaml")
        assert cfg.name == name and cfg.data == "math"
        env = make_env(cfg.name, max_turns=cfg.max_turns, **OmegaConf.to_container(cfg.options))
        env.reset(PROBLEM, seed=0)
        assert env.step("reasoner", "\\boxed{7}").local_reward == 1.0


def test_single_agent_variant():
    env = make_env("math_single", max_turns=2)
    env.reset(PROBLEM, seed=0)
    assert env.agents == ("reasoner",)
    # No answer in the reply: another turn, which shows that nothing was read.
    assert env.step("reasoner", "let me think about it").local_reward == 0.0
    env.end_turn()
    assert not env.done and "Your last answer:" in user_text(env, "reasoner")
    assert env.step("reasoner", "\\boxed{7}").local_reward == 1.0
    env.end_turn()
    assert env.done and env.success
    # An answer, right or wrong, ends the episode at once (no gold answer decides it).
    for reply, right in (("\\boxed{6}", False), ("\\boxed{7}", True)):
        env = make_env("math_single", max_turns=3)
        env.reset(PROBLEM, seed=0)
        env.step("reasoner", reply)
        assert env.done and env.success is right and env.turn == 0


def test_program_and_answer_extraction():
    assert extract_program("```python\na=1\n```\ntext\n```python\nprint(2)\n```") == "print(2)"
    assert extract_program("```\nprint(5)\n```") == "print(5)"
    assert extract_program("Sure!\n```python\nx = 2\nprint(x") == "x = 2\nprint(x"  # cut off
    assert extract_program("print(3)") == "print(3)"
    assert extract_program("no code here") is None and extract_program("") is None
    assert tool_answer_from_output("debug\n 42 \n\n") == "42"
    assert tool_answer_from_output("The answer is 42") == "42"
    assert tool_answer_from_output("sqrt(2)/2") == "sqrt(2)/2"
    assert tool_answer_from_output("\\boxed{1/2}") == "1/2"
    assert tool_answer_from_output("") is None and tool_answer_from_output("9" * 5000) is None
    assert extract_answer("a \\boxed{\\frac{1}{2}} then \\boxed{3}") == "3"
    assert extract_answer("\\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert extract_answer("So she has 1,234 apples.") == "1234"
    assert extract_answer("So she has 1,234 apples.", strict_boxed=True) is None


@pytest.mark.parametrize("gold,pred,equal", [
    ("1/2", "0.5", True), ("0.5", "\\frac{1}{2}", True), ("\\frac{1}{2}", "\\dfrac12", True),
    ("18", "18.0", True), ("1000", "1,000", True), ("0.3", "0.30000000000000004", True),
    ("2^{n-1}", "2^(n-1)", True), ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2", True), ("3", "x = 3", True),
    ("10", "10\\%", True), ("18", "\\$18", True),
    ("7", "8", False), ("1/2", "1/3", False), ("7", "seven", False), ("7", "", False),
    ("5", "9^{9^{9}}", False), ("5", "10**10**10", False), ("5", "100000!", False),
])
def test_math_equivalence(gold, pred, equal):
    assert answers_equal(gold, pred) is equal


def test_hostile_answers_are_refused_fast():
    start = time.monotonic()
    for s in ("9^{9^{9}}", "2^{10^{6}}", "2**(10*10000)", "\\binom{10^6}{5*10^5}", "1" * 500):
        assert not is_safe_to_parse(s)
        assert answers_equal("1", s) is False
    assert time.monotonic() - start < 2
    assert is_safe_to_parse("2^{100}") and is_safe_to_parse("x^2+1")


def test_judge_works_from_worker_threads():
    cases = [("1/2", "\\frac{1}{2}", True), ("2^{n-1}", "2^(n-1)", True), ("\\sqrt{4}", "2", True),
             ("3", "x=3", True), ("7", "8", False)] * 2
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda c: answers_equal(c[0], c[1]), cases))
    assert got == [c[2] for c in cases]

    def episode(_):
        env = new_env()
        env.step("tool", RIGHT_PROGRAM)
        env.step("reasoner", "\\boxed{\\frac{14}{2}}")
        return env.done, env.team_reward()

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(episode, range(4))) == [(True, 1.0)] * 4


def test_judge_exceptions_are_counted_and_logged_once_per_kind(monkeypatch, caplog):
    from pettingllms.envs.math import verify

    def broken(s):
        raise (RecursionError if "y" in s else TypeError)("sympy fell over")
    monkeypatch.setattr(verify, "_parse", broken)  # the seam math-verify is called through
    before = verify.judge_counts()
    with caplog.at_level(logging.WARNING, logger="pettingllms.envs.math.verify"):
        results = [answers_equal("x+1", "x + 2"), answers_equal("x+1", "x+3"),
                   answers_equal("y", "y^2"), answers_equal("7", "7.0")]  # last: fast path
    assert results == [False, False, False, True]
    after = verify.judge_counts()
    assert after["errors/TypeError"] - before.get("errors/TypeError", 0) == 2
    assert after["errors/RecursionError"] - before.get("errors/RecursionError", 0) == 1
    logged = [r.getMessage() for r in caplog.records if "math judge" in r.getMessage()]
    if not before:  # each kind is logged the first time this process sees it
        assert len(logged) == 2 and "judge/errors/TypeError" in logged[0]
    else:
        assert len(logged) == sum(1 for k in ("errors/TypeError", "errors/RecursionError")
                                  if k not in before)
