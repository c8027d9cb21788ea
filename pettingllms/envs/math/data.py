"""Math problems: build `datasets/<name>/{train,test}.parquet`.

Columns: id (unique string), question, answer (gold, a string math-verify reads),
source (benchmark name, for per-benchmark eval: gsm8k, aime24, champ, rg_<task>,
easy_<level>, ...), level (CHAMP category, easy level; "" when unknown).

Presets (`build(..., preset=NAME)`; NAME is also the dataset folder name):
  math       online (hub reachable and HF `datasets` installed): GSM8K train/test
             (openai/gsm8k, main) + AIME24, AIME25, OlympiadBench test sets.
             offline: GSM8K from <repo>/../shared/datasets/gsm8k when present,
             seeded reasoning-gym generators (train + test), CHAMP (test).
  polaris    POLARIS-53K (train; the reference's default math set) + AIME24, AIME25,
             OlympiadBench (test); offline like math_published.
  math_published  the reference's MetaAgent-X math data: POLARIS-53K, DAPO-Math-17k and AIME
             1983-2024 (train; `hub_sets.py`) + AIME24, AIME25, OlympiadBench (test). Offline
             (or hub files missing) the train sets come from a local copy of the hub files
             ($PETTINGLLMS_HUB_DIR/<owner>/<name>/<file>, see pettingllms/envs/hub.py) and CHAMP
             is the test set; what was used and what was left out is in the report.
  math_easy  the CPU quick start's curriculum: seeded single-digit addition and
             multiplication and two-digit addition; train and test use disjoint
             operand pairs. Easy enough that the embedded model gets some but not all of
             them right, so groups of 4 samples are mostly mixed. 205 train / 192 test: the
             first 48 test problems are those of data version 1 (the quick start's), then 144
             more two-digit additions (the single-digit pairs are all used), so that a
             held-out number has a noise bar of a few points.
`sources=[...]` overrides the preset's list. Every source that was asked for but
could not be used is listed under `skipped` in the report, with the reason.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import random
import re
from pathlib import Path
from typing import Any

from pettingllms.envs.dataset import new_output_dir
from pettingllms.envs.hub import HubFileMissing
from pettingllms.envs.math import hub_sets
from pettingllms.envs.math.verify import as_number, is_safe_to_parse
from pettingllms.utils.diskio import write_parquet
from pettingllms.utils.progress import Progress

log = logging.getLogger(__name__)

PRESETS = {
    "math": {"online": ["gsm8k", "aime24", "aime25", "olympiadbench"],
             "offline": ["gsm8k", "reasoning_gym", "champ"]},
    "math_easy": {"online": ["easy"], "offline": ["easy"]},
    "polaris": {"online": ["polaris", "aime24", "aime25", "olympiadbench"], "offline": ["polaris", "champ"]},
    "math_published": {"online": ["polaris", "dapo_math", "aime_past", "aime24", "aime25", "olympiadbench"],
                       "offline": ["polaris", "dapo_math", "aime_past", "champ"]},
}
# reasoning-gym tasks whose answers math-verify reads (checked: deterministic per seed,
# also across processes, and generated offline).
DATA_NAMES = tuple(PRESETS)  # what training builds on first use (pettingllms.envs.dataset)
DATA_VERSIONS = {"math_easy": 2}  # raise when a preset's rows change: older folders are then reported
RG_TASKS = ("basic_arithmetic", "gsm_symbolic", "chain_sum", "simple_equations", "gcd", "lcm",
            "leg_counting", "fraction_simplification")
SOURCES = ("easy", "reasoning_gym", "champ", "gsm8k", "aime24", "aime25", "olympiadbench",
           *hub_sets.HUB_FILES)
RG_TRAIN_PER_TASK, RG_TEST_PER_TASK = 250, 40
HUB_CHECK_URL = "https://huggingface.co/api/datasets/openai/gsm8k"

Rows = list[dict[str, Any]]


class SourceUnavailable(Exception):
    """A source cannot be used here (offline, package missing, ...); the build goes on."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def shared_gsm8k_dir() -> Path:
    return repo_root().parent / "shared" / "datasets" / "gsm8k"


