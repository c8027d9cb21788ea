"""One query end to end: the designer writes a design, the executor runs it, artifacts are written.

    run_query(question, designer_engine, designer_policy, executor_engine, executor_policy,
              out_dir, cfg=MasConfig | dict | None, seed=0, progress=None, weights="") -> QueryResult

Attempts: the designer's reply -> its last ```python block -> `run_designs` (DSL checks, then
the sandbox). A failed attempt is retried with its error as feedback, up to `cfg.max_attempts`;
every attempt is recorded. With `cfg.fallback_template` set (demos of untrained designers), that
template runs as one more attempt, labelled as such, when every design failed. Artifacts in out_dir (the last attempt that produced a design):
    mas_design.py   the design as the designer wrote it
    mas.py          exactly what ran in the sandbox (DSL + driver + design)
    execution.log   host events per round, then what the design printed
    trace.jsonl     one line per node call: inputs, output, tokens, timing
    attempts.json   every attempt: designer reply, design, result
    result.json     question, ok, answer, error, timing, counts
    index.html      a self-contained report (pettingllms.mas.report)
    mas_visualization.mmd   the report's workflow graph as a Mermaid flowchart
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from pettingllms.config.schema import MasConfig
from pettingllms.errors import ConfigError
from pettingllms.envs.programs import extract_program
from pettingllms.mas.budgets import MasBudgets
from pettingllms.mas.executor import DesignJob, ExecutionResult, run_designs
from pettingllms.mas.prompts import designer_messages
from pettingllms.mas.report import render_page, workflow_mermaid
from pettingllms.mas.templates import load_templates
from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams
from pettingllms.utils.seeding import derive_seed


@dataclass
class Attempt:
    index: int
    designer_reply: str
    design: str | None
    ok: bool
    answer: str | None
    error: str | None
    designer_tokens: int = 0
    timing: dict[str, float] = field(default_factory=dict)
    source: str = "designer"  # or "fallback template '<name>'"


@dataclass
class QueryResult:
    question: str
    ok: bool
    answer: str | None
    error: str | None
    design: str | None
    attempts: list[Attempt]
    execution: ExecutionResult | None
    out_dir: str
    report: str  # path of index.html
    timing: dict[str, float]
    weights: str = ""  # which weights answered (the demo: base model or cold-start checkpoint)


def mas_config(cfg: Any) -> MasConfig:
    """A MasConfig from None, a MasConfig, a dict or a DictConfig (unknown keys fail)."""
    if isinstance(cfg, MasConfig):
        return cfg
    merged = OmegaConf.merge(OmegaConf.structured(MasConfig), cfg or {})
    return OmegaConf.to_object(merged)


def _sampling(block, seed: int) -> SamplingParams:
    return SamplingParams(n=1, temperature=float(block.temperature), top_p=float(block.top_p),
                          top_k=int(block.top_k), max_new_tokens=int(block.max_new_tokens),
                          stop=list(block.stop), seed=seed % 2**31)


def run_query(question: str, designer_engine, designer_policy: str, executor_engine,
              executor_policy: str, out_dir: str | Path, cfg: Any = None, seed: int = 0,
              progress: Callable[[dict], None] | None = None, weights: str = "") -> QueryResult:
    cfg = mas_config(cfg)
    budgets = MasBudgets.from_cfg(cfg.budgets)
    fmt = str(cfg.design_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    notify = progress or (lambda event: None)
    start = time.monotonic()
    attempts: list[Attempt] = []
    last_run: tuple[str, ExecutionResult] | None = None
    feedback = None
    for index in range(1, max(1, int(cfg.max_attempts)) + 1):
        notify({"stage": "designing", "attempt": index})
        t0 = time.monotonic()
        request = GenerationRequest(designer_messages(question, feedback, fmt), designer_policy,
                                    _sampling(cfg.designer_sampling, derive_seed(seed, "design", index)),
                                    request_id=f"design-{index}")
        completion = designer_engine.generate([request])[0][0]
        design = extract_program(completion.text)
        attempt = Attempt(index, completion.text, design, False, None, None,
                          designer_tokens=len(completion.response_ids),
                          timing={"design_s": time.monotonic() - t0})
        attempts.append(attempt)
        if design is None:
            attempt.error = "design_check: the reply holds no ```python block"
            feedback = "your reply held no ```python block with the design"
            continue
        notify({"stage": "executing", "attempt": index})
        (result,) = run_designs(
            [DesignJob(design, question, f"attempt-{index}", design_format=fmt)], executor_engine,
            executor_policy,
            _sampling(cfg.executor_sampling, 0), budgets, seed=derive_seed(seed, "execute", index),
            progress=lambda e, i=index: notify({"stage": "executing", "attempt": i, **e}))
        attempt.ok, attempt.answer, attempt.error = result.ok, result.answer, result.error
        attempt.timing.update(result.timing)
        last_run = (design, result)
        if result.ok:
            break
        feedback = result.error
    if not attempts[-1].ok and cfg.fallback_template:
        last_run = _fallback(question, cfg, budgets, executor_engine, executor_policy, seed,
                             attempts, notify) or last_run
    final = attempts[-1]
    design, execution = last_run if last_run else (None, None)
    timing = {"total_s": time.monotonic() - start}
    query = QueryResult(question, final.ok, final.answer, final.error, design, attempts, execution,
                        str(out), str(out / "index.html"), timing, weights)
    write_artifacts(query)
    notify({"stage": "done", "ok": query.ok})
    return query


def _fallback(question, cfg, budgets, engine, policy, seed, attempts, notify):
    """Run the configured template as a labelled extra attempt (the designer's all failed)."""
    fmt = str(cfg.design_format)
    templates = load_templates(fmt)
    name = str(cfg.fallback_template)
    if name not in templates:
        raise ConfigError(f"mas.fallback_template={name!r}: no such template for design format "
                          f"{fmt}; choose one of {', '.join(sorted(templates))}")
    index = len(attempts) + 1
    notify({"stage": "executing", "attempt": index, "fallback": name})
    (result,) = run_designs([DesignJob(templates[name], question, f"fallback-{name}", design_format=fmt)],
                            engine, policy,
                            _sampling(cfg.executor_sampling, 0), budgets,
                            seed=derive_seed(seed, "execute", index))
    attempts.append(Attempt(index, f"(no designer reply: every design failed, so the fallback "
                                   f"template '{name}' ran)", templates[name], result.ok,
                            result.answer, result.error, timing=dict(result.timing),
                            source=f"fallback template '{name}'"))
    return templates[name], result


def report_data(q: QueryResult) -> dict:
    """What the report renders (result.json's summary plus design, program, log, trace)."""
    ex = q.execution
    attempts = [asdict(a) for a in q.attempts]
    summary = {"question": q.question, "ok": q.ok, "answer": q.answer, "error": q.error,
               "attempts": len(q.attempts), "source": q.attempts[-1].source if q.attempts else "",
               "node_calls": len(ex.node_calls) if ex else 0, "timing": q.timing, "weights": q.weights,
               "execution_timing": ex.timing if ex else {}}
    return {**summary, "design": q.design, "program": ex.program if ex else "",
            "log": ex.log if ex else "", "trace": ex.trace if ex else [], "attempts": attempts,
            "summary": summary}


def write_artifacts(q: QueryResult) -> dict:
    out = Path(q.out_dir)
    ex = q.execution
    page = report_data(q)
    (out / "mas_design.py").write_text(q.design or "# the designer produced no design\n")
    (out / "mas.py").write_text(ex.program if ex else "# nothing was executed\n")
    (out / "execution.log").write_text(ex.log if ex else "nothing was executed\n")
    with open(out / "trace.jsonl", "w") as f:
        for entry in (ex.trace if ex else []):
            f.write(json.dumps(entry) + "\n")
    (out / "attempts.json").write_text(json.dumps(page["attempts"], indent=1))
    (out / "result.json").write_text(json.dumps(page["summary"], indent=1))
    (out / "index.html").write_text(render_page(page))
    (out / "mas_visualization.mmd").write_text(workflow_mermaid(page.get("trace") or [], bool(page.get("ok"))))
    return page
