"""The results table (scripts/results/make_table.py) and the paper-row recipes (scripts/train/<env>/).

Eval JSONs are synthetic but shaped exactly like pettingllms.evaluate's output; recipes are
checked by composing the config each one names (fast, in-process) plus one real bash dry-run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from script_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "results" / "make_table.py"


mt = load_script("scripts/results/make_table.py")


def eval_result(env: str, avg: float, pas: float, *, k: int = 4, checkpoint: str = "",
                agents_mode: str = "explicit", policies: dict | None = None, agents: dict | None = None,
                benchmarks: dict[str, tuple[float, float]] | None = None) -> dict:
    """The dict pettingllms.evaluate writes (same keys), with chosen numbers."""
    def agg(a, p, n=8):
        return {f"avg@{k}": a, f"pass@{k}": p, "team_reward": a, "problems": n}
    benchmarks = benchmarks or {env.removesuffix("_single"): (avg, pas)}
    return {"env": env, "k": k, "temperature": 0.7, "num_problems": 8, "overall": agg(avg, pas),
            "benchmarks": {s: agg(a, p) for s, (a, p) in benchmarks.items()}, "wall_s": 1.0,
            "experiment": "x", "split": "test", "checkpoint": checkpoint, "model": "tiny:test", "seed": 0,
            "config": {"agents_mode": agents_mode, "policies": policies or {}, "agents": agents or {},
                       "env": {"name": env}}}


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def md_cells(md: str) -> dict[str, list[str]]:
    """Method title -> its cells, from the markdown table."""
    out = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| Method"):
            parts = [c.strip() for c in line.strip("|").split("|")]
            out[parts[0]] = parts[1:]
    return out


def md_header(md: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith("| Method"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    d = tmp_path / "results"
    ck = "outputs/x/run/checkpoints/step_000002"
    write(d / "a.json", eval_result("plan_path_single", 0.10, 0.25))
    write(d / "b.json", eval_result("plan_path_single", 0.20, 0.50, checkpoint=ck))
    write(d / "c.json", eval_result("plan_path", 0.30, 0.50))
    write(d / "nested" / "d.json", eval_result("plan_path", 0.40, 0.75, checkpoint=ck))
    write(d / "e.json", eval_result("plan_path", 0.55, 0.875, checkpoint=ck, agents_mode="per_agent_lora"))
    # math per-role through an explicit two-policy mapping; math has no other rows
    write(d / "f.json", eval_result("math", 0.125, 0.375, checkpoint=ck, policies={"p1": {}, "p2": {}},
                                    agents={"tool": "p1", "reasoner": "p2"}))
    write(d / "metrics.json", {"step": 1, "loss": 0.5})  # not an eval result: skipped
    write(d / "broken.json", "{not json")  # unreadable: skipped
    return d


def test_rows_are_inferred_and_values_land_in_their_cells(results_dir: Path):
    results, warnings = mt.collect([results_dir])
    assert len(results) == 6 and warnings == []
    placed = {r.path.name: (r.row, r.env) for r in results}
    assert placed == {"a.json": ("single", "plan_path"), "b.json": ("single_grpo", "plan_path"),
                      "c.json": ("mas", "plan_path"), "d.json": ("at_grpo_shared", "plan_path"),
                      "e.json": ("at_grpo_per_role", "plan_path"), "f.json": ("at_grpo_per_role", "math")}
    table = mt.build_table(results)
    assert table.columns == ["plan_path", "math"]  # paper order: planning before math
    md = mt.to_markdown(table, "avg")
    assert md_header(md) == ["plan_path (avg@4)", "math (avg@4)"]
    cells = md_cells(md)
    assert cells["Single agent"] == ["10.0", "-"]
    assert cells["Single agent + GRPO"] == ["20.0", "-"]
    assert cells["MAS"] == ["30.0", "-"]
    assert cells["MAS + AT-GRPO (shared policy)"] == ["40.0", "-"]
    assert cells["MAS + AT-GRPO (per-role policies)"] == ["55.0", "12.5"]
    both = md_cells(mt.to_markdown(table, "both"))
    assert both["MAS + AT-GRPO (per-role policies)"] == ["55.0 / 87.5", "12.5 / 37.5"]
    assert md_cells(mt.to_markdown(table, "pass"))["Single agent"] == ["25.0", "-"]


def test_fixed_columns_show_missing_envs_as_dash(results_dir: Path):
    results, _ = mt.collect([results_dir])
    table = mt.build_table(results, envs=["sudoku", "plan_path"])
    cells = md_cells(mt.to_markdown(table))
    assert table.columns == ["sudoku", "plan_path"]
    assert cells["MAS"] == ["-", "30.0"]
    assert all(row[0] == "-" for row in cells.values())


def test_manifest_overrides_inference_and_rejects_unknown_rows(tmp_path: Path):
    d = tmp_path / "res"
    write(d / "x.json", eval_result("sokoban", 0.5, 1.0))  # would infer as MAS (no checkpoint)
    write(d / "y.json", eval_result("sokoban", 0.25, 0.5))
    manifest = write(tmp_path / "manifest.yaml",
                     "results:\n  - {file: res/x.json, row: at_grpo_shared}\n"
                     "  - {file: 'res/y*.json', row: single, env: code}\n"
                     "  - {file: res/missing.json, row: mas}\n")
    results, warnings = mt.collect([d], mt.load_manifest(manifest))
    placed = {r.path.name: (r.row, r.env) for r in results}
    assert placed == {"x.json": ("at_grpo_shared", "sokoban"), "y.json": ("single", "code")}
    assert any("missing.json" in w for w in warnings)
    bad = write(tmp_path / "bad.yaml", "results:\n  - {file: res/x.json, row: best_row}\n")
    with pytest.raises(mt.TableError, match="unknown row"):
        mt.load_manifest(bad)
    with pytest.raises(mt.TableError, match="needs 'file' and 'row'"):
        mt.load_manifest(write(tmp_path / "bad2.yaml", "results:\n  - {row: mas}\n"))


def test_newest_result_wins_a_cell_with_a_warning(tmp_path: Path):
    old = write(tmp_path / "old.json", eval_result("sudoku", 0.1, 0.1))
    new = write(tmp_path / "new.json", eval_result("sudoku", 0.9, 0.9))
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    results, _ = mt.collect([tmp_path])
    table = mt.build_table(results)
    assert md_cells(mt.to_markdown(table))["MAS"] == ["90.0"]
    assert len(table.warnings) == 1 and "new.json replaces" in table.warnings[0]


def test_benchmark_columns_and_mixed_k(tmp_path: Path):
    ck = "run/checkpoints/step_1"
    write(tmp_path / "m1.json", eval_result("math", 0.5, 0.5, k=4, benchmarks={"aime24": (0.1, 0.2),
                                                                                "gsm8k": (0.6, 0.9)}))
    write(tmp_path / "m2.json", eval_result("math", 0.5, 0.5, k=8, checkpoint=ck,
                                            benchmarks={"gsm8k": (0.7, 0.95)}))
    results, _ = mt.collect([tmp_path])
    table = mt.build_table(results, benchmarks=True)
    assert table.columns == ["math/aime24", "math/gsm8k"]
    md = mt.to_markdown(table)
    assert md_header(md) == ["math/aime24 (avg@4)", "math/gsm8k (avg@k)"]
    assert "Columns mixing k: math/gsm8k" in md
    cells = md_cells(md)
    assert cells["MAS"] == ["10.0", "60.0"]
    assert cells["MAS + AT-GRPO (shared policy)"] == ["-", "70.0"]


def test_cli_writes_markdown_png_and_json(results_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "table"
    assert mt.main([str(results_dir), "--out-dir", str(out), "--metric", "both", "--title", "T"]) == 0
    md = (out / "results_table.md").read_text()
    assert md.startswith("## T") and "| MAS | 30.0 / 50.0 | - |" in md
    png = (out / "results_table.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    cells = json.loads((out / "results_table.json").read_text())["cells"]
    assert cells["mas|plan_path"]["avg"] == pytest.approx(0.30)
    assert "row=at_grpo_per_role env=math" in capsys.readouterr().out


def test_cli_errors_are_one_line(tmp_path: Path, capsys):
    assert mt.main([str(tmp_path), "--out-dir", str(tmp_path / "o")]) == 2  # empty folder
    assert "no evaluation results" in capsys.readouterr().err
    assert mt.main([str(tmp_path / "nope")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        mt.main(["--help"])
    assert e.value.code == 0
    assert "single_grpo" in capsys.readouterr().out  # the row rules are in --help


# ---- the paper-row recipes ---------------------------------------------------------------

ENVS = ("code", "sudoku", "sokoban", "plan_path", "math")
ROW_SCRIPTS = {  # row -> script name per env (math names its two AT-GRPO rows by policy level)
    "single": "{env}_single_untrained", "single_grpo": "{env}_single", "mas": "{env}_mas_untrained",
    "at_grpo_shared": "{env}_single_policy", "at_grpo_per_role": "{env}_two_policy"}
MATH_NAMES = {"at_grpo_shared": "math_L1_prompt", "at_grpo_per_role": "math_L2_lora"}
RECIPE_LINE = re.compile(r'^recipe (train|eval) (\S+) (\S+) (\S+) "\$@"$', re.M)


def _recipe(env: str, row: str) -> tuple[str, str, str, str]:
    name = MATH_NAMES.get(row) if env == "math" and row in MATH_NAMES else ROW_SCRIPTS[row].format(env=env)
    text = (ROOT / "scripts" / "train" / env / f"{name}.sh").read_text()
    assert "set -euo pipefail" in text
    m = RECIPE_LINE.search(text)
    if env == "math" and row == "at_grpo_shared":  # H4's script: plain exec of its config
        assert "--config-name math_L1_prompt" in text
        return "train", "math_L1_prompt", "math", name
    assert m, f"{name}.sh has no recipe line"
    return m.groups()


@pytest.mark.parametrize("env", ENVS)
def test_every_env_has_the_five_rows_with_the_right_setup(env: str):
    """Each row's recipe composes to the row's setup, and make_table places its result there."""
    from pettingllms.cli.config_loading import load_config

    for row in mt.ROWS:
        mode, config, env_name, experiment = _recipe(env, row)
        assert mode == ("eval" if row in ("single", "mas") else "train"), (env, row)
        cfg = load_config(config, [f"env={env_name}", f"experiment={experiment}"])
        single = row in ("single", "single_grpo")
        assert cfg.env.name == (f"{env}_single" if single else env)
        assert cfg.rollout.strategy == ("flat" if single else "tree")
        assert cfg.algorithm.name == ("grpo" if single else "at_grpo")
        # what the evaluator would write for this row: trained rows carry a checkpoint
        from omegaconf import OmegaConf
        fake = {"env": str(cfg.env.name), "checkpoint": "" if mode == "eval" else "ckpt",
                "config": OmegaConf.to_container(cfg, resolve=True)}
        assert mt.infer_row(fake) == row, (env, row)


def test_recipe_passes_user_arguments_last():
    """User arguments win over the recipe's own (budget, env) and --dry-run only prints."""
    proc = subprocess.run(["bash", "scripts/train/code/code_two_policy.sh", "--dry-run",
                           "rollout.sampling.max_new_tokens=48", "trainer.total_steps=3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "max_new_tokens: 48" in proc.stdout and "total_steps: 3" in proc.stdout
    assert "experiment: code_two_policy" in proc.stdout and "agents_mode: per_agent_lora" in proc.stdout
    bad = subprocess.run(["bash", "scripts/train/code/code_two_policy.sh", "--dry-run", "trainer.totl_steps=3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown config key 'trainer.totl_steps'" in bad.stderr


def test_plot_metrics_writes_a_png_and_refuses_unknown_keys(tmp_path):
    plot = load_script("scripts/results/plot_metrics.py")
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps({"step": s, "episode/team_reward": 0.1 * s, "reward/designer/mean": 0.2})
                                 for s in (1, 2, 3)) + "\n" + json.dumps({"step": 4, "val/x": 1.0}) + "\n")
    assert plot.series([json.loads(x) for x in metrics.read_text().splitlines()], "episode/team_reward") == (
        [1.0, 2.0, 3.0], [0.1, 0.2, 0.30000000000000004])
    out = tmp_path / "curve.png"
    assert plot.main([str(metrics), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.main([str(metrics), "--keys", "nope", "--out", str(out)]) == 2
    assert plot.main([str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