def _stable_seed(*parts: Any) -> int:
    """A 31-bit seed from parts, the same in every process (never the salted hash())."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _row(source: str, split: str, index: int, question: str, answer: str, level: str = "") -> dict:
    return {"id": f"{source}-{split}-{index}", "question": question.strip(),
            "answer": str(answer).strip(), "source": source, "level": level}


# ---- GSM8K ---------------------------------------------------------------------

def gsm8k_final_answer(solution: str) -> str:
    """The gold answer of a GSM8K solution: what follows '#### ', thousands commas removed."""
    if "####" not in solution:
        raise ValueError(f"GSM8K solution without '####': {solution[-80:]!r}")
    answer = solution.rsplit("####", 1)[1].strip()
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", answer)


def gsm8k_rows(records: list[dict], split: str) -> Rows:
    return [_row("gsm8k", split, i, r["question"], gsm8k_final_answer(r["answer"]))
            for i, r in enumerate(records)]


def load_gsm8k_jsonl(folder: Path) -> tuple[Rows, Rows]:
    splits = []
    for split in ("train", "test"):
        with open(folder / f"{split}.jsonl", encoding="utf-8") as f:
            splits.append(gsm8k_rows([json.loads(line) for line in f if line.strip()], split))
    return splits[0], splits[1]


# ---- hub -------------------------------------------------------------------------

def hub_available(timeout_s: float = 3.0) -> tuple[bool, str]:
    """(usable, why): HF `datasets` installed, not forced offline, hub answering."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return False, "HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set"
    try:
        import datasets  # the local datasets/ folder can shadow it as a namespace package
        if not hasattr(datasets, "load_dataset"):
            return False, "the Hugging Face `datasets` package is not installed"
    except ImportError:
        return False, "the Hugging Face `datasets` package is not installed"
    import urllib.request
    try:
        urllib.request.urlopen(urllib.request.Request(HUB_CHECK_URL, method="HEAD"), timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - any failure means "not reachable now"
        return False, f"hub not reachable ({type(e).__name__})"
    return True, "hub reachable"


def _first(record: dict, *names: str) -> Any:
    for name in names:
        if record.get(name) not in (None, ""):
            return record[name]
    raise KeyError(f"none of {names} in record with keys {sorted(record)}")


def _hub_rows(source: str, specs: list[tuple[str, str | None, str]]) -> Rows:
    from datasets import load_dataset

    rows: Rows = []
    for repo, config, split in specs:
        for r in load_dataset(repo, config, split=split):
            answer = _first(r, "answer", "final_answer", "Answer")
            if isinstance(answer, (list, tuple)):
                answer = ", ".join(str(a) for a in answer)
            question = _first(r, "problem", "question", "Problem")
            rows.append(_row(source, "test", len(rows), question, str(answer).strip("$ ")))
    return rows


def hub_source(name: str) -> tuple[Rows, Rows]:
    if name == "gsm8k":
        from datasets import load_dataset

        return tuple(gsm8k_rows(list(load_dataset("openai/gsm8k", "main", split=s)), s)
                     for s in ("train", "test"))
    specs = {
        "aime24": [("HuggingFaceH4/aime_2024", None, "train")],
        "aime25": [("opencompass/AIME2025", "AIME2025-I", "test"),
                   ("opencompass/AIME2025", "AIME2025-II", "test")],
        "olympiadbench": [("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train")],
    }[name]
    return [], _hub_rows(name, specs)


# ---- offline generators -----------------------------------------------------------

def reasoning_gym_rows(seed: int, train_per_task: int | None = None,
                       test_per_task: int | None = None) -> tuple[Rows, Rows]:
    train_per_task = train_per_task or RG_TRAIN_PER_TASK
    test_per_task = test_per_task or RG_TEST_PER_TASK
    try:
        import reasoning_gym
    except ImportError as e:
        raise SourceUnavailable("reasoning-gym is not installed") from e
    train: Rows = []
    test: Rows = []
    for task in RG_TASKS:
        for split, size in (("train", train_per_task), ("test", test_per_task)):
            out = train if split == "train" else test
            # Item i of a reasoning-gym dataset is drawn with seed + i, so nearby seeds
            # repeat items: take far-apart seeds per (seed, task, split).
            split_seed = _stable_seed(seed, task, split)
            for i, entry in enumerate(reasoning_gym.create_dataset(task, seed=split_seed, size=size)):
                answer = str(entry["answer"]).strip().strip("$")
                out.append(_row(f"rg_{task}", split, i, entry["question"], answer))
    return train, test


_CHAMP_PROSE = re.compile(r"[A-Za-z]{3,}")
_CHAMP_MATH_WORDS = {"sqrt", "floor", "ceil", "log", "exp", "sin", "cos", "tan", "pi", "sum", "frac"}


def champ_clean_answer(answer: str) -> str | None:
    """A math-verifiable gold answer from CHAMP's prose, or None (yes/no, sets in words...)."""
    a = answer.strip()
    a = a.split("or equivalently")[-1].strip(" ,")
    a = re.sub(r"\s*\(i\.e\.,[^)]*\)\s*$", "", a)
    for prefix in ("The limit exists and is equal to",):
        if a.startswith(prefix):
            a = a[len(prefix):].strip()
    a = re.sub(r"\s+is the only possible value$", "", a)
    if not a or any(w.lower() not in _CHAMP_MATH_WORDS for w in _CHAMP_PROSE.findall(a)):
        return None
    return a


@functools.lru_cache(maxsize=1)
def _champ_problems() -> tuple[tuple[str, str, str, str], ...]:
    """(identifier, text, answer, category) of CHAMP v0 (a 3 s JSON load; static data)."""
    try:
        import champ_dataset
    except ImportError as e:
        raise SourceUnavailable("champ-dataset is not installed") from e
    return tuple((ident, p.text, p.answer or "", p.category or "")
                 for ident, p in champ_dataset.load("v0").problems.items())


def champ_rows() -> tuple[Rows, Rows, int]:
    rows, dropped = [], 0
    for ident, text, raw_answer, category in _champ_problems():
        answer = champ_clean_answer(raw_answer)
        if answer is None:
            dropped += 1
            continue
        row = _row("champ", "test", len(rows), text, answer, level=category)
        row["id"] = f"champ-{ident}"
        rows.append(row)
    return [], rows, dropped


def easy_rows(seed: int, add2_train: int = 60, add2_test: int = 12, add2_later: int = 144) -> tuple[Rows, Rows]:
    """Single-digit + and x (all operand pairs, split 80/20 by seed) and two-digit +.

    The last `add2_later` test rows are two-digit additions added in data version 2 (marked
    `later`: build() keeps them after the shuffled rows of version 1, which stay first and in
    their order); drawn with their own generator from the pairs in neither split, nor a swap
    of one (a + b with b + a in train), so the rows of version 1 are unchanged."""
    rng = random.Random(f"math_easy/{seed}")
    train: Rows = []
    test: Rows = []

    def add(level: str, a: int, b: int, op: str, split: str) -> dict:
        out = train if split == "train" else test
        value = a + b if op == "+" else a * b
        # source per level, so eval reports avg@k for each (add1 / mul1 / add2)
        out.append(_row(f"easy_{level}", split, len(out), f"What is {a} {op} {b}?", str(value), level))
        return out[-1]

    for level, op, lo in (("add1", "+", 0), ("mul1", "*", 1)):
        pairs = [(a, b) for a in range(lo, 10) for b in range(lo, 10)]
        rng.shuffle(pairs)
        cut = len(pairs) // 5
        for i, (a, b) in enumerate(pairs):
            add(level, a, b, op, "test" if i < cut else "train")
    all2 = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    pairs2 = rng.sample(all2, add2_train + add2_test)
    for i, (a, b) in enumerate(pairs2):
        add("add2", a, b, "+", "test" if i < add2_test else "train")
    used = {frozenset(p) for p in pairs2}
    rest = [p for p in all2 if frozenset(p) not in used]
    for a, b in random.Random(f"math_easy/{seed}/later").sample(rest, add2_later):
        add("add2", a, b, "+", "test")["later"] = True
    return train, test


# ---- build -----------------------------------------------------------------------

def _load_source(name: str, seed: int, online: bool, report: dict, names: list[str] = (),
                 hub_dir: str | Path | None = None) -> tuple[Rows, Rows]:
    if name in hub_sets.HUB_FILES:  # a local copy of the hub file first, else the hub when online
        try:
            rows, where = hub_sets.load(name, _row, online=online, hub_dir=hub_dir, test_sources=names)
        except HubFileMissing as e:
            raise SourceUnavailable(str(e)) from None
        report["used"][name] = where
        return rows, []
    if name == "easy":
        report["used"][name] = "seeded arithmetic curriculum (add1, mul1, add2)"
        return easy_rows(seed)
    if name == "reasoning_gym":
        rows = reasoning_gym_rows(seed)
        report["used"][name] = f"reasoning-gym generators {list(RG_TASKS)} (seed {seed})"
        return rows
    if name == "champ":
        train, test, dropped = champ_rows()
        report["used"][name] = (f"champ-dataset v0: {len(test)} problems with math answers "
                                f"({dropped} prose answers dropped)")
        return train, test
    if name == "gsm8k" and not online:
        folder = shared_gsm8k_dir()
        if not (folder / "train.jsonl").exists():
            raise SourceUnavailable(f"offline and {folder} does not exist")
        report["used"][name] = str(folder)
        return load_gsm8k_jsonl(folder)
    if name in ("gsm8k", "aime24", "aime25", "olympiadbench"):
        if not online:
            raise SourceUnavailable("hub-only benchmark and the hub is not available")
        rows = hub_source(name)
        report["used"][name] = "Hugging Face hub"
        return rows
    raise ValueError(f"unknown math source {name!r}; known: {', '.join(SOURCES)}")


def _norm_question(q: str) -> str:
    return " ".join(q.lower().split())


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          preset: str | None = None, sources: list[str] | None = None,
          hub_dir: str | Path | None = None) -> dict:
    """Write train.parquet and test.parquet into out_dir; return a report of what was used.

    preset defaults to the folder name when it names a preset (datasets/math_easy ->
    math_easy), else "math". offline=None decides by a quick hub check (3 s timeout).
    """
    import pandas as pd

    out_dir = new_output_dir(out_dir)  # refused before the (slow) build if it holds a split
    preset = preset or (out_dir.name if out_dir.name in PRESETS else "math")
    if preset not in PRESETS:
        raise ValueError(f"unknown math data preset {preset!r}; known: {sorted(PRESETS)}")
    if offline is None:
        online, why = hub_available()
    else:
        online, why = (not offline), ("offline requested" if offline else "online requested")
    names = list(sources) if sources else PRESETS[preset]["online" if online else "offline"]
    unknown = [n for n in names if n not in SOURCES]
    if unknown:
        raise ValueError(f"unknown math sources {unknown}; known: {', '.join(SOURCES)}")
    report: dict[str, Any] = {"preset": preset, "seed": seed, "mode": "online" if online else "offline",
                              "why": why, "used": {}, "skipped": {}}
    train: Rows = []
    test: Rows = []
    with Progress(f"building {out_dir.name}", len(names), "sources") as progress:
        for name in names:
            try:
                tr, te = _load_source(name, seed, online, report, names, hub_dir)
            except SourceUnavailable as e:
                report["skipped"][name] = str(e)
                continue
            except Exception as e:  # noqa: BLE001 - a failing hub source must not sink the rest
                if name in ("easy", "reasoning_gym", "champ"):
                    raise
                report["skipped"][name] = f"{type(e).__name__}: {e}"
                continue
            finally:
                progress.advance()  # a source done, used or skipped
            train += tr
            test += te
    _announce(report)
    # A gold answer the judge refuses to parse (see verify.is_safe_to_parse) could never
    # be matched: drop such rows rather than train on unwinnable problems.
    readable = [r for r in train + test if as_number(r["answer"]) is not None or is_safe_to_parse(r["answer"])]
    report["dropped_unreadable_gold"] = len(train) + len(test) - len(readable)
    keep = {id(r) for r in readable}
    train, test = [r for r in train if id(r) in keep], [r for r in test if id(r) in keep]
    test_questions = {_norm_question(r["question"]) for r in test}
    before = len(train)
    train = [r for r in train if _norm_question(r["question"]) not in test_questions]
    report["train_dropped_overlap"] = before - len(train)
    if not train or not test:
        raise RuntimeError(f"math data: empty {'train' if not train else 'test'} split; report: {report}")
    random.Random(f"math-shuffle/{seed}").shuffle(train)
    # test rows a data version added later (a row's `later` mark) come after the shuffled
    # others, so the first test problems stay those that earlier numbers were measured on
    later = [r for r in test if r.get("later")]
    test = [r for r in test if not r.get("later")]
    random.Random(f"math-shuffle-test/{seed}").shuffle(test)
    test += later
    ids = [r["id"] for r in train + test]
    if len(ids) != len(set(ids)):
        raise RuntimeError("math data: duplicate ids")
    columns = ["id", "question", "answer", "source", "level"]
    for split, rows in (("train", train), ("test", test)):
        write_parquet(pd.DataFrame(rows, columns=columns), out_dir / f"{split}.parquet")
    report["rows"] = {split: _count(rows) for split, rows in (("train", train), ("test", test))}
    report["out_dir"] = str(out_dir)
    return report


def _announce(report: dict) -> None:
    """Say where the data came from where the user sees it: INFO per source used, WARNING
    when the hub was wanted and not there, or a source was skipped."""
    level = logging.WARNING if report["mode"] == "offline" and not report["why"].startswith(
        ("offline requested", "HF_HUB_OFFLINE")) else logging.INFO
    log.log(level, "math dataset (%s preset): building %s (%s)", report["preset"],
            report["mode"], report["why"])
    for name, where in report["used"].items():
        log.info("math dataset: %s from %s", name, where)
    for name, why in report["skipped"].items():
        log.warning("math dataset: %s left out: %s", name, why)


def _count(rows: Rows) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["source"]] = counts.get(r["source"], 0) + 1
    return counts
