"""The paper's claims at CPU scale, one command (issue 12): every row x seed, resumable.

    python scripts/results/cpu_table.py [--dry-run] [--only ROW,...] [--seeds 0,1] [--steps N]
        [--work DIR] [--out-dir docs/results] [key=value ...]     (key=value go to every run)

Rows (column math_easy: the embedded model has signal there, 10-60% untrained, and its test
split is fixed and disjoint from train; see pettingllms/envs/math/data.py easy_rows):
    single          single agent, untrained           (eval, single_grpo config)
    single_grpo     single agent + GRPO               (train, flat, episode returns)
    mas             MAS, untrained                    (eval, math_L1_prompt config)
    mas_flat_grpo   MAS + flat GRPO                   (train, rollout=flat algorithm=grpo)
    at_grpo_l1      MAS + AT-GRPO, shared policy (L1) (train; = grouping ablation "both")
    at_grpo_l2      MAS + AT-GRPO, per-agent LoRA (L2)
    group_none / group_agent / group_turn   AT-GRPO L1 with group_by [problem] / [problem, agent]
                    / [problem, turn]
and on plan_path_easy and sokoban_easy: mas and at_grpo_l1 (the two grid envs whose easy level the
untrained embedded model solves at 10-60%). On sudoku_easy the untrained model almost never writes
a valid move (docs/results/easy_levels.md), so its column starts from a cold start:
    mas             MAS, untrained
    mas_sft         MAS after a plan-agent SFT on solved train puzzles   (eval of the SFT checkpoint)
    at_grpo_l1_sft  AT-GRPO L1 from that SFT checkpoint                   (train, trainer.checkpoint.init_from)
The cold start runs once per seed, before the first row that needs it: build_grid_sft.py rows
(--cold-start-problems train puzzles) and configs/grid_cold_start.yaml's SFT, into
WORK/cold_start/<column>/seed<S>/ (finished when its cold_start.json exists); its wall time is
kept in each row's record and counted once in the table's total.
Every trained row uses the same steps, problems per step, K, token budget and learning rate.
Held-out accuracy (avg@k, pass@k) is the trainer's validation on the test split at every
--val-every steps (default: once, at the final step; the curve's step 0 is the eval row of the
weights it starts from, same seed); eval rows run pettingllms.evaluate on the same problems.

Sizing (defaults): 2 seeds; 8 steps x 4 problems, K=4, 96 new tokens per turn; held-out with k=2,
16 problems per rollout call, on the first 192 test problems of each column (EVAL_LIMITS; all 170
of sokoban_easy; each column's table names its N). math_easy's 192 are its 48 problems of data
version 1 (single-digit + and x, two-digit +) then 144 more two-digit additions, so its numbers
are not comparable with tables on the first 48 alone. That is 12 evaluations, 20 trainings and 2
cold starts. As recorded at the old sizes (48 math problems, 16 grid; wall_s in
docs/results/cpu_table.json, code of a63320a/fbd0686/d2c3176/e35e32c, 2-core box): math trainings
250-335 s for AT-GRPO rows, 82-1005 s for the GRPO baselines, grid trainings 344-408 s,
evaluations 26-144 s, sudoku cold starts 467-535 s each; 2 h 26 min for the default table. An
estimate, not a measurement, at the new sizes: each evaluation's recorded time scaled by N_new /
N_old, each training's plus (N_new / N_old - 1) times its base evaluation's (its one final
validation), cold starts as recorded: math_easy 2 h 44 min, plan_path_easy 1 h 08 min,
sokoban_easy 1 h 15 min, sudoku_easy 1 h 56 min, about 7 h 03 min in all (code faster than
those runs' shortens it). Split the table into processes with disjoint --only sets only when
there are cores to spare (each run is one process).
A run is finished when WORK/results/<column>/<row>/seed<S>.json exists: a re-run skips it (an
interrupted training resumes from its last checkpoint). After each run the table is rebuilt:
OUT_DIR/cpu_table.md (mean +- sd over seeds, and which claimed orderings are outside the noise),
cpu_table.png (reward and held-out curves with seed bands), cpu_table.json, and a copy of every
run's result JSON under OUT_DIR/cpu_table_runs/.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
MATH = "math_easy"


@dataclass(frozen=True)
class Row:
    name: str
    title: str
    mode: str  # train | eval
    config: str
    overrides: tuple[str, ...] = ()
    base: str = "mas"  # the eval row (same column and seed) of the weights it starts from: its step-0 point
    cold_start: bool = False  # starts from the column's SFT cold start of the same seed


MATH_ROWS = (
    Row("single", "Single agent", "eval", "single_grpo", base="single"),
    Row("single_grpo", "Single agent + GRPO", "train", "single_grpo", base="single"),
    Row("mas", "MAS", "eval", "math_L1_prompt"),
    Row("mas_flat_grpo", "MAS + flat GRPO", "train", "math_L1_prompt", ("rollout=flat", "algorithm=grpo")),
    Row("at_grpo_l1", "MAS + AT-GRPO (L1, group by both)", "train", "math_L1_prompt"),
    Row("at_grpo_l2", "MAS + AT-GRPO (L2, per-agent LoRA)", "train", "math_L2_lora"),
    Row("group_none", "AT-GRPO L1, group by problem only", "train", "math_L1_prompt",
        ("algorithm.group_by=[problem]",)),
    Row("group_agent", "AT-GRPO L1, group by agent", "train", "math_L1_prompt",
        ("algorithm.group_by=[problem,agent]",)),
    Row("group_turn", "AT-GRPO L1, group by turn", "train", "math_L1_prompt",
        ("algorithm.group_by=[problem,turn]",)),
)
GRID_ROWS = (
    Row("mas", "MAS", "eval", "at_grpo_shared"),
    Row("at_grpo_l1", "MAS + AT-GRPO (L1)", "train", "at_grpo_shared"),
)
# sudoku_easy: the untrained model almost never writes a valid move there, so its AT-GRPO row
# starts from a plan-agent SFT cold start on solved train puzzles (one per seed, see cold_start)
COLD_START_ROWS = (
    Row("mas", "MAS", "eval", "at_grpo_shared"),
    Row("mas_sft", "MAS after the SFT cold start", "eval", "at_grpo_shared", cold_start=True),
    Row("at_grpo_l1_sft", "MAS + SFT cold start + AT-GRPO (L1)", "train", "at_grpo_shared", base="mas_sft",
        cold_start=True),
)
COLUMNS: dict[str, tuple[tuple[str, ...], tuple[Row, ...]]] = {
    MATH: (("env.data=math_easy",), MATH_ROWS),
    "plan_path_easy": (("env=plan_path", "env.data=plan_path_easy"), GRID_ROWS),
    "sokoban_easy": (("env=sokoban", "env.data=sokoban_easy"), GRID_ROWS),
    "sudoku_easy": (("env=sudoku", "env.data=sudoku_easy"), COLD_START_ROWS),
}
# held-out problems per column, the first N of its test split (--eval-limit overrides all): 192, so
# that the table's binomial floor of the noise bar (2 x _se, 2 seeds) is at most +-5.1 points (at
# 50%); sokoban_easy has only 170 test levels (all its easy levels not in train): +-5.4
HELD_OUT = 192
EVAL_LIMITS = {MATH: HELD_OUT, "plan_path_easy": HELD_OUT, "sokoban_easy": 170, "sudoku_easy": HELD_OUT}
COLD_START_PROBLEMS = 256  # solved train puzzles per cold start (one SFT row each, one epoch)
# (better, worse, claim): the paper's orderings, checked per column where both rows exist
CLAIMS = (
    ("mas", "single", "MAS > single agent (untrained)"),
    ("at_grpo_l1", "single_grpo", "MAS + AT-GRPO > single agent + GRPO"),
    ("at_grpo_l1", "mas_flat_grpo", "AT-GRPO > flat GRPO (same MAS)"),
    ("at_grpo_l1", "mas", "AT-GRPO training > untrained MAS"),
    ("at_grpo_l1", "group_agent", "grouping: both > agent"),
    ("group_agent", "group_turn", "grouping: agent > turn"),
    ("group_turn", "group_none", "grouping: turn > none"),
    ("mas_sft", "mas", "SFT cold start > untrained MAS"),
    ("at_grpo_l1_sft", "mas_sft", "AT-GRPO training > its SFT start"),
)


@dataclass
class Settings:
    seeds: list[int]
    steps: int
    batch: int
    k: int
    tokens: int
    eval_limit: int | None  # None: EVAL_LIMITS per column
    eval_k: int
    val_every: int
    work: Path
    out_dir: Path
    extra: list[str] = field(default_factory=list)
    cold_start_problems: int = COLD_START_PROBLEMS
    argv: list[str] = field(default_factory=list)  # the command line, for the table's header


def run_overrides(s: Settings, column: str, row: Row, seed: int) -> list[str]:
    env_over, _ = COLUMNS[column]
    common = [*env_over, *row.overrides, f"seed={seed}", f"experiment=cpu_{column}_{row.name}",
              "env.max_turns=2", f"rollout.batch_size={s.batch}", f"rollout.k={s.k}",
              f"rollout.sampling.max_new_tokens={s.tokens}", "rollout.max_prompt_tokens=768",
              f"eval.k={s.eval_k}", f"eval.limit={eval_limit(s, column)}",
              "eval.batch_problems=16"]
    if row.mode == "train":
        common += [f"trainer.total_steps={s.steps}", f"trainer.validation.val_freq={s.val_every}",
                   f"trainer.checkpoint.save_freq={s.val_every}", "trainer.checkpoint.keep_checkpoints=1", "trainer.optim.lr=1e-4",
                   "trainer.optim.warmup_steps=1", f"trainer.output_dir={s.work / 'runs'}",
                   f"trainer.run_name={row.name}-s{seed}", "trainer.checkpoint.resume=auto",
                   "trainer.logging.save_trajectories=false", "trainer.logging.progress_bar=false"]
    else:
        common += [f"eval.output={result_path(s, column, row, seed).with_suffix('.eval.json')}",
                   f"trainer.output_dir={s.work / 'runs'}"]
    if row.cold_start:
        key = "trainer.checkpoint.init_from" if row.mode == "train" else "eval.checkpoint"
        common.append(f"{key}={cold_start_dir(s, column, seed) / 'sft'}")
    return common + s.extra


# ----------------------------------------------------------------------------- the SFT cold start

def cold_start_dir(s: Settings, column: str, seed: int) -> Path:
    return s.work / "cold_start" / column / f"seed{seed}"


def cold_start_commands(s: Settings, column: str, seed: int) -> list[list[str]]:
    """Build the column's SFT rows (the plan agent's real turn-1 prompts on train problems, the
    solver's answer), then SFT into <dir>/sft: configs/grid_cold_start.yaml, this seed."""
    env_over, _ = COLUMNS[column]
    d = cold_start_dir(s, column, seed)
    same = [*env_over, f"seed={seed}", "env.max_turns=2", f"rollout.sampling.max_new_tokens={s.tokens}"]
    return [[sys.executable, str(ROOT / "scripts" / "dataprocess" / "build_grid_sft.py"), "--out", str(d / "data"),
             "--problems", str(s.cold_start_problems), *same, *s.extra],
            [sys.executable, "-m", "pettingllms.sft", "--config-name", "grid_cold_start", *same,
             f"sft.data={d / 'data' / 'train.jsonl'}", f"trainer.output_dir={d.parent}",
             f"experiment={d.name}", "trainer.run_name=sft", *s.extra]]


