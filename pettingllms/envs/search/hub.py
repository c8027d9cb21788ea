"""Loaders for the FlashRAG QA sets on the hub (RUC-NLPIR/FlashRAG_datasets): NQ, HotpotQA,
2WikiMultihopQA, MuSiQue, Bamboogle, TriviaQA, PopQA, ...

A hub row is {"id", "question", "golden_answers": [...], "metadata": {...}}; the hub repo
keeps each set as <set>/<split>.jsonl. `flashrag_row` turns one into a search-env row (id,
question, answer, golden_answers, kind, source, hops=[]). `build_hub` writes a data folder:
train from one set's train split (the reference trains on NQ), test from the test (else dev)
split of each named set, as the reference's loader does. Files are found by the shared hub
reader (pettingllms/envs/hub.py): a local copy under `hub_dir` (or $PETTINGLLMS_HUB_DIR) laid
out <dir>/RUC-NLPIR/FlashRAG_datasets/<set>/<split>.jsonl, else the hub.

The hub sets bring no corpus: search them through a retrieval server over FlashRAG's wiki
corpus (env.options.search_url), or point env.options.corpus at a corpus .jsonl of your own.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pettingllms.envs.dataset import new_output_dir
from pettingllms.envs.hub import HubFile, HubFileMissing, open_records
from pettingllms.errors import ConfigError

HUB_REPO = "RUC-NLPIR/FlashRAG_datasets"
TEST_SPLITS = ("test", "dev")  # the first one a set has is its test split


def golden_list(value: Any) -> list[str]:
    """golden_answers as a list of non-empty strings (the hub has lists; a few sets a string)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else value
        return [str(v).strip() for v in items if v is not None and str(v).strip()]
    return [str(value).strip()] if str(value).strip() else []


def flashrag_row(raw: dict[str, Any], set_name: str) -> dict[str, Any] | None:
    """One hub row -> a search-env row; None for a row without a question or a gold answer."""
    question = str(raw.get("question") or "").strip()
    golds = golden_list(raw.get("golden_answers"))
    if not question or not golds:
        return None
    if not question.endswith("?"):
        question += "?"
    return {"id": f"{set_name}-{raw.get('id', '')}", "question": question, "answer": golds[0],
            "golden_answers": golds, "kind": set_name, "source": set_name, "hops": []}


def read_set(set_name: str, split: str, hub_dir: str | Path | None = None,
             online: bool = True) -> list[dict[str, Any]]:
    """Raw hub rows of one set and split (HubFileMissing when neither a local copy nor the hub has it)."""
    rows, _ = open_records(HubFile(HUB_REPO, f"{set_name}/{split}.jsonl"), hub_dir, online)
    return list(rows)


def convert(raw_rows: Iterable[dict[str, Any]], set_name: str, limit: int | None) -> list[dict[str, Any]]:
    rows = [r for r in (flashrag_row(raw, set_name) for raw in raw_rows) if r is not None]
    return rows[:limit] if limit is not None else rows


def build_hub(out_dir: str | Path, *, train_set: str = "nq", test_sets: Iterable[str] = ("nq",),
              hub_dir: str | Path | None = None, online: bool = True, limit: int | None = None) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        train = convert(read_set(train_set, "train", hub_dir, online), train_set, limit)
    except HubFileMissing as e:
        raise ConfigError(f"FlashRAG train set: {e}") from None
    test: list[dict[str, Any]] = []
    used = {}
    for name in test_sets:
        for split in TEST_SPLITS:
            try:
                raw = read_set(name, split, hub_dir, online)
            except HubFileMissing:
                continue
            test += convert(raw, name, limit)
            used[name] = split
            break
        else:
            raise ConfigError(f"FlashRAG set '{name}': no {' or '.join(TEST_SPLITS)} split found "
                              f"(locally or on the hub)")
    if not train or not test:
        raise ConfigError(f"no usable rows (train {len(train)}, test {len(test)}): rows need a question "
                          f"and golden_answers")
    out = new_output_dir(out_dir)
    pq.write_table(pa.Table.from_pylist(train), out / "train.parquet")
    pq.write_table(pa.Table.from_pylist(test), out / "test.parquet")
    return {"train": {train_set: len(train)}, "test": {n: used[n] for n in used}, "test_rows": len(test)}
