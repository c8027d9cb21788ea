"""The reference's math training sets from the Hugging Face hub, as our math rows.

Names, files and fields as the reference (pettingllms-ai/PettingLLMs, scripts/dataprocess/
load_math.py) uses them, all three as training data:
  polaris    POLARIS-Project/Polaris-Dataset-53K, its jsonl: `problem`, `answer` (`difficulty`,
             a pass rate, kept as the row's level).
  dapo_math  BytedTsinghua-SIA/DAPO-Math-17k, data/dapo-math-17k.parquet: the problem is the
             first `prompt` message's content (we strip DAPO's own answer-format instructions
             around it, so our prompts set the format), the answer `reward_model.ground_truth`;
             the file repeats problems, the first of each is kept (as the reference does).
  aime_past  gneubig/aime-1983-2024, AIME_Dataset_1983_2024.csv: `ID`, `Year`, `Problem Number`,
             `Question`, `Answer`, `Part`. Rows of a year whose AIME is also a test set of the
             same build (2024 with aime24) are left out, so training never sees a test problem.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterable

from pettingllms.envs.hub import HubFile, open_records

HUB_FILES = {
    "polaris": HubFile("POLARIS-Project/Polaris-Dataset-53K", "*.jsonl"),
    "dapo_math": HubFile("BytedTsinghua-SIA/DAPO-Math-17k", "data/dapo-math-17k.parquet"),
    "aime_past": HubFile("gneubig/aime-1983-2024", "AIME_Dataset_1983_2024.csv"),
}
TEST_YEARS = {"aime24": "2024", "aime25": "2025"}  # test benchmark -> the AIME year it holds

_DAPO_HEAD = re.compile(r"^\s*Solve the following math problem step by step\..*?problem\.\s*\n", re.S)
_DAPO_TAIL = re.compile(r"\n\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")

Row = dict[str, Any]
MakeRow = Callable[..., Row]  # math.data._row(source, split, index, question, answer, level)


def _answer(value: Any) -> str:
    return str(value if value is not None else "").strip().strip("$").strip()


def polaris_rows(recs: Iterable[dict], make_row: MakeRow) -> list[Row]:
    out: list[Row] = []
    for r in recs:
        q, a = str(r.get("problem") or "").strip(), _answer(r.get("answer"))
        if q and a:
            out.append(make_row("polaris", "train", len(out), q, a, level=str(r.get("difficulty") or "")))
    return out


def dapo_question(content: str) -> str:
    """The problem inside a DAPO prompt, without its 'Answer: $Answer' format instructions."""
    return _DAPO_TAIL.sub("", _DAPO_HEAD.sub("", content, count=1)).strip()


def dapo_rows(recs: Iterable[dict], make_row: MakeRow) -> list[Row]:
    out: list[Row] = []
    seen: set[str] = set()
    for r in recs:
        prompt = r.get("prompt") or []
        first = prompt[0] if isinstance(prompt, list) and prompt else {}
        content = first.get("content") if isinstance(first, dict) else None
        truth = (r.get("reward_model") or {}).get("ground_truth") if isinstance(r.get("reward_model"), dict) else None
        if not content or content in seen:
            continue
        seen.add(content)
        q, a = dapo_question(content), _answer(truth)
        if q and a:
            out.append(make_row("dapo_math", "train", len(out), q, a))
    return out


def aime_past_rows(recs: Iterable[dict], make_row: MakeRow, skip_years: set[str] = frozenset()) -> list[Row]:
    out: list[Row] = []
    for r in recs:
        year = str(r.get("Year") or "").strip()
        q, a = str(r.get("Question") or r.get("Problem") or "").strip(), _answer(r.get("Answer"))
        if not q or not a or year in skip_years:
            continue
        row = make_row("aime_past", "train", len(out), q, a, level=year)
        if r.get("ID"):
            row["id"] = f"aime_past-{r['ID']}"
        out.append(row)
    return out


def load(name: str, make_row: MakeRow, *, online: bool, hub_dir: str | Path | None = None,
         test_sources: Iterable[str] = ()) -> tuple[list[Row], str]:
    """(train rows, where they came from) of one of HUB_FILES' sets; HubFileMissing when absent."""
    spec = HUB_FILES[name]
    recs, paths = open_records(spec, hub_dir, online)
    if name == "polaris":
        rows = polaris_rows(recs, make_row)
    elif name == "dapo_math":
        rows = dapo_rows(recs, make_row)
    else:
        rows = aime_past_rows(recs, make_row, {TEST_YEARS[t] for t in test_sources if t in TEST_YEARS})
    return rows, f"{spec.describe()} ({', '.join(str(p) for p in paths)})"