def ensure_cold_start(s: Settings, column: str, seed: int) -> dict | None:
    """Run the cold start once per (column, seed); its record (wall time, rows) or None on failure."""
    d = cold_start_dir(s, column, seed)
    done = d / "cold_start.json"
    if done.exists():
        return json.loads(done.read_text())
    if (d / "sft").exists():  # an interrupted cold start: it is short, start it again
        shutil.rmtree(d / "sft")
    build, sft = cold_start_commands(s, column, seed)
    t0 = time.perf_counter()
    for cmd in (build, sft):
        print(f"  cold start {column}/seed{seed}: {' '.join(cmd[1:])}", flush=True)
        if subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode != 0:
            return None
    report = json.loads((d / "data" / "report.json").read_text())
    rec = {"column": column, "seed": seed, "dir": str(d), "wall_s": time.perf_counter() - t0,
           "git_commit": git_commit(), "commands": [" ".join(c) for c in (build, sft)],
           "rows": report["rows"], "problems": report["problems"]}
    _write_json(done, rec)
    return rec


def eval_limit(s: Settings, column: str) -> int:
    return s.eval_limit or EVAL_LIMITS[column]


def short_test_splits(s: Settings, columns: set[str]) -> list[str]:
    """A line per column whose dataset folder exists with fewer test problems than the table
    evaluates (built by an older data version: it is kept, not rebuilt), where its runs would
    evaluate fewer problems than the table names."""
    import pyarrow.parquet as pq
    root = ROOT / next((e.split("=", 1)[1] for e in s.extra if e.startswith("env.data_root=")), "datasets")
    short = []
    for column in sorted(columns):
        path = root / column / "test.parquet"
        if path.exists() and (n := pq.ParquetFile(path).metadata.num_rows) < eval_limit(s, column):
            short.append(f"{path} has {n} test problems, the table evaluates {eval_limit(s, column)}: "
                         f"move {path.parent} away to have it rebuilt")
    return short


