"""Code env: data determinism, scripted optimal play, the tester's validity term, garbage."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from pettingllms.config import EnvConfig
from pettingllms.envs import make_env
from pettingllms.envs.code.data import build, humaneval_rows
from pettingllms.envs.code.parsing import extract_code, extract_io_tests, humaneval_tests
from pettingllms.envs.code.rows import verify_function_rows, verify_io_rows

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(test_wall_s=2.0)

ADD_PROBLEM = {  # a tiny function task with a known reference
    "id": "unit/add", "source": "unit", "kind": "function", "entry_point": "add",
    "question": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
    "starter": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
    "reference": "def add(a: int, b: int) -> int:\n    return a + b\n",
    "tests": json.dumps(["assert add(1, 2) == 3", "assert add(-1, 1) == 0",
                         "assert add(10, 5) == 15"]),
}
GOOD_ADD = "```python\ndef add(a, b):\n    return a + b\n```"
BAD_ADD = "```python\ndef add(a, b):\n    return a - b\n```"
VALID_ADD_TESTS = "```python\nassert add(2, 2) == 4\nassert add(0, 7) == 7\n```"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("code_data")
    kw = dict(seed=0, offline=True, humaneval_limit=4, io_tasks=2, tests_per_io_task=3,
              test_fraction=0.5)
    report = build(out / "a", **kw)
    return out, kw, report


def _rows(folder: Path) -> list[dict]:
    rows = []
    for split in ("train", "test"):
        rows += pd.read_parquet(folder / f"{split}.parquet").to_dict(orient="records")
    return rows


def test_build_is_deterministic_and_rows_are_sound(built):
    out, kw, report = built
    assert report["humaneval"] == 4 and report["codeio"] == 2 and report["online"] is False
    assert report["humaneval_kept"] == 4 and report["humaneval_verify"]["dropped_rows"] == []
    assert report["codeio_verify"]["dropped_rows"] == []
    report_b = build(out / "b", **kw)
    for split in ("train", "test"):
        a = pd.read_parquet(out / "a" / f"{split}.parquet")
        b = pd.read_parquet(out / "b" / f"{split}.parquet")
        pd.testing.assert_frame_equal(a, b)
    assert report_b["train"] == report["train"] and report["test"] >= 1
    rows = _rows(out / "a")
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) and all(isinstance(i, str) for i in ids)
    assert {r["kind"] for r in rows} == {"function", "io"}
    # every reference really passes its own hidden tests inside the sandbox
    for row in rows:
        env = make_env("code", **FAST)
        env.reset(row, seed=0)
        assert env.hidden_ratio(row["reference"]) == 1.0, row["id"]


def test_other_seed_draws_other_io_tasks(built):
    out, kw, _ = built
    build(out / "c", **{**kw, "seed": 1})
    io_a = {r["id"] for r in _rows(out / "a") if r["kind"] == "io"}
    io_c = {r["id"] for r in _rows(out / "c") if r["kind"] == "io"}
    assert io_a != io_c


def _valid_tests_for(row: dict) -> str:
    tests = json.loads(row["tests"]) if isinstance(row["tests"], str) else row["tests"]
    if row["kind"] == "function":
        return "```python\n" + "\n".join(tests[:3]) + "\n```"
    return "".join(f"<input>\n{t['input']}</input>\n<output>\n{t['output']}\n</output>\n"
                   for t in tests[:3])


def test_scripted_optimal_policy_succeeds_on_built_problems(built):
    out, _, _ = built
    rows = _rows(out / "a")
    for row in (next(r for r in rows if r["kind"] == "function"),
                next(r for r in rows if r["kind"] == "io")):
        env = make_env("code", max_turns=2, **FAST)
        env.reset(row, seed=0)
        code = env.step("coder", f"Solution:\n```python\n{row['reference']}\n```")
        assert code.local_reward == 1.0 and code.info["code_found"]
        tester = env.step("tester", _valid_tests_for(row))
        assert tester.info["validity"] == 1.0 and tester.local_reward == 1.0  # reference ran
        env.end_turn()
        assert env.done and env.success and env.team_reward() == 1.0, env.render()


def test_tester_validity_uses_the_reference_and_catch_credit():
    env = make_env("code", max_turns=3, **FAST)
    env.reset(ADD_PROBLEM, seed=0)
    assert env.step("coder", BAD_ADD).local_reward == pytest.approx(0.0)  # 1-2, -1-1, 10-5 all wrong
    mixed = "```python\nassert add(2, 2) == 4\nassert add(2, 2) == 5\n```"
    r = env.step("tester", mixed)
    assert r.info["validity"] == 0.5  # only the reference decides which test is valid
    assert r.info["caught_bug"] and r.local_reward == pytest.approx(0.5 + 0.5)
    env.end_turn()
    assert not env.done and env.team_reward() == 0.0
    # the coder now sees the failing generated tests; the tester sees the current code
    coder_view = env.observation("coder")[1]["content"]
    assert "assert add(2, 2) == 4" in coder_view and "return a - b" in coder_view
    branch = copy.deepcopy(env)
    assert branch.step("coder", GOOD_ADD).local_reward == 1.0
    assert env.code.endswith("return a - b")  # the copy did not touch the original
    assert "return a + b" in branch.observation("tester")[1]["content"]
    r = branch.step("tester", VALID_ADD_TESTS)
    assert r.local_reward == 1.0 and not r.info["caught_bug"]
    branch.end_turn()
    assert branch.done and branch.success


@pytest.mark.parametrize("action", [
    "", "I cannot solve this.", None, 12345, "x" * 1_000_000, "```python\n" + "a" * 30_000,
    "```python\nimport os\nos._exit(0)\n```",  # exits 0 before any test can run
    "```python\nwhile True:\n    pass\n```",
    "```python\ndef add(a, b):\n    print('x' * 10**7)\n```",
    "```python\ndef add(a, b:\n```",
])
def test_garbage_coder_output_scores_zero_without_crashing(action):
    env = make_env("code", max_turns=1, test_wall_s=1.0)
    env.reset(ADD_PROBLEM, seed=0)
    r = env.step("coder", action)
    assert r.local_reward == 0.0
    t = env.step("tester", action)
    assert t.local_reward == 0.0
    env.end_turn()
    assert env.done and not env.success and env.team_reward() == 0.0
    assert isinstance(env.render(), str)


def test_garbage_tester_output_scores_zero():
    env = make_env("code", max_turns=2, **FAST)
    env.reset(ADD_PROBLEM, seed=0)
    env.step("coder", GOOD_ADD)
    for junk in ["", "assert", "```python\nassert add(1, 1) == 3\n```", "y" * 100_000,
                 "```python\nimport os\nos._exit(0)\n```", "```python\nassert True\n```",
                 "```python\nx = 2\nassert x + 2 == 4, 'add(2, 2)'\n```"]:
        r = env.step("tester", junk)
        assert r.local_reward == 0.0, junk[:40]
        assert not env.agreed


def test_single_agent_variant():
    env = make_env("code_single", max_turns=2, **FAST)
    env.reset(ADD_PROBLEM, seed=0)
    assert env.agents == ("solver",)
    answer = GOOD_ADD + "\n```tests\nassert add(2, 2) == 4\nassert add(3, 3) == 6\n```"
    r = env.step("solver", answer)
    assert r.local_reward == 1.0 and r.info["validity"] == 1.0
    env.end_turn()
    assert env.done and env.success
    env.reset(ADD_PROBLEM, seed=0)
    assert env.step("solver", "nonsense").local_reward == 0.0


def test_unknown_options_and_bad_problems_are_rejected():
    with pytest.raises(TypeError):
        make_env("code", no_such_option=1)
    env = make_env("code")
    with pytest.raises(ValueError):
        env.reset({"id": "x", "kind": "function", "tests": "[]"}, seed=0)


def test_configs_match_the_schema_and_build_envs():
    fields = {f.name for f in dataclasses.fields(EnvConfig)}
    for name in ("code", "code_single"):
        cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "env" / f"{name}.yaml"))
        assert set(cfg) <= fields and cfg["name"] == name and cfg["data"] == "code"
        env = make_env(cfg["name"], max_turns=cfg["max_turns"], **cfg["options"])
        assert env.max_turns == cfg["max_turns"]


def test_parsing_is_robust():
    assert extract_code("text\n```python\nprint(1)\n```\nmore\n```python\nprint(2)\n```") \
        == "print(2)"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"
    assert extract_code("def f():\n    return 3\n") .startswith("def f")
    assert extract_code("just words") == "" and extract_code("```python\n(((\n```") == ""
    # a function task: the solution is the last block defining the entry point, not a usage
    # example after it; a later wrong definition still wins over an earlier right one
    reply = "```python\ndef add_2(x):\n    return x + 2\n```\nUse it:\n```python\nprint(add_2(1))\n```"
    assert extract_code(reply, "add_2") == "def add_2(x):\n    return x + 2"
    assert extract_code(reply) == "print(add_2(1))"
    fixed = reply + "\n```python\ndef add_2(x):\n    return x - 2\n```"
    assert extract_code(fixed, "add_2") == "def add_2(x):\n    return x - 2"
    assert extract_code("```python\nprint(3)\n```", "add_2") == "print(3)"  # none defines it: as before
    pairs = extract_io_tests("<input>\n1 2\n</input>\n<output>\n3\n</output>\n"
                             "<input>5</input><output></output>", max_tests=5)
    assert pairs == [{"input": "1 2\n", "output": "3"}]
    tests = humaneval_tests("METADATA = {}\n\ndef check(candidate):\n    import math\n"
                            "    assert candidate(1) == 1\n    x = 2\n    assert candidate(x)\n",
                            "f")
    assert tests == ["candidate = f\nimport math\nassert candidate(1) == 1",
                     "candidate = f\nimport math\nx = 2\nassert candidate(x)"]


def test_hidden_tests_that_never_touch_the_function_are_dropped():
    suite = ("def check(candidate):\n"
             "    assert True, 'This prints if this assert fails 1 (good for debugging!)'\n"
             "    assert candidate(1) == 2\n"
             "    out = candidate(2)\n"
             "    expected = 3\n"
             "    assert out == expected\n"
             "    assert expected == 3\n"
             "    def helper(x):\n"
             "        return candidate(x) + 1\n"
             "    assert helper(1) == 3\n"
             "    assert abs(1 - 1) < 1e-6\n")
    tests = humaneval_tests(suite, "inc")
    assert [t.splitlines()[-1] for t in tests] == [
        "assert candidate(1) == 2", "assert out == expected", "assert helper(1) == 3"]
    rows = humaneval_rows()  # the real package: its 48 `assert True` lines are gone
    assert len(rows) == 164
    assert not any(t.splitlines()[-1].startswith("assert True") for r in rows
                   for t in r["tests"])


def test_verification_keeps_tests_the_reference_passes_and_a_no_op_fails():
    starter = "def first(xs):\n    \"\"\"First item, or None for an empty list.\"\"\"\n"
    row = {"id": "unit/first", "kind": "function", "entry_point": "first", "starter": starter,
           "reference": starter + "    return xs[0] if xs else None\n",
           "tests": ["assert first([4, 5]) == 4",
                     "assert first([]) is None",  # a no-op passes it: gameable, dropped
                     "assert first([1]) == 2"]}  # the reference fails it: dropped
    useless = {**row, "id": "unit/useless", "tests": ["assert first([]) is None"]}
    rows = [row, useless]
    report = verify_function_rows(rows)
    assert report == {"ref_failed_tests": 1, "noop_passed_tests": 2,
                      "dropped_rows": ["unit/useless"]}
    assert [r["id"] for r in rows] == ["unit/first"]
    assert rows[0]["tests"] == ["assert first([4, 5]) == 4"]
    io = [{"id": "io/a", "kind": "io", "reference": "print(input())",
           "tests": [{"input": "x\n", "output": "x"}, {"input": "\n", "output": " \n"}]},
          {"id": "io/b", "kind": "io", "reference": "print(1)",
           "tests": [{"input": "\n", "output": "2"}]}]
    report = verify_io_rows(io, run_reference=True)
    assert report == {"silent_passed_tests": 1, "ref_failed_tests": 1, "dropped_rows": ["io/b"]}
    assert io[0]["tests"] == [{"input": "x\n", "output": "x"}]


@pytest.mark.slow
def test_doing_nothing_scores_zero_on_every_humaneval_problem():
    """The HumanEval build (references and no-op checked in the sandbox), then `pass` scored by
    the env. All 164 problems with PETTINGLLMS_ALL_PATHS=1; every fourth in CI (all 164 took 106 s
    on a 2-core AVX2 box, CI's budget). (A second no-op such as `x = 1` would run the same
    program shape: the starter's docstring-only function, then one top-level statement.)"""
    from concurrent.futures import ThreadPoolExecutor

    from ci_budget import ALL_PATHS

    every = humaneval_rows()
    assert len(every) == 164
    rows = every if ALL_PATHS else every[::4]
    report = verify_function_rows(rows)
    assert report["ref_failed_tests"] == 0 and report["dropped_rows"] == [], report

    def score(row):
        env = make_env("code", test_wall_s=5.0)
        env.reset(row, seed=0)
        return {"pass": env.hidden_ratio("pass")}

    with ThreadPoolExecutor(4) as pool:
        scores = list(pool.map(score, rows))
    gamed = {r["id"]: s for r, s in zip(rows, scores) if any(s.values())}
    assert gamed == {}


def test_a_refusing_sandbox_stops_the_build_instead_of_emptying_it(monkeypatch):
    from pettingllms.errors import ConfigError
    from pettingllms.sandbox import configure_sandbox, isolation

    monkeypatch.setenv("PETTINGLLMS_SANDBOX", "subprocess")
    monkeypatch.delenv("PETTINGLLMS_SANDBOX_ALLOW_WEAK", raising=False)
    monkeypatch.setattr(isolation, "probe_confinement",
                        lambda *a, **k: ("", "Landlock unavailable (simulated)"))
    configure_sandbox(None)
    isolation.reset_backend()
    try:
        row = {**ADD_PROBLEM, "tests": json.loads(ADD_PROBLEM["tests"])}
        with pytest.raises(ConfigError, match="sandbox.allow_weak=true"):
            verify_function_rows([row])
    finally:
        isolation.reset_backend()
