"""avg@k and pass@k per env and benchmark (the problem's `source` column).

For each problem, k independent episodes are played (flat strategy, eval
temperature). avg@k is the mean success over those k episodes; pass@k is 1 if any
of them succeeded. Both are then averaged over the problems of each benchmark and
over all problems (`overall`). Training validation and `pettingllms.evaluate`
both call `evaluate_problems`.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import Any, Callable

from pettingllms.records import Episode
from pettingllms.rollout.runner import RolloutSettings
from pettingllms.utils.progress import Progress, token_counter


def eval_settings(settings: RolloutSettings, k: int, temperature: float) -> RolloutSettings:
    """The training rollout with evaluation sampling: flat episodes, eval temperature (then each
    agent's `eval_sampling`, RolloutSettings.sampling_for)."""
    # autoevol: k designs x 1 execution; graph: k executions of the program
    strategy = settings.strategy if settings.strategy in ("autoevol", "graph") else "flat"
    return replace(settings, strategy=strategy, k=int(k), eval_temperature=float(temperature),
                   sampling={**settings.sampling, "temperature": float(temperature)})


def _score(episodes: list[Episode]) -> dict[str, float]:
    wins = [1.0 if e.trajectory.success else 0.0 for e in episodes]
    rewards = [float(e.trajectory.team_reward) for e in episodes]
    return {"avg": sum(wins) / len(wins), "pass": 1.0 if any(wins) else 0.0,
            "reward": sum(rewards) / len(rewards), "episodes": float(len(episodes))}


def _aggregate(scores: list[dict[str, float]], k: int) -> dict[str, float]:
    n = len(scores)
    if n == 0:
        return {f"avg@{k}": math.nan, f"pass@{k}": math.nan, "team_reward": math.nan, "problems": 0}
    return {f"avg@{k}": sum(s["avg"] for s in scores) / n,
            f"pass@{k}": sum(s["pass"] for s in scores) / n,
            "team_reward": sum(s["reward"] for s in scores) / n,
            "problems": n}


def evaluate_problems(make_rollout: Callable[[RolloutSettings], Any], settings: RolloutSettings,
                      problems: list[dict[str, Any]], k: int, seed: int, *, env_name: str,
                      temperature: float, chunk: int, progress_s: float = 0.0) -> dict[str, Any]:
    """Play k episodes per problem at `temperature`, `chunk` problems per rollout call, and score them.

    make_rollout(eval_settings) returns an object with `.run(problems, seed, k) -> Batch`
    (a backend's runner over the current engine). `progress_s` > 0: a line that often (problems
    done / total, tokens, tok/s; utils/progress.py).
    """
    rollout = make_rollout(eval_settings(settings, k, temperature))
    chunk = max(1, int(chunk))
    by_problem: dict[str, list[Episode]] = defaultdict(list)
    with Progress(f"evaluation ({env_name}, k={k})", len(problems), "problems", token_counter(rollout),
                  every_s=progress_s) as progress:
        for i in range(0, len(problems), chunk):
            batch = rollout.run(problems[i: i + chunk], seed=seed + i, k=k)
            for e in batch.episodes:
                by_problem[e.problem_id].append(e)
            progress.advance(len(problems[i: i + chunk]))
    per_source: dict[str, list[dict[str, float]]] = defaultdict(list)
    everything = []
    for p in problems:
        eps = by_problem.get(str(p["id"]), [])
        if not eps:  # the rollout must return episodes for every problem
            raise RuntimeError(f"evaluation got no episodes for problem {p['id']}")
        s = _score(eps)
        everything.append(s)
        per_source[str(p.get("source") or env_name)].append(s)
    return {"env": env_name, "k": k, "temperature": float(temperature),
            "num_problems": len(problems), "overall": _aggregate(everything, k),
            "benchmarks": {src: _aggregate(v, k) for src, v in sorted(per_source.items())}}


def flat_metrics(result: dict[str, Any], prefix: str = "val") -> dict[str, float]:
    """val/<env>/avg@k, val/<env>/pass@k and the same per benchmark."""
    env, out = result["env"], {}
    for key, v in result["overall"].items():
        if key != "problems":
            out[f"{prefix}/{env}/{key}"] = float(v)
    for src, agg in result["benchmarks"].items():
        for key, v in agg.items():
            if key.startswith(("avg@", "pass@")):
                out[f"{prefix}/{env}/{src}/{key}"] = float(v)
    return out


def format_table(results: list[dict[str, Any]], by_model: bool = False) -> str:
    """A plain-text table: env, benchmark, problems, avg@k, pass@k (by_model: a first column names
    each result's model or checkpoint, to compare several)."""
    rows = [(("model",) if by_model else ()) + ("env", "benchmark", "problems", "avg@k", "pass@k")]
    for r in results:
        k = r["k"]
        who = ((r.get("checkpoint") or r.get("model") or "?"),) if by_model else ()
        for src, agg in r["benchmarks"].items():
            rows.append(who + (r["env"], src, str(agg["problems"]), f"{agg[f'avg@{k}']:.3f}",
                               f"{agg[f'pass@{k}']:.3f}"))
        o = r["overall"]
        rows.append(who + (r["env"], "ALL", str(o["problems"]), f"{o[f'avg@{k}']:.3f}", f"{o[f'pass@{k}']:.3f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ks = sorted({r["k"] for r in results})
    return "\n".join(lines) + f"\n(k = {', '.join(map(str, ks))})"
