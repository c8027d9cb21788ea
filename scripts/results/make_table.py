"""Build the paper-style results table (markdown + PNG) from `pettingllms.evaluate` outputs.

    python scripts/results/make_table.py RESULTS_DIR [MORE_DIRS_OR_FILES ...] [--manifest FILE]
        [--out-dir DIR] [--metric avg|pass|both] [--benchmarks]

Rows are the paper's five baselines, columns the envs (or env/benchmark with --benchmarks):

    single            single agent, untrained            (<env>_single env, no checkpoint)
    single_grpo       single agent + GRPO                (<env>_single env, a checkpoint)
    mas               MAS, untrained                     (two-agent env, no checkpoint)
    at_grpo_shared    MAS + AT-GRPO, shared policy (L1)  (two-agent env, a checkpoint, one policy)
    at_grpo_per_role  MAS + AT-GRPO, per-role policies   (two-agent env, a checkpoint, a policy per
                                                          agent: agents_mode per_agent_lora /
                                                          per_agent_model, or several policies)

Inputs: every `*.json` under the given folders that has the fields `pettingllms.evaluate` writes
(`env`, `k`, `overall`, `benchmarks`, `checkpoint`, `config`); other JSON files are skipped.
Each result's (row, env) is inferred as above from the result itself. A manifest overrides that,
or names results the inference cannot place (YAML or JSON, paths relative to the manifest):

    results:
      - {file: runs/a/eval.json, row: at_grpo_per_role}          # env taken from the result
      - {file: "math_L3/*.json", row: at_grpo_per_role, env: math}   # globs allowed

A `*_single` env is shown in its base env's column. Values are percentages of the overall
avg@k (default), pass@k, or both ("avg / pass"); an empty cell is '-'. When several results land
in one cell the newest file wins and the others are listed as warnings. Writes
<out-dir>/results_table.md, results_table.png and results_table.json (the cells, for scripts).
"""
from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

ROWS = ("single", "single_grpo", "mas", "at_grpo_shared", "at_grpo_per_role")
ROW_TITLES = {
    "single": "Single agent",
    "single_grpo": "Single agent + GRPO",
    "mas": "MAS",
    "at_grpo_shared": "MAS + AT-GRPO (shared policy)",
    "at_grpo_per_role": "MAS + AT-GRPO (per-role policies)",
}
# The paper's column order (games, planning, code, math); other envs follow alphabetically.
ENV_ORDER = ("sudoku", "sokoban", "plan_path", "code", "math")
EMPTY = "-"
_EVAL_FIELDS = ("env", "k", "overall", "benchmarks")


class TableError(ValueError):
    """Bad input (manifest, row name, file) with a message meant for a person."""


@dataclass
class EvalResult:
    """One evaluation file, placed in the table."""
    path: Path
    row: str
    env: str  # column env (the `_single` suffix removed)
    k: int
    overall: dict[str, float]
    benchmarks: dict[str, dict[str, float]]
    mtime: float = 0.0


