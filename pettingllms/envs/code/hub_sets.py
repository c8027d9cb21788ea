"""The reference's code benchmarks from the Hugging Face hub, converted to our code rows (rows.py).

Files, splits and fields as the reference (pettingllms-ai/PettingLLMs, scripts/dataprocess/
load_code.py) uses them:
  apps           codeparrot/apps test.jsonl: rows [0, 500) are the test set, rows [500, 4500)
                 the training set. `input_output` is JSON {inputs, outputs[, fn_name]},
                 `solutions` a JSON list (the first is the reference), `starter_code`.
  code_contests  deepmind/code_contests parquet shards data/{train,test}-*.parquet: the test
                 set scores on `public_tests`, the training set on `private_tests` (both
                 {input: [...], output: [...]}); the reference is the first PYTHON3 solution
                 (`solutions.language` 3; Python 2 ones cannot run here).
  livecodebench  livecodebench/code_generation_lite test6.jsonl (release v6, test only): the
                 question is title + content; `public_test_cases` (JSON) when it has any, else
                 `private_test_cases` (JSON, or base64 zlib of a pickled JSON string, which we
                 unpickle with every class refused, so it can only yield plain strings).
Test formats become ours: stdin tests (`testtype` stdin, APPS without fn_name, CodeContests) are
{input, output} pairs of an "io" row; call-based tests (APPS `fn_name`, LiveCodeBench
`testtype` functional, LeetCode's `class Solution`) become assert snippets of a "function" row
that call the entry point on the JSON arguments and compare JSON values (APPS wraps a return
value in a one-element list; either form passes, as APPS's own checker allows).
"""
from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator

from pettingllms.envs.code.rows import spread_evenly
from pettingllms.envs.hub import HubFile, open_records

APPS_FILE = HubFile("codeparrot/apps", "test.jsonl")
APPS_TEST_ROWS, APPS_TRAIN_ROWS = (0, 500), (500, 4500)
CODE_CONTESTS_FILES = {split: HubFile("deepmind/code_contests", f"data/{split}-*.parquet")
                       for split in ("train", "test")}
LIVECODEBENCH_FILE = HubFile("livecodebench/code_generation_lite", "test6.jsonl")
PYTHON3 = 3  # deepmind/code_contests solutions.language
MAX_TESTS = 20  # per problem, evenly spread (some carry hundreds of large cases)
# Names LeetCode-style solutions use without importing them (the judge provides them).
FUNCTION_PREAMBLE = ("from typing import *\nimport collections, heapq, itertools, math, bisect, functools\n"
                     "from collections import *\nfrom functools import *\n")

SETS = ("apps", "code_contests", "livecodebench")
Row = dict[str, Any]


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if text.endswith("\n") else text + "\n"


def _io_row(rid: str, source: str, question: str, reference: str, pairs: Iterable[tuple[Any, Any]]) -> Row:
    tests = [{"input": _cell(i), "output": _cell(o)} for i, o in spread_evenly(list(pairs), MAX_TESTS)]
    return {"id": rid, "source": source, "kind": "io", "question": question.strip(), "entry_point": "",
            "starter": "", "reference": reference, "tests": tests}


def call_test(call: str, args: list, expected: Any, unwrap: bool = False) -> str:
    """An assert snippet: `call(*args)` as JSON equals `expected` (or its only item, `unwrap`)."""
    ok = "_got == _want"
    if unwrap:
        ok += " or (isinstance(_want, list) and len(_want) == 1 and _got == _want[0])"
    return (f"import json as _json\n_want = _json.loads({json.dumps(expected)!r})\n"
            f"_got = _json.loads(_json.dumps({call}(*_json.loads({json.dumps(args)!r}))))\n"
            f"assert {ok}\n")


def _entry_call(fn_name: str, starter: str) -> str:
    return f"Solution().{fn_name}" if "class Solution" in starter else fn_name


def _function_row(rid: str, source: str, question: str, starter: str, fn_name: str, reference: str,
                  tests: list[str]) -> Row:
    shown = question.strip() + (f"\n\nStarter code:\n{starter.rstrip()}\n" if starter.strip() else "")
    return {"id": rid, "source": source, "kind": "function", "question": shown, "entry_point": fn_name,
            "starter": FUNCTION_PREAMBLE, "reference": FUNCTION_PREAMBLE + reference if reference else "",
            "tests": spread_evenly(tests, MAX_TESTS)}


# --- APPS -------------------------------------------------------------------------------------

def apps_row(rec: dict) -> Row | None:
    """One codeparrot/apps record as our row, or None when it has no usable tests."""
    try:
        spec = json.loads(rec.get("input_output") or "{}")
        sols = json.loads(rec.get("solutions") or "[]")
    except (ValueError, TypeError):
        return None
    inputs, outputs = spec.get("inputs") or [], spec.get("outputs") or []
    question = str(rec.get("question") or "")
    if not question.strip() or not inputs or len(inputs) != len(outputs):
        return None
    rid, ref = f"apps/{rec.get('problem_id')}", (sols[0] if sols else "")
    if spec.get("fn_name"):
        starter = str(rec.get("starter_code") or "")
        call = _entry_call(spec["fn_name"], starter)
        tests = [call_test(call, a if isinstance(a, list) else [a], o, unwrap=True) for a, o in zip(inputs, outputs)]
        return _function_row(rid, "apps", question, starter, spec["fn_name"], ref, tests)
    pairs = [(i, o) for i, o in zip(inputs, outputs) if isinstance(i, str) and isinstance(o, (str, list))]
    pairs = [(i, "\n".join(map(str, o)) if isinstance(o, list) else o) for i, o in pairs]
    return _io_row(rid, "apps", question, ref, pairs) if pairs else None