def result_path(s: Settings, column: str, row: Row, seed: int) -> Path:
    return s.work / "results" / column / row.name / f"seed{seed}.json"


def command(s: Settings, column: str, row: Row, seed: int) -> list[str]:
    module = "pettingllms.train" if row.mode == "train" else "pettingllms.evaluate"
    return [sys.executable, "-m", module, "--config-name", row.config, *run_overrides(s, column, row, seed)]


def plan(s: Settings, only: set[str] | None) -> list[tuple[str, Row, int]]:
    """Every (column, row, seed); `only` keeps those named by row, column or column/row."""
    return [(col, row, seed) for col, (_, rows) in COLUMNS.items() for row in rows for seed in s.seeds
            if not only or only & {row.name, col, f"{col}/{row.name}"}]


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001 - not a git checkout
        return "unknown"


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float))
    tmp.replace(path)  # atomic: a result file is either whole or absent


def collect(s: Settings, column: str, row: Row, seed: int, cmd: list[str], wall_s: float) -> dict:
    """The result record of a finished run: final held-out numbers and its curves."""
    rec: dict[str, Any] = {"column": column, "row": row.name, "title": row.title, "seed": seed,
                           "mode": row.mode, "command": " ".join(cmd), "wall_s": wall_s,
                           "git_commit": git_commit(), "reward_curve": [], "val_curve": []}
    if row.mode == "eval":
        res = json.loads(result_path(s, column, row, seed).with_suffix(".eval.json").read_text())
        k = res["k"]
        rec.update(avg=res["overall"][f"avg@{k}"], pass_=res["overall"][f"pass@{k}"], k=k,
                   problems=res["num_problems"], env=res["env"], model=res["model"])
        rec["val_curve"] = [[0, rec["avg"]]]
        return rec
    run_dir = s.work / "runs" / f"cpu_{column}_{row.name}" / f"{row.name}-s{seed}"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rec["run_dir"] = str(run_dir)
    rec["model"] = _model_path(run_dir / "config.yaml")
    rec["reward_curve"] = [[r["step"], r["reward/mean"]] for r in rows]
    val = [(r["step"], key, r[key]) for r in rows for key in r
           if key.startswith("val/") and key.count("/") == 2 and "@" in key]
    avg = [(st, v) for st, key, v in val if "/avg@" in key]
    pas = [(st, v) for st, key, v in val if "/pass@" in key]
    if not avg:
        raise RuntimeError(f"{run_dir}: no validation metrics; trainer.validation.val_freq must divide the steps")
    rec["val_curve"] = [[st, v] for st, v in avg]
    rec.update(avg=avg[-1][1], pass_=pas[-1][1], k=s.eval_k, problems=eval_limit(s, column),
               env=next(key for _, key, _ in val).split("/")[1])
    return rec


