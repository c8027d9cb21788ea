"""The MetaAgent-X cold-start data set (synthetic): designer replies from the DSL templates, and
executor traces from running those designs.

Designer rows: for each problem, `per_problem` templates drawn with a seeded RNG from
`pettingllms.mas.templates` (each is a design that passes the DSL checks and runs); the row's
messages are the designer prompt for that problem (`designer_messages`) and its reply is the
template in the one ```python block the prompt asks for.
Executor rows (optional, needs an engine): the designer rows' designs are run by the real
executor (`run_designs`, sandboxed, every node sampled by the engine); the node calls of the
executions whose answer the env grades correct become rows (rejection sampling), with exactly the
messages the node was asked and the reply it gave.
Every row says `synthetic: true` and where it came from (`source`).
"""
from __future__ import annotations

import random
from typing import Any, Sequence

from pettingllms.envs.autoevol.env import AutoEvolEnv, design_source

# Short templates by default: a small model learns to reproduce them whole.
DEFAULT_TEMPLATES = ("single", "sequential", "reflection", "ensemble", "parallel")


def template_reply(source: str) -> str:
    return f"```python\n{source.strip()}\n```"


def designer_rows(problems: Sequence[dict[str, Any]], seed: int = 0, per_problem: int = 1,
                  templates: Sequence[str] = DEFAULT_TEMPLATES) -> list[dict[str, Any]]:
    from pettingllms.mas.prompts import designer_messages
    from pettingllms.mas.templates import load_templates

    library = load_templates()
    unknown = sorted(set(templates) - set(library))
    if unknown:
        raise ValueError(f"unknown templates {unknown}; known: {sorted(library)}")
    rng = random.Random(seed)
    rows = []
    for p in problems:
        env = AutoEvolEnv()
        env.reset(dict(p), 0)
        for name in rng.sample(list(templates), k=min(per_problem, len(templates))):
            rows.append({"agent": "designer", "messages": designer_messages(env.question),
                         "reply": template_reply(library[name]), "problem_id": str(p["id"]),
                         "source": f"template:{name}", "synthetic": True})
    return rows


def executor_rows(problems: Sequence[dict[str, Any]], designs: Sequence[dict[str, Any]], engine: Any,
                  policy: str, sampling: Any, budgets: Any = None, seed: int = 0,
                  executions: int = 1) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Run each designer row's design `executions` times; rows from the correct executions."""
    from pettingllms.mas.executor import DesignJob, run_designs

    envs = {}
    for p in problems:
        env = AutoEvolEnv()
        env.reset(dict(p), 0)
        envs[str(p["id"])] = env
    jobs = [DesignJob(design_source=design_source(d["reply"]), question=envs[d["problem_id"]].question,
                      job_id=f"{d['problem_id']}/{d['source']}/x{j}")
            for d in designs for j in range(executions)]
    results = run_designs(jobs, engine, policy, sampling, budgets, seed)
    rows, ran, right = [], 0, 0
    for job, r in zip(jobs, results):
        pid = job.job_id.split("/", 1)[0]
        ok = bool(r.ok and r.answer is not None)
        ran += ok
        if not ok or envs[pid].grade(r.answer) < 1.0:
            continue
        right += 1
        rows += [{"agent": "executor", "messages": c.messages, "reply": c.completion.text, "problem_id": pid,
                  "source": f"trace:{job.job_id}:{c.node_id}", "synthetic": True} for c in r.node_calls]
    n = max(1, len(jobs))
    return rows, {"executions": float(len(jobs)), "ran_fraction": ran / n, "correct_fraction": right / n}