def apps_rows(recs: Iterable[dict]) -> tuple[list[Row], list[Row]]:
    """(train, test) rows of test.jsonl's records in file order, in one pass over its head."""
    train: list[Row] = []
    test: list[Row] = []
    for n, rec in enumerate(recs):
        if n >= APPS_TRAIN_ROWS[1]:
            break
        if (row := apps_row(rec)) is not None:
            (test if n < APPS_TEST_ROWS[1] else train).append(row)
    return train, test


# --- CodeContests -----------------------------------------------------------------------------

def code_contests_row(rec: dict, split: str) -> Row | None:
    tests = rec.get("public_tests" if split == "test" else "private_tests") or {}
    pairs = list(zip(tests.get("input") or [], tests.get("output") or []))
    sols = rec.get("solutions") or {}
    refs = [s for lang, s in zip(sols.get("language") or [], sols.get("solution") or []) if lang == PYTHON3]
    if not pairs or not str(rec.get("description") or "").strip():
        return None
    return _io_row(f"code_contests/{rec.get('name')}", "code_contests", rec["description"],
                   refs[0] if refs else "", pairs)


def code_contests_rows(recs: Iterable[dict], split: str, limit: int | None = None) -> list[Row]:
    out = []
    for rec in recs:
        if limit is not None and len(out) >= limit:
            break
        if (row := code_contests_row(rec, split)) is not None:
            out.append(row)
    return out


# --- LiveCodeBench ----------------------------------------------------------------------------

class _StringsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # no class, no callable: plain data only
        raise pickle.UnpicklingError(f"refused {module}.{name}")


def lcb_test_cases(raw: Any) -> list[dict]:
    """LiveCodeBench test cases: JSON text, or base64(zlib(pickle(JSON text))) for private ones."""
    if not raw:
        return []
    if isinstance(raw, list):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        text = _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(raw)))).load()
        return json.loads(text) if isinstance(text, str) else []
    except Exception:  # noqa: BLE001 - a test field we cannot read leaves the problem without tests
        return []


def livecodebench_row(rec: dict) -> Row | None:
    title, content = str(rec.get("question_title") or ""), str(rec.get("question_content") or "")
    question = (title + ("\n\n" if title and content else "") + content).strip()
    cases = lcb_test_cases(rec.get("public_test_cases")) or lcb_test_cases(rec.get("private_test_cases"))
    if not question or not cases:
        return None
    rid = f"livecodebench/{rec.get('question_id')}"
    if all(c.get("testtype") == "stdin" for c in cases):
        return _io_row(rid, "livecodebench", question, "", [(c["input"], c["output"]) for c in cases])
    starter = str(rec.get("starter_code") or "")
    meta = rec.get("metadata") or "{}"
    fn_name = (json.loads(meta) if isinstance(meta, str) else meta).get("func_name")
    if not fn_name:
        return None
    call = _entry_call(fn_name, starter)
    tests = [call_test(call, [json.loads(line) for line in c["input"].split("\n") if line.strip()],
                       json.loads(c["output"])) for c in cases if c.get("testtype") == "functional"]
    return _function_row(rid, "livecodebench", question, starter, fn_name, "", tests) if tests else None


def livecodebench_rows(recs: Iterable[dict], limit: int | None = None) -> list[Row]:
    out = []
    for rec in recs:
        if limit is not None and len(out) >= limit:
            break
        if (row := livecodebench_row(rec)) is not None:
            out.append(row)
    return out


# --- one place that reads the files -----------------------------------------------------------

def _records(spec: HubFile, hub_dir: str | Path | None, online: bool) -> tuple[Iterator[dict], str]:
    recs, paths = open_records(spec, hub_dir, online)
    return recs, f"{spec.describe()} ({len(paths)} file(s))"


def load(name: str, *, online: bool, hub_dir: str | Path | None = None, limit: int | None = None
         ) -> tuple[list[Row], list[Row], str]:
    """(train rows, test rows, where from) of apps, code_contests or livecodebench (each split at
    most `limit` rows); HubFileMissing (pettingllms.envs.hub) when the files are absent."""
    if name == "apps":
        recs, where = _records(APPS_FILE, hub_dir, online)
        train, test = apps_rows(recs)
        return train[:limit], test[:limit], where
    if name == "code_contests":
        splits, wheres = [], []
        for split in ("train", "test"):
            recs, where = _records(CODE_CONTESTS_FILES[split], hub_dir, online)
            splits.append(code_contests_rows(recs, split, limit))
            wheres.append(where)
        return splits[0], splits[1], "; ".join(wheres)
    if name == "livecodebench":
        recs, where = _records(LIVECODEBENCH_FILE, hub_dir, online)
        return [], livecodebench_rows(recs, limit), where
    raise ValueError(f"unknown code hub set {name!r}")
