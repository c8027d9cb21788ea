"""The reference's hub data sets, offline: each test writes rows in the hub's own schema and file
format (POLARIS jsonl, DAPO parquet with its nested prompt / reward_model, the AIME 1983-2024 csv,
APPS test.jsonl, CodeContests parquet shards, LiveCodeBench test6.jsonl) into a local hub folder
laid out <owner>/<name>/<file>, and reads them through the loaders the builds use. Code rows are
then graded by our sandbox grader (execution.run_tests) on a correct and a wrong solution."""
from __future__ import annotations

import base64
import json
import pickle
import zlib

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pettingllms.envs.code import data as code_data
from pettingllms.envs.code import hub_sets as code_hub
from pettingllms.envs.code.execution import pass_ratio, run_tests, solution_program
from pettingllms.envs.hub import HubFile, HubFileMissing, hub_paths
from pettingllms.envs.math import data as math_data
from pettingllms.sandbox import SandboxLimits

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5.0, memory_mb=512)
DAPO_HEAD = ("Solve the following math problem step by step. The last line of your response should be of "
             "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
DAPO_TAIL = "\n\nRemember to put your answer on its own line after \"Answer:\"."


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _grade(row, code):
    tests = row["tests"]
    return pass_ratio(run_tests(row["kind"], solution_program(row["kind"], row["starter"], code), tests, LIMITS))


# --- math -------------------------------------------------------------------------------------

@pytest.fixture
def math_hub(tmp_path):
    hub = tmp_path / "hub"
    _jsonl(hub / "POLARIS-Project/Polaris-Dataset-53K/polaris-data-53K.jsonl", [
        {"problem": "Compute $3 \\cdot 7$.", "answer": "21", "difficulty": "7/8"},
        {"problem": "Simplify $\\frac{2}{4}$.", "answer": "\\frac{1}{2}", "difficulty": "1/8"},
        {"problem": "", "answer": "1", "difficulty": "0/8"}])  # no problem: dropped
    dapo = [{"data_source": "math_dapo", "prompt": [{"content": DAPO_HEAD + q + DAPO_TAIL, "role": "user"}],
             "ability": "MATH", "reward_model": {"ground_truth": a, "style": "rule-lighteval/MATH_v2"},
             "extra_info": {"index": idx}}
            for idx, (q, a) in enumerate([("What is $2^{10}$?", "1024"), ("Find $5!$.", "120")])]
    _parquet(hub / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet", dapo + dapo)  # repeats, as served
    aime = hub / "gneubig/aime-1983-2024/AIME_Dataset_1983_2024.csv"
    aime.parent.mkdir(parents=True)
    pd.DataFrame([{"ID": "1983-1", "Year": 1983, "Problem Number": 1, "Question": "AIME 1983 problem one?",
                   "Answer": "60", "Part": None},
                  {"ID": "2024-I-1", "Year": 2024, "Problem Number": 1, "Question": "AIME 2024 problem one?",
                   "Answer": "204", "Part": "I"}]).to_csv(aime, index=False)
    return hub


def test_math_hub_sets_from_the_hub_schema(math_hub, tmp_path):
    report = math_data.build(tmp_path / "out", offline=True, hub_dir=math_hub,
                             sources=["polaris", "dapo_math", "aime_past", "aime24", "easy"])
    train = pd.read_parquet(tmp_path / "out" / "train.parquet")
    assert {"polaris", "dapo_math", "aime_past"} <= set(report["used"]) and "aime24" in report["skipped"]
    pol = train[train["source"] == "polaris"].sort_values("id")
    assert list(pol["question"]) == ["Compute $3 \\cdot 7$.", "Simplify $\\frac{2}{4}$."]
    assert list(pol["answer"]) == ["21", "\\frac{1}{2}"] and list(pol["level"]) == ["7/8", "1/8"]
    dapo = train[train["source"] == "dapo_math"].sort_values("id")
    assert list(dapo["question"]) == ["What is $2^{10}$?", "Find $5!$."]  # instructions stripped, deduplicated
    assert list(dapo["answer"]) == ["1024", "120"]
    aime = train[train["source"] == "aime_past"]
    # 2024 is left out: aime24 is a test set of this build (even though offline it was skipped)
    assert list(aime["id"]) == ["aime_past-1983-1"] and list(aime["answer"]) == ["60"]
    assert "POLARIS-Project/Polaris-Dataset-53K" in report["used"]["polaris"]


def test_math_hub_sets_missing_say_where_they_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("PETTINGLLMS_HUB_DIR", raising=False)
    report = math_data.build(tmp_path / "polaris_x", offline=True, sources=["polaris", "easy"])
    assert "no local copy" in report["skipped"]["polaris"] and "offline" in report["skipped"]["polaris"]
    assert math_data.PRESETS["polaris"]["online"][0] == "polaris"
    assert set(math_data.PRESETS["math_published"]["online"][:3]) == {"polaris", "dapo_math", "aime_past"}
    with pytest.raises(HubFileMissing, match="no local copy under"):
        hub_paths(HubFile("a/b", "x.jsonl"), tmp_path, online=False)


# --- code -------------------------------------------------------------------------------------

def _apps_record(pid, question, io, solutions, starter=""):
    return {"problem_id": pid, "question": question, "solutions": json.dumps(solutions),
            "input_output": json.dumps(io), "difficulty": "introductory",
            "url": f"https://codeforces.com/problemset/problem/{pid}", "starter_code": starter}


APPS_STDIN = _apps_record(0, "Read n and print n squared.", {"inputs": ["3\n", "5\n"], "outputs": ["9\n", "25\n"]},
                          ["n = int(input())\nprint(n * n)\n"])
APPS_CLASS = _apps_record(1, "Return the sum of nums.", {"fn_name": "total", "inputs": [[[1, 2, 3]], [[]]],
                                                          "outputs": [[6], [0]]},
                          ["class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)\n"],
                          starter="class Solution:\n    def total(self, nums: List[int]) -> int:\n        ")
APPS_FUNC = _apps_record(2, "Return a string repeated n times.", {"fn_name": "rep", "inputs": [["ab", 2], ["x", 0]],
                                                                   "outputs": [["abab"], [""]]},
                         ["def rep(s, n):\n    return s * n\n"], starter="def rep(s, n):\n\t")


def test_apps_rows_split_and_convert(tmp_path):
    recs = [APPS_STDIN, APPS_CLASS, APPS_FUNC] + [_apps_record(10 + i, "q", {"inputs": ["1\n"], "outputs": ["1\n"]},
                                                               ["print(1)"]) for i in range(500)]
    train, test = code_hub.apps_rows(iter(recs))
    assert len(test) == 500 and len(train) == 3  # rows [0, 500) test, [500, 4500) train, as the reference
    assert test[0]["kind"] == "io" and test[0]["tests"] == [{"input": "3\n", "output": "9\n"},
                                                            {"input": "5\n", "output": "25\n"}]
    cls, fn = test[1], test[2]
    assert cls["kind"] == fn["kind"] == "function" and cls["entry_point"] == "total"
    assert "Solution().total" in cls["tests"][0] and "rep(" in fn["tests"][0]
    assert "Starter code:" in cls["question"]
    assert _grade(test[0], "n = int(input())\nprint(n * n)") == 1.0
    assert _grade(test[0], "n = int(input())\nprint(n + n)") == 0.0
    assert _grade(cls, json.loads(APPS_CLASS["solutions"])[0]) == 1.0  # List without import: the preamble
    assert _grade(cls, "class Solution:\n    def total(self, nums):\n        return len(nums)\n") == 0.5
    assert _grade(fn, "def rep(s, n):\n    return s * n") == 1.0  # APPS's [value] wrapping unwrapped
    assert _grade(fn, "def rep(s, n):\n    return s") == 0.0
    assert code_hub.apps_row({**APPS_STDIN, "input_output": "not json"}) is None


def _cc_record(name, public, private, solutions):
    empty = {"input": [], "output": []}
    return {"name": name, "description": f"{name}: read two integers and print their sum.",
            "public_tests": public, "private_tests": private, "generated_tests": empty, "source": 2,
            "difficulty": 7, "solutions": {"language": [2, 3], "solution": ["int main(){}", solutions]},
            "incorrect_solutions": {"language": [], "solution": []}, "cf_contest_id": 1, "cf_index": "A",
            "cf_points": 500.0, "cf_rating": 800, "cf_tags": ["math"], "is_description_translated": False,
            "untranslated_description": "", "time_limit": {"seconds": 2, "nanos": 0},
            "memory_limit_bytes": 256000000, "input_file": "", "output_file": ""}


def test_code_contests_public_for_test_private_for_train(tmp_path):
    ref = "a, b = map(int, input().split())\nprint(a + b)\n"
    rec = _cc_record("1_A", {"input": ["1 2\n"], "output": ["3\n"]},
                     {"input": ["5 5\n", "0 7\n"], "output": ["10\n", "7\n"]}, ref)
    test, train = code_hub.code_contests_row(rec, "test"), code_hub.code_contests_row(rec, "train")
    assert [t["input"] for t in test["tests"]] == ["1 2\n"] and len(train["tests"]) == 2
    assert test["reference"] == ref  # the PYTHON3 solution, not the C++ one
    assert _grade(train, ref) == 1.0 and _grade(train, "print(0)") == 0.0
    assert code_hub.code_contests_row({**rec, "public_tests": {"input": [], "output": []}}, "test") is None


def _lcb_record(qid, cases, private="", starter="", func=None):
    return {"question_title": f"Problem {qid}", "question_content": "See the statement.", "platform": "atcoder",
            "question_id": qid, "contest_id": "abc400", "contest_date": "2025-02-01T00:00:00",
            "starter_code": starter, "difficulty": "easy", "public_test_cases": json.dumps(cases),
            "private_test_cases": private, "metadata": json.dumps({"func_name": func} if func else {})}


def _packed(cases):  # how LiveCodeBench ships private tests
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def test_livecodebench_stdin_functional_and_private_tests():
    stdin = code_hub.livecodebench_row(
        _lcb_record("abc400_a", [{"input": "4\n", "output": "16\n", "testtype": "stdin"}]))
    assert stdin["kind"] == "io" and stdin["question"].startswith("Problem abc400_a\n\nSee the statement.")
    assert _grade(stdin, "print(int(input()) ** 2)") == 1.0 and _grade(stdin, "print(4)") == 0.0
    fn_cases = [{"input": "[1, 5, 2]\n3", "output": "5", "testtype": "functional"}]
    fn = code_hub.livecodebench_row(_lcb_record(
        "3000", fn_cases, starter="class Solution:\n    def pick(self, nums: List[int], k: int) -> int:\n        ",
        func="pick"))
    assert fn["kind"] == "function" and fn["entry_point"] == "pick" and fn["reference"] == ""
    good = "class Solution:\n    def pick(self, nums: List[int], k: int) -> int:\n        return max(nums)\n"
    assert _grade(fn, good) == 1.0 and _grade(fn, good.replace("max", "min")) == 0.0
    private = code_hub.livecodebench_row(_lcb_record("abc400_b", [], private=_packed(
        [{"input": "2 3\n", "output": "6\n", "testtype": "stdin"}])))
    assert private["tests"] == [{"input": "2 3\n", "output": "6\n"}]


def test_livecodebench_private_tests_never_run_pickled_code(tmp_path):
    class Boom:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))
    raw = base64.b64encode(zlib.compress(pickle.dumps(Boom()))).decode()
    assert code_hub.lcb_test_cases(raw) == [] and not (tmp_path / "pwned").exists()
    assert code_hub.livecodebench_row(_lcb_record("x", [], private=raw)) is None


