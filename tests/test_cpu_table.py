"""scripts/results/cpu_table.py: the plan it runs, and a real tiny run (1 step, tiny model) that
writes each result at once, skips finished runs on a re-run and builds the table and PNG."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ci_budget import all_paths_only
from script_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "results" / "cpu_table.py"


ct = load_script("scripts/results/cpu_table.py")


def _settings(**kw):
    base = dict(seeds=[0, 1], steps=12, batch=4, k=4, tokens=96, eval_limit=48, eval_k=2, val_every=6,
                work=Path("w"), out_dir=Path("o"))
    return ct.Settings(**{**base, **kw})


def test_plan_has_the_issue_rows_seeds_and_equal_budgets():
    s = _settings()
    runs = ct.plan(s, None)
    math_rows = {r.name for col, r, _ in runs if col == "math_easy"}
    assert math_rows == {"single", "single_grpo", "mas", "mas_flat_grpo", "at_grpo_l1", "at_grpo_l2",
                         "group_none", "group_agent", "group_turn"}
    assert {col for col, _, _ in runs} == {"math_easy", "plan_path_easy", "sokoban_easy", "sudoku_easy"}
    for col, row, _ in runs:
        assert sorted(seed for c, r, seed in runs if (c, r.name) == (col, row.name)) == [0, 1]
    budget_keys = ("trainer.total_steps=", "rollout.batch_size=", "rollout.k=", "rollout.sampling.max_new_tokens=",
                   "trainer.optim.lr=", "eval.k=", "eval.limit=", "eval.batch_problems=")
    budgets = {tuple(o for o in ct.run_overrides(s, col, row, 0) if o.startswith(budget_keys))
               for col, row, _ in runs if row.mode == "train"}
    assert len(budgets) == 1  # every trained row: the same steps, problems, K, tokens, lr, eval
    # by default each column evaluates its own first N test problems, the same N for all its rows
    per_column = ct.plan(_settings(eval_limit=None), None)
    limits = {(col, o) for col, row, _ in per_column
              for o in ct.run_overrides(_settings(eval_limit=None), col, row, 0) if o.startswith("eval.limit=")}
    assert limits == {("math_easy", "eval.limit=192"), ("plan_path_easy", "eval.limit=192"),
                      ("sokoban_easy", "eval.limit=170"), ("sudoku_easy", "eval.limit=192")}
    flat = next(r for c, r, _ in runs if r.name == "mas_flat_grpo")
    assert {"rollout=flat", "algorithm=grpo"} <= set(flat.overrides)
    assert ct.plan(s, {"math_easy/mas"}) == [("math_easy", ct.MATH_ROWS[2], 0), ("math_easy", ct.MATH_ROWS[2], 1)]


def test_a_dataset_folder_with_fewer_test_problems_than_the_table_evaluates_stops_it(tmp_path, capsys):
    import pandas as pd

    (tmp_path / "data" / "math_easy").mkdir(parents=True)  # as data version 1 built it: 48 test problems
    pd.DataFrame({"id": [str(i) for i in range(48)]}).to_parquet(tmp_path / "data" / "math_easy" / "test.parquet")
    args = ["--only", "math_easy/mas", "--work", str(tmp_path / "w"), "--out-dir", str(tmp_path / "o"),
            f"env.data_root={tmp_path / 'data'}"]
    assert ct.main(args) == 2 and not (tmp_path / "w").exists()  # refused before any run
    assert "has 48 test problems, the table evaluates 192: move" in capsys.readouterr().err
    assert ct.main([*args, "--dry-run"]) == 0  # a dry run says so and composes the runs
    out = capsys.readouterr()
    assert "# warning: " in out.err and "# == math_easy / mas / seed 1" in out.out
    assert ct.short_test_splits(_settings(eval_limit=48, extra=[f"env.data_root={tmp_path / 'data'}"]),
                                {"math_easy"}) == []


def test_cold_start_rows_start_from_their_seeds_sft():
    s = _settings(work=Path("w"))
    rows = {r.name: r for c, r, seed in ct.plan(s, {"sudoku_easy"}) if seed == 1}
    assert set(rows) == {"mas", "mas_sft", "at_grpo_l1_sft"}
    sft = Path("w/cold_start/sudoku_easy/seed1/sft")
    over = lambda name: ct.run_overrides(s, "sudoku_easy", rows[name], 1)
    assert f"eval.checkpoint={sft}" in over("mas_sft") and f"trainer.checkpoint.init_from={sft}" in over("at_grpo_l1_sft")
    assert not any(o.startswith(("eval.checkpoint=", "trainer.checkpoint.init_from=")) for o in over("mas"))
    build, train = ct.cold_start_commands(s, "sudoku_easy", 1)
    assert build[build.index("--out") + 1] == str(sft.parent / "data") and "seed=1" in build
    assert f"sft.data={sft.parent / 'data' / 'train.jsonl'}" in train and "seed=1" in train
    # the SFT's run folder is <output_dir>/<experiment>/<run_name>: the path the rows load
    opts = dict(o.split("=", 1) for o in train if "=" in o)
    assert Path(opts["trainer.output_dir"]) / opts["experiment"] / opts["trainer.run_name"] == sft
    assert rows["at_grpo_l1_sft"].base == "mas_sft"  # its curve starts at the SFT start's score


def test_noise_verdicts_by_hand():
    # two seeds per row, 100 problems: 0.50/0.52 vs 0.20/0.22 -> diff 0.30; se of each row is the
    # binomial floor sqrt(p (1 - p) / 100) / sqrt(2): 0.0354 and 0.0290 -> noise 2 * 0.0457 = 0.0915
    assert ct._se([0.50, 0.52], 100) == pytest.approx(0.0353483, abs=1e-6)
    recs = lambda row, xs: [{"avg": x, "pass_": x, "problems": 100, "wall_s": 1.0, "git_commit": "c",
                             "seed": i, "model": "m"} for i, x in enumerate(xs)]
    results = {("math_easy", "mas"): recs("mas", [0.50, 0.52]), ("math_easy", "single"): recs("single", [0.20, 0.22]),
               ("math_easy", "at_grpo_l1"): recs("at_grpo_l1", [0.53, 0.49])}
    md = ct.markdown(_settings(), results)
    assert "| MAS > single agent (untrained) | +30.0 (noise ±9.1) | supports |" in md
    assert "| AT-GRPO training > untrained MAS | +0.0 (noise ±10.0) | inside the noise |" in md
    assert "| MAS | 51.0 ± 1.4 | 51.0 ± 1.4 | 2 |" in md


@pytest.mark.slow
def test_tiny_run_writes_skips_and_tabulates(tmp_path):
    (tmp_path / "data").mkdir()  # a data root other than the default must exist
    args = [sys.executable, str(SCRIPT), "--only", "math_easy/mas,math_easy/at_grpo_l1", "--seeds", "0,1",
            "--steps", "1", "--val-every", "1", "--batch", "1", "--k", "2", "--tokens", "8",
            "--eval-limit", "2", "--eval-k", "2", "--work", str(tmp_path / "w"), "--out-dir", str(tmp_path / "docs"),
            "model=tiny", "trainer.threads=1", f"env.data_root={tmp_path / 'data'}"]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = sorted((tmp_path / "w" / "results").glob("*/*/seed*.json"))
    finished = [p for p in results if not p.name.endswith(".eval.json")]
    assert len(finished) == 4
    rec = json.loads((tmp_path / "w" / "results" / "math_easy" / "at_grpo_l1" / "seed1.json").read_text())
    assert rec["reward_curve"][0][0] == 1 and rec["val_curve"][-1][0] == 1 and 0 <= rec["avg"] <= 1
    assert len(rec["git_commit"]) >= 7 and rec["model"] == "tiny:test"
    md = (tmp_path / "docs" / "cpu_table.md").read_text()
    assert "| MAS | " in md and "| 2 |" in md and "AT-GRPO training > untrained MAS" in md
    assert (tmp_path / "docs" / "cpu_table.png").stat().st_size > 1000
    # A re-run skips every finished run and starts no training.
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.count("done, skipped") == 4
    assert "pettingllms.train" not in again.stdout
    # --rebuild only rewrites the table from what finished, whatever --only would plan
    (tmp_path / "docs" / "cpu_table.md").unlink()
    rebuilt = subprocess.run([*args[:2], "--rebuild", *args[4:]], cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
    assert rebuilt.returncode == 0 and "skipped" not in rebuilt.stdout
    body = lambda text: text[text.index("## math_easy"):]  # the header line names the command run
    assert body((tmp_path / "docs" / "cpu_table.md").read_text()) == body(md)


@pytest.mark.slow
@all_paths_only("~25 s")
def test_tiny_cold_start_column_runs_once_per_seed_and_is_kept(tmp_path):
    (tmp_path / "data").mkdir()
    args = [sys.executable, str(SCRIPT), "--only", "sudoku_easy/mas_sft,sudoku_easy/at_grpo_l1_sft", "--seeds", "0",
            "--steps", "1", "--batch", "1", "--k", "2", "--tokens", "8", "--eval-limit", "2", "--eval-k", "1",
            "--cold-start-problems", "3", "--work", str(tmp_path / "w"), "--out-dir", str(tmp_path / "docs"),
            "model=tiny", "trainer.threads=1", f"env.data_root={tmp_path / 'data'}"]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("cold start sudoku_easy/seed0") == 2  # build + SFT, once for both rows
    cold = json.loads((tmp_path / "w" / "cold_start" / "sudoku_easy" / "seed0" / "cold_start.json").read_text())
    assert cold["rows"] == 3 and cold["wall_s"] > 0
    sft = tmp_path / "w" / "cold_start" / "sudoku_easy" / "seed0" / "sft"
    assert (sft / "sft_summary.json").exists()
    for row in ("mas_sft", "at_grpo_l1_sft"):
        rec = json.loads((tmp_path / "w" / "results" / "sudoku_easy" / row / "seed0.json").read_text())
        assert rec["cold_start"]["dir"] == cold["dir"] and 0 <= rec["avg"] <= 1
        # every finished run's JSON is copied next to the table, for committing
        assert json.loads((tmp_path / "docs" / "cpu_table_runs" / "sudoku_easy" / row / "seed0.json").read_text()) == rec
    from omegaconf import OmegaConf
    trained = OmegaConf.load(tmp_path / "w" / "runs" / "cpu_sudoku_easy_at_grpo_l1_sft" / "at_grpo_l1_sft-s0"
                             / "config.yaml")
    assert Path(str(trained.trainer.checkpoint.init_from)) == sft
    assert "AT-GRPO training > its SFT start" in (tmp_path / "docs" / "cpu_table.md").read_text()