def _model_path(config_yaml: Path) -> str:
    from omegaconf import OmegaConf
    return str(OmegaConf.load(config_yaml).model.path)


# ----------------------------------------------------------------------------- the table

def _stats(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def _se(xs: list[float], problems: int) -> float:
    """Standard error of a row's mean accuracy: the spread over seeds, floored by the binomial
    error of one evaluation on `problems` problems (two seeds alone underestimate it)."""
    m, sd = _stats(xs)
    binom = math.sqrt(max(m * (1 - m), 1e-12) / max(problems, 1))
    return max(sd, binom) / math.sqrt(len(xs))


def load_results(s: Settings) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for path in sorted((s.work / "results").glob("*/*/seed*.json")):
        if path.name.endswith(".eval.json"):
            continue
        rec = json.loads(path.read_text())
        out.setdefault((rec["column"], rec["row"]), []).append(rec)
    return out


def markdown(s: Settings, results: dict[tuple[str, str], list[dict]]) -> str:
    cold_starts = {r["cold_start"]["dir"]: r["cold_start"]["wall_s"] for recs in results.values() for r in recs
                   if "cold_start" in r}  # one per (column, seed), shared by that seed's rows
    wall = sum(r["wall_s"] for recs in results.values() for r in recs) + sum(cold_starts.values())
    commits = sorted({r["git_commit"] for recs in results.values() for r in recs})
    models = sorted({r.get("model", "?") for recs in results.values() for r in recs})
    lines = [f"# CPU results table ({', '.join(models)})", "",
             f"Command: `bash scripts/results/cpu_table.sh{''.join(' ' + e for e in s.argv)}` "
             f"({s.steps} steps x {s.batch} problems, K={s.k}, {s.tokens} new tokens/turn; held-out "
             f"k={s.eval_k} on the first N test problems, N and the seeds per column).",
             f"Git commit(s): {', '.join(commits) or '-'}. Summed wall time of the runs: {wall / 60:.1f} min.",
             "", "Values: held-out avg@k / pass@k in %, mean ± sd over seeds (n).", ""]
    for column, (_, rows) in COLUMNS.items():
        present = [r for r in rows if (column, r.name) in results]
        if not present:
            continue
        sizes = sorted({x["problems"] for r in present for x in results[(column, r.name)]})
        seeds = sorted({x["seed"] for r in present for x in results[(column, r.name)]})
        lines += [f"## {column}", "", f"Held-out: the first {'/'.join(map(str, sizes))} test problems. "
                  f"Seeds: {','.join(map(str, seeds))} (n per row below).", "",
                  "| row | avg@k | pass@k | n |", "| --- | --- | --- | --- |"]
        for r in present:
            recs = results[(column, r.name)]
            (am, asd), (pm, psd) = _stats([x["avg"] for x in recs]), _stats([x["pass_"] for x in recs])
            lines.append(f"| {r.title} | {100 * am:.1f} ± {100 * asd:.1f} | {100 * pm:.1f} ± {100 * psd:.1f} "
                         f"| {len(recs)} |")
        claims = []
        for better, worse, claim in CLAIMS:
            a, b = results.get((column, better)), results.get((column, worse))
            if not a or not b:
                continue
            xa, xb = [x["avg"] for x in a], [x["avg"] for x in b]
            diff = _stats(xa)[0] - _stats(xb)[0]
            noise = 2 * math.hypot(_se(xa, a[0]["problems"]), _se(xb, b[0]["problems"]))
            verdict = ("inside the noise" if abs(diff) <= noise else
                       "supports" if diff > 0 else "contradicts")
            claims.append(f"| {claim} | {100 * diff:+.1f} (noise ±{100 * noise:.1f}) | {verdict} |")
        if claims:  # a column with one row finished has nothing to compare yet
            lines += ["", "| claim | difference (avg@k, points) | verdict |", "| --- | --- | --- |", *claims]
        lines.append("")
    lines += ["Noise: a difference counts only beyond 2 standard errors of the difference; a row's "
              "standard error is max(sd over seeds, binomial sd of one evaluation) / sqrt(seeds).", ""]
    return "\n".join(lines)


def plot(results: dict[tuple[str, str], list[dict]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [c for c in COLUMNS if any(col == c for col, _ in results)]
    if not columns:
        return
    fig, axes = plt.subplots(len(columns), 2, figsize=(12, 3.6 * len(columns)), squeeze=False)
    for i, column in enumerate(columns):
        for j, (curve, label) in enumerate((("reward_curve", "reward/mean (all candidates)"),
                                            ("val_curve", "held-out avg@k"))):
            ax = axes[i][j]
            for row in COLUMNS[column][1]:
                recs = results.get((column, row.name))
                if not recs or row.mode != "train":
                    continue
                curves = [dict(map(tuple, r[curve])) for r in recs]
                if curve == "val_curve":  # step 0: the row it starts from, same seed
                    base = {r["seed"]: r["avg"] for r in results.get((column, row.base), [])}
                    for c, r in zip(curves, recs):
                        if r["seed"] in base:
                            c[0] = base[r["seed"]]
                steps = sorted(set.intersection(*(set(c) for c in curves)))
                if not steps:
                    continue
                vals = [[c[st] for c in curves] for st in steps]
                mean = [sum(v) / len(v) for v in vals]
                line, = ax.plot(steps, mean, marker="o" if curve == "val_curve" else None, label=row.title)
                ax.fill_between(steps, [min(v) for v in vals], [max(v) for v in vals],
                                color=line.get_color(), alpha=0.2)
            ax.set_title(f"{column}: {label} (band: min-max over seeds)", fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            if j == 1 and ax.get_legend_handles_labels()[0]:  # no trained row finished yet: no legend
                ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rebuild(s: Settings) -> None:
    """The table, its JSON and PNG, and a copy of every finished run's result (and evaluation)
    JSON under OUT_DIR/cpu_table_runs/, so committing OUT_DIR keeps each run's command and metrics."""
    results = load_results(s)
    s.out_dir.mkdir(parents=True, exist_ok=True)
    (s.out_dir / "cpu_table.md").write_text(markdown(s, results))
    _write_json(s.out_dir / "cpu_table.json", {f"{c}/{r}": recs for (c, r), recs in results.items()})
    plot(results, s.out_dir / "cpu_table.png")
    for path in sorted((s.work / "results").glob("*/*/seed*.json")):
        copy = s.out_dir / "cpu_table_runs" / path.relative_to(s.work / "results")
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print every run's composed config, run nothing")
    ap.add_argument("--only", default="", help="comma-separated rows, columns or column/row (default: all)")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4, help="problems per training step")
    ap.add_argument("--k", type=int, default=4, help="candidates per (problem, turn, agent) / episodes")
    ap.add_argument("--tokens", type=int, default=96, help="new tokens per turn")
    ap.add_argument("--eval-limit", type=int, default=None,
                    help="held-out problems, the first N of test (default: EVAL_LIMITS, 192 per column)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the table from the finished runs, run nothing")
    ap.add_argument("--eval-k", type=int, default=2)
    ap.add_argument("--cold-start-problems", type=int, default=COLD_START_PROBLEMS,
                    help="train puzzles (SFT rows) per cold start of a cold-start column")
    ap.add_argument("--val-every", type=int, default=None,
                    help="held-out eval every N steps (divides --steps; default: only at the last step)")
    ap.add_argument("--work", default="outputs/cpu_table", help="runs and per-run results")
    ap.add_argument("--out-dir", default="docs/results", help="where the table, PNG and JSON go")
    args, extra = ap.parse_known_args(argv)
    args.val_every = args.val_every or args.steps
    bad = [e for e in extra if "=" not in e or e.startswith("-")]
    if bad:
        ap.error(f"unrecognised arguments {bad} (trainer overrides are key=value)")
    if args.steps % args.val_every:
        ap.error("--val-every must divide --steps, so the last validation is the final model")
    s = Settings(seeds=[int(x) for x in args.seeds.split(",") if x.strip()], steps=args.steps, batch=args.batch,
                 k=args.k, tokens=args.tokens, eval_limit=args.eval_limit, eval_k=args.eval_k,
                 val_every=args.val_every, work=Path(args.work), out_dir=Path(args.out_dir), extra=extra,
                 cold_start_problems=args.cold_start_problems,
                 argv=[a for a in (sys.argv[1:] if argv is None else argv) if a != "--rebuild"])
    only = {x.strip() for x in args.only.split(",") if x.strip()} or None
    runs = [] if args.rebuild else plan(s, only)
    short = short_test_splits(s, {column for column, _, _ in runs})
    for line in short:
        print(f"{'# warning' if args.dry_run else 'cpu_table'}: {line}", file=sys.stderr)
    if short and not args.dry_run:
        return 2
    if args.dry_run:
        from pettingllms.cli.config_loading import load_config, to_yaml
        shown: set[tuple[str, int]] = set()
        for column, row, seed in runs:
            if row.cold_start and (column, seed) not in shown:
                shown.add((column, seed))
                for cmd in cold_start_commands(s, column, seed):
                    print(f"# cold start {column} / seed {seed}: {' '.join(cmd[1:])}")
            print(f"# == {column} / {row.name} / seed {seed} ({row.mode}): {' '.join(command(s, column, row, seed)[1:])}")
            print(to_yaml(load_config(row.config, run_overrides(s, column, row, seed))), end="")
        return 0
    t_all = time.perf_counter()
    for n, (column, row, seed) in enumerate(runs, 1):
        out = result_path(s, column, row, seed)
        if out.exists():
            print(f"[{n}/{len(runs)}] {column}/{row.name}/seed{seed}: done, skipped", flush=True)
            continue
        cmd = command(s, column, row, seed)
        print(f"[{n}/{len(runs)}] {column}/{row.name}/seed{seed}: {' '.join(cmd[1:])}", flush=True)
        cold = ensure_cold_start(s, column, seed) if row.cold_start else None
        if row.cold_start and cold is None:
            print("cold start failed; the table keeps what finished", file=sys.stderr)
            rebuild(s)
            return 1
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode
        if rc != 0:
            print(f"run failed (exit {rc}); the table keeps what finished", file=sys.stderr)
            rebuild(s)
            return rc
        rec = collect(s, column, row, seed, cmd, time.perf_counter() - t0)
        if cold is not None:
            rec["cold_start"] = cold
        _write_json(out, rec)
        rebuild(s)
    rebuild(s)
    print(f"table: {s.out_dir / 'cpu_table.md'} ({(time.perf_counter() - t_all) / 60:.1f} min this call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