@pytest.mark.slow
def test_code_build_takes_the_hub_sets_from_a_local_copy(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    _jsonl(hub / "codeparrot/apps/test.jsonl", [APPS_STDIN, APPS_CLASS, APPS_FUNC])
    ref = "a, b = map(int, input().split())\nprint(a + b)\n"
    for split in ("train", "test"):
        _parquet(hub / f"deepmind/code_contests/data/{split}-00000-of-00001-0123456789abcdef.parquet",
                 [_cc_record(f"{split}_1", {"input": ["1 2\n"], "output": ["3\n"]},
                             {"input": ["5 5\n"], "output": ["10\n"]}, ref)])
    _jsonl(hub / "livecodebench/code_generation_lite/test6.jsonl",
           [_lcb_record("abc400_a", [{"input": "4\n", "output": "16\n", "testtype": "stdin"}])])
    monkeypatch.setattr(code_hub, "APPS_TEST_ROWS", (0, 1))  # row 0 test, rows 1-2 train
    monkeypatch.setattr(code_hub, "APPS_TRAIN_ROWS", (1, 3))
    # the offline sets are tested in test_env_code.py; here only the hub sets go in
    monkeypatch.setattr(code_data, "humaneval_rows", lambda limit: [])
    monkeypatch.setattr(code_data, "codeio_rows", lambda n, k, seed: ([], {}))
    monkeypatch.setattr(code_data, "_codeio_file", lambda: "(not read)")  # skips importing reasoning-gym
    report = code_data.build(tmp_path / "code", offline=True, hub_dir=hub)
    train = pd.read_parquet(tmp_path / "code" / "train.parquet")
    test = pd.read_parquet(tmp_path / "code" / "test.parquet")
    hub_train = sorted(train[train["source"].isin(["apps", "code_contests"])]["id"])
    hub_test = sorted(test[test["source"].isin(["apps", "code_contests", "livecodebench"])]["id"])
    assert hub_train == ["apps/1", "apps/2", "code_contests/train_1"]
    assert hub_test == ["apps/0", "code_contests/test_1", "livecodebench/abc400_a"]
    assert report["apps"] == {"train": 2, "test": 1, "from": "codeparrot/apps:test.jsonl (1 file(s))"}
    assert report["apps_verify"]["function"]["ref_failed_tests"] == 0  # the APPS references pass our tests
