"""Math data: deterministic builds, reports, the GSM8K format, and the load_math CLI."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from script_helpers import load_script

from pettingllms.envs.math import data
from pettingllms.envs.math.verify import answers_equal, as_number

ROOT = Path(__file__).resolve().parents[1]
SHARED_GSM8K = ROOT.parent / "shared" / "datasets" / "gsm8k"


def read(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return pd.read_parquet(folder / "train.parquet"), pd.read_parquet(folder / "test.parquet")


def test_easy_build_is_deterministic_per_seed(tmp_path):
    r1 = data.build(tmp_path / "a" / "math_easy", seed=3, offline=True)
    r2 = data.build(tmp_path / "b" / "math_easy", seed=3, offline=True)
    data.build(tmp_path / "c" / "math_easy", seed=4, offline=True)
    assert r1["preset"] == "math_easy"  # taken from the folder name
    assert r1["used"].keys() == {"easy"} and r1["mode"] == "offline"
    a, b, c = read(tmp_path / "a" / "math_easy"), read(tmp_path / "b" / "math_easy"), read(tmp_path / "c" / "math_easy")
    pd.testing.assert_frame_equal(a[0], b[0])
    pd.testing.assert_frame_equal(a[1], b[1])
    assert not a[0]["question"].equals(c[0]["question"])
    train, test = a
    assert list(train.columns) == ["id", "question", "answer", "source", "level"]
    assert set(train["level"]) == set(test["level"]) == {"add1", "mul1", "add2"}
    assert not set(train["question"]) & set(test["question"])  # disjoint operand pairs
    assert train["id"].is_unique and test["id"].is_unique
    assert set(train["source"]) == {"easy_add1", "easy_mul1", "easy_add2"}
    assert sum(r1["rows"]["train"].values()) == len(train) and sum(r1["rows"]["test"].values()) == len(test)
    for row in test.itertuples():  # the gold answers are right
        a_, op, b_ = row.question.removeprefix("What is ").rstrip("?").split()
        assert int(row.answer) == (int(a_) + int(b_) if op == "+" else int(a_) * int(b_))


def _digest(frame: pd.DataFrame, columns: list[str]) -> str:
    return hashlib.sha256(json.dumps(frame[columns].astype(str).values.tolist()).encode()).hexdigest()[:16]


# the rows data version 1 built (code of a606f57): the whole train split, and the 48 test problems
# that the quick start (its first 32) and every earlier table evaluated
EASY_V1 = {0: ("c46282b8b82fa5d4", "cfdcc57c24e09ef4"), 1: ("3a926c5e1ea1ac7d", "8cb25b47575a05a5")}


@pytest.mark.parametrize("seed", sorted(EASY_V1))
def test_easy_held_out_grows_to_192_keeping_the_version_1_rows_first(tmp_path, seed):
    data.build(tmp_path / "math_easy", seed=seed, offline=True)
    train, test = read(tmp_path / "math_easy")
    assert (len(train), len(test)) == (205, 192) and data.DATA_VERSIONS["math_easy"] == 2
    columns = ["id", "question", "answer", "source", "level"]
    assert (_digest(train, columns), _digest(test[:48], columns)) == EASY_V1[seed]
    later = test[48:]  # 144 more two-digit additions, none a question of train nor a swap of one
    assert set(later["level"]) == {"add2"} and later["question"].is_unique and test["id"].is_unique
    operands = lambda q: frozenset(q.removeprefix("What is ").rstrip("?").split(" + "))
    assert not {operands(q) for q in later["question"]} & {operands(q) for q in train["question"]}
    assert not set(train["question"]) & set(test["question"])


def test_offline_generators_are_deterministic_and_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "RG_TRAIN_PER_TASK", 40)  # small, to keep the test quick
    monkeypatch.setattr(data, "RG_TEST_PER_TASK", 10)
    kw = dict(seed=1, offline=True, preset="math", sources=["reasoning_gym", "champ"])
    r1 = data.build(tmp_path / "x", **kw)
    r2 = data.build(tmp_path / "y", **kw)
    assert r1["rows"] == r2["rows"]
    pd.testing.assert_frame_equal(read(tmp_path / "x")[0], read(tmp_path / "y")[0])
    assert set(r1["used"]) == {"reasoning_gym", "champ"} and not r1["skipped"]
    train, test = read(tmp_path / "x")
    assert {f"rg_{t}" for t in data.RG_TASKS} <= set(train["source"])
    assert (train["source"] == "rg_gcd").sum() == 40
    assert "champ" in set(test["source"]) and "champ" not in set(train["source"])
    assert not set(train["question"]) & set(test["question"])
    champ = test[test["source"] == "champ"]
    assert 150 < len(champ) <= 270
    assert all(answers_equal(a, a) for a in champ["answer"])  # every kept gold answer is readable


def test_unavailable_sources_are_skipped_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "shared_gsm8k_dir", lambda: tmp_path / "missing")
    report = data.build(tmp_path / "m", seed=0, offline=True,
                        sources=["gsm8k", "aime24", "olympiadbench", "easy"])
    assert set(report["skipped"]) == {"gsm8k", "aime24", "olympiadbench"}
    assert "does not exist" in report["skipped"]["gsm8k"]
    assert set(report["used"]) == {"easy"}
    with pytest.raises(ValueError, match="unknown math sources"):
        data.build(tmp_path / "n", seed=0, offline=True, sources=["gsm9k"])
    with pytest.raises(RuntimeError, match="empty"):
        data.build(tmp_path / "o", seed=0, offline=True, sources=["aime25"])


def test_hub_check_respects_offline_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ok, why = data.hub_available()
    assert not ok and "OFFLINE" in why


def test_gsm8k_answer_parsing(tmp_path):
    assert data.gsm8k_final_answer("so 9*2 = <<9*2=18>>18\n#### 18") == "18"
    assert data.gsm8k_final_answer("... #### 1,000") == "1000"
    assert data.gsm8k_final_answer("#### -3.5") == "-3.5"
    with pytest.raises(ValueError):
        data.gsm8k_final_answer("no marker")
    for split in ("train", "test"):
        with open(tmp_path / f"{split}.jsonl", "w") as f:
            f.write(json.dumps({"question": f"{split} q?", "answer": "work\n#### 2,500"}) + "\n")
    train, test = data.load_gsm8k_jsonl(tmp_path)
    assert train == [{"id": "gsm8k-train-0", "question": "train q?", "answer": "2500",
                      "source": "gsm8k", "level": ""}]
    assert test[0]["id"] == "gsm8k-test-0"


@pytest.mark.skipif(not SHARED_GSM8K.exists(), reason="../shared/datasets/gsm8k is absent")
def test_shared_gsm8k_file_format():
    assert data.shared_gsm8k_dir().resolve() == SHARED_GSM8K.resolve()
    train, test = data.load_gsm8k_jsonl(SHARED_GSM8K)
    assert (len(train), len(test)) == (7473, 1319)
    assert test[0]["answer"] == "18"  # Janet's ducks
    assert all(r["answer"] and "####" not in r["answer"] for r in train + test)
    assert all(as_number(r["answer"]) is not None for r in test)  # plain numbers: the fast path


def test_trainer_seam_builds_the_easy_preset_by_folder_name(tmp_path):
    from pettingllms.envs.dataset import load_split

    rows = load_split("math_easy", "test", tmp_path, builder="pettingllms.envs.math.data")
    assert rows and all(r["source"].startswith("easy_") and isinstance(r["id"], str) for r in rows)


def test_load_math_cli(tmp_path, capsys):
    cli = load_script("scripts/dataprocess/load_math.py")
    out = tmp_path / "easy"
    assert cli.main(["--preset", "math_easy", "--offline", "--seed", "2", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["preset"] == "math_easy" and report["seed"] == 2
    assert (out / "train.parquet").exists() and (out / "test.parquet").exists()
    assert cli.main(["--offline", "--sources", "nope", "--out", str(tmp_path / "bad")]) == 2


def test_the_chosen_sources_are_reported(tmp_path, caplog, monkeypatch):
    import logging

    with caplog.at_level(logging.INFO, logger="pettingllms.envs.math.data"):
        data.build(tmp_path / "math_easy", seed=0, offline=True)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, "math dataset (math_easy preset): building offline (offline "
            "requested)") in lines
    assert any(m.startswith("math dataset: easy from seeded arithmetic") for _, m in lines)
    caplog.clear()  # a hub that does not answer is a fallback the user should notice
    monkeypatch.setattr(data, "hub_available", lambda: (False, "hub not reachable (URLError)"))
    with caplog.at_level(logging.INFO, logger="pettingllms.envs.math.data"):
        data.build(tmp_path / "b" / "math_easy", seed=0)
    assert (logging.WARNING, "math dataset (math_easy preset): building offline (hub not "
            "reachable (URLError))") in [(r.levelno, r.getMessage()) for r in caplog.records]