@dataclass
class Table:
    rows: list[str]
    columns: list[str]  # "env" or "env/benchmark"
    cells: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)  # avg, pass, k
    sources: dict[tuple[str, str], str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def base_env(env: str) -> str:
    return env[: -len("_single")] if env.endswith("_single") else env


def infer_row(result: dict[str, Any]) -> str:
    """The paper row of one evaluation result, from its env, checkpoint and policy mapping."""
    env = str(result.get("env", ""))
    trained = bool(result.get("checkpoint"))
    if env.endswith("_single"):
        return "single_grpo" if trained else "single"
    if not trained:
        return "mas"
    cfg = result.get("config") or {}
    if cfg.get("agents_mode") in ("per_agent_lora", "per_agent_model"):
        return "at_grpo_per_role"
    named = set((cfg.get("agents") or {}).values()) | set(cfg.get("policies") or {})
    return "at_grpo_per_role" if len(named) > 1 else "at_grpo_shared"


def is_eval_result(data: Any) -> bool:
    return isinstance(data, dict) and all(f in data for f in _EVAL_FIELDS) and isinstance(data["overall"], dict)


def _read_json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _metric(agg: dict[str, Any], name: str, k: int) -> float:
    v = agg.get(f"{name}@{k}")
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def load_manifest(path: Path) -> list[dict[str, str]]:
    """Entries {file, row, env?} with `file` made absolute (relative to the manifest)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise TableError(f"cannot read manifest {path}: {e}") from None
    entries = data.get("results") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise TableError(f"manifest {path}: expected a list under 'results'")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "file" not in e or "row" not in e:
            raise TableError(f"manifest {path}: entry {i} needs 'file' and 'row', got {e!r}")
        if e["row"] not in ROWS:
            raise TableError(f"manifest {path}: entry {i} has unknown row {e['row']!r}; rows: {', '.join(ROWS)}")
        out.append({"file": str((Path(path).parent / str(e["file"])).resolve()), "row": str(e["row"]),
                    "env": str(e["env"]) if e.get("env") else ""})
    return out


def _manifest_entry(path: Path, manifest: list[dict[str, str]]) -> Optional[dict[str, str]]:
    resolved = str(path.resolve())
    for e in manifest:
        if resolved == e["file"] or fnmatch.fnmatch(resolved, e["file"]):
            return e
    return None


def collect(inputs: Iterable[Path], manifest: list[dict[str, str]] = ()) -> tuple[list[EvalResult], list[str]]:
    """Read every evaluation JSON under `inputs`; returns (results, warnings)."""
    files: list[Path] = []
    for p in map(Path, inputs):
        if p.is_dir():
            files += sorted(p.rglob("*.json"))
        elif p.is_file():
            files.append(p)
        else:
            raise TableError(f"no such file or folder: {p}")
    for e in manifest:  # manifest files outside the input folders count too
        files += [Path(f) for f in sorted(glob.glob(e["file"])) if Path(f).is_file()]
    results, warnings, seen = [], [], set()
    for f in files:
        key = str(f.resolve())
        if key in seen:
            continue
        seen.add(key)
        data = _read_json(f)
        if not is_eval_result(data):
            continue
        entry = _manifest_entry(f, manifest)
        row = entry["row"] if entry else infer_row(data)
        env = base_env(entry["env"] if entry and entry["env"] else str(data["env"]))
        try:
            k = int(data["k"])
        except (TypeError, ValueError):
            warnings.append(f"{f}: bad k {data['k']!r}, skipped")
            continue
        results.append(EvalResult(path=f, row=row, env=env, k=k, overall=dict(data["overall"]),
                                  benchmarks=dict(data.get("benchmarks") or {}), mtime=f.stat().st_mtime))
    for e in manifest:
        if not any(fnmatch.fnmatch(str(r.path.resolve()), e["file"]) for r in results):
            warnings.append(f"manifest entry {e['file']} matched no evaluation result")
    return results, warnings


def _env_sort_key(env: str) -> tuple[int, str]:
    return (ENV_ORDER.index(env) if env in ENV_ORDER else len(ENV_ORDER), env)


def build_table(results: list[EvalResult], envs: Optional[list[str]] = None,
                benchmarks: bool = False) -> Table:
    """Place results in cells; `envs` fixes the columns (an env with no result shows '-')."""
    col_envs = list(envs) if envs else sorted({r.env for r in results}, key=_env_sort_key)
    columns: list[str] = []
    for env in col_envs:
        if benchmarks:
            srcs = sorted({s for r in results if r.env == env for s in r.benchmarks})
            columns += [f"{env}/{s}" for s in srcs] or [env]
        else:
            columns.append(env)
    table = Table(rows=list(ROWS), columns=columns)
    newest: dict[tuple[str, str], EvalResult] = {}
    for r in sorted(results, key=lambda r: (r.mtime, str(r.path))):
        if r.env not in col_envs:
            continue
        parts = ([(f"{r.env}/{s}", agg) for s, agg in r.benchmarks.items()] if benchmarks else
                 [(r.env, r.overall)])
        for col, agg in parts:
            cell = (r.row, col)
            if cell in newest:
                table.warnings.append(f"{ROW_TITLES[r.row]} / {col}: {r.path} replaces {newest[cell].path}")
            newest[cell] = r
            table.cells[cell] = {"avg": _metric(agg, "avg", r.k), "pass": _metric(agg, "pass", r.k),
                                 "k": float(r.k)}
            table.sources[cell] = str(r.path)
    return table


def _pct(v: float) -> str:
    return EMPTY if math.isnan(v) else f"{100 * v:.1f}"


def cell_text(table: Table, row: str, col: str, metric: str) -> str:
    c = table.cells.get((row, col))
    if c is None:
        return EMPTY
    if metric == "both":
        return f"{_pct(c['avg'])} / {_pct(c['pass'])}"
    return _pct(c[metric])


def _column_ks(table: Table, col: str) -> list[int]:
    return sorted({int(c["k"]) for (_, cc), c in table.cells.items() if cc == col})


def _header(table: Table, col: str, metric: str) -> str:
    ks = _column_ks(table, col)
    kk = "k" if len(ks) != 1 else str(ks[0])
    what = {"avg": f"avg@{kk}", "pass": f"pass@{kk}", "both": f"avg@{kk} / pass@{kk}"}[metric]
    return f"{col} ({what})" if ks else col


def to_markdown(table: Table, metric: str = "avg", title: str = "") -> str:
    head = ["Method"] + [_header(table, c, metric) for c in table.columns]
    lines = [f"## {title}", ""] if title else []
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + [":---:"] * len(table.columns)) + "|")
    for row in table.rows:
        cells = [cell_text(table, row, c, metric) for c in table.columns]
        lines.append("| " + " | ".join([ROW_TITLES[row]] + cells) + " |")
    mixed = [c for c in table.columns if len(_column_ks(table, c)) > 1]
    lines.append("")
    lines.append("Values are percentages over the test split; '-' = no result."
                 + (f" Columns mixing k: {', '.join(mixed)}." if mixed else ""))
    return "\n".join(lines) + "\n"


def to_png(table: Table, path: Path, metric: str = "avg", title: str = "") -> None:
    """A heatmap of the chosen metric with every cell's text; empty cells grey with '-'."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    shade = "pass" if metric == "pass" else "avg"
    grid = np.full((len(table.rows), len(table.columns)), np.nan)
    for i, row in enumerate(table.rows):
        for j, col in enumerate(table.columns):
            c = table.cells.get((row, col))
            if c is not None:
                grid[i, j] = 100 * c[shade]
    width = 3.2 + 1.6 * max(1, len(table.columns))
    fig, ax = plt.subplots(figsize=(width, 0.55 * len(table.rows) + 1.6))
    cmap = matplotlib.colormaps["YlGn"].with_extremes(bad="#dddddd")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for i, row in enumerate(table.rows):
        for j, col in enumerate(table.columns):
            ax.text(j, i, cell_text(table, row, col, metric), ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(table.columns)), [_header(table, c, metric) for c in table.columns],
                  rotation=20, ha="right", fontsize=8)
    ax.set_yticks(range(len(table.rows)), [ROW_TITLES[r] for r in table.rows], fontsize=9)
    ax.set_title(title or "Results (%)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def to_json(table: Table, metric: str) -> dict[str, Any]:
    return {"metric": metric, "rows": table.rows, "columns": table.columns,
            "cells": {f"{r}|{c}": {**{m: (None if math.isnan(x) else x) for m, x in v.items()},
                                   "file": table.sources[(r, c)]} for (r, c), v in table.cells.items()},
            "warnings": table.warnings}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="make_table.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", type=Path, help="folders (searched recursively) or JSON files")
    ap.add_argument("--manifest", type=Path, help="YAML/JSON list of {file, row, env?}")
    ap.add_argument("--out-dir", type=Path, default=Path("outputs/results_table"))
    ap.add_argument("--metric", choices=("avg", "pass", "both"), default="avg")
    ap.add_argument("--benchmarks", action="store_true", help="one column per env/benchmark")
    ap.add_argument("--envs", nargs="+", help="columns to show, in order (default: envs found)")
    ap.add_argument("--title", default="", help="table title")
    args = ap.parse_args(argv)
    try:
        manifest = load_manifest(args.manifest) if args.manifest else []
        if not args.inputs and not manifest:
            raise TableError("give at least one results folder or file, or --manifest")
        results, warnings = collect(args.inputs, manifest)
        if not results:
            raise TableError("no evaluation results found (JSON written by pettingllms.evaluate)")
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = build_table(results, envs=args.envs, benchmarks=args.benchmarks)
    for r in results:
        print(f"{r.path}: row={r.row} env={r.env} k={r.k}")
    for w in warnings + table.warnings:
        print(f"warning: {w}", file=sys.stderr)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    md = to_markdown(table, args.metric, args.title)
    (args.out_dir / "results_table.md").write_text(md)
    (args.out_dir / "results_table.json").write_text(json.dumps(to_json(table, args.metric), indent=1))
    to_png(table, args.out_dir / "results_table.png", args.metric, args.title)
    print(md)
    print(f"wrote {args.out_dir / 'results_table.md'}, {args.out_dir / 'results_table.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
