"""The HTML view of one query: tabs Design, Execution, Agent Trace, Workflow, Attempts.

`render_tabs(data)` is a self-contained fragment (its own <style>, CSS-only tabs, <details> for
per-node traces, an inline SVG of the pipeline; no script, so it also works when the demo page
inserts it with innerHTML). `render_page(data)` wraps it into `index.html`. `data` is what
`run.py` writes to result.json plus the design, program, log, trace and attempts.
Everything model-written is escaped.
"""
from __future__ import annotations

import html
import json
from typing import Any

_CSS = """
.mx{font-family:system-ui,sans-serif;font-size:14px;color:#1d2330}
.mx pre{background:#f4f6fa;border:1px solid #dde3ee;padding:8px;white-space:pre-wrap;
 word-break:break-word;max-height:420px;overflow:auto;font-size:12px}
.mx .tabs>input{display:none}
.mx .tabs>label{display:inline-block;padding:6px 14px;border:1px solid #c7cfdd;border-bottom:none;
 border-radius:6px 6px 0 0;cursor:pointer;background:#eef1f6;margin-right:2px}
.mx .tabs>input:checked+label{background:#fff;font-weight:600}
.mx .tab{display:none;border:1px solid #c7cfdd;padding:10px;background:#fff}
.mx #mx-t1:checked~.p1,.mx #mx-t2:checked~.p2,.mx #mx-t3:checked~.p3,.mx #mx-t4:checked~.p4,
.mx #mx-t5:checked~.p5{display:block}
.mx details{border:1px solid #dde3ee;border-radius:4px;margin:4px 0;padding:4px 8px}
.mx summary{cursor:pointer}
.mx .ok{color:#19753a;font-weight:600}.mx .bad{color:#b3261e;font-weight:600}
.mx table{border-collapse:collapse}.mx td,.mx th{border:1px solid #dde3ee;padding:3px 8px;
 text-align:left;vertical-align:top}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _pre(value: Any, cls: str = "") -> str:
    return f'<pre class="{cls}">{_e(value)}</pre>'


def _node_details(entry: dict) -> str:
    if entry.get("kind") == "tool":
        head = f"python_tool · round {entry.get('round')} · {'ok' if entry.get('ok') else entry.get('error')}"
        body = "<b>code</b>" + _pre(entry.get("code")) + "<b>stdout</b>" + _pre(entry.get("stdout"))
        if entry.get("stderr"):
            body += "<b>stderr</b>" + _pre(entry.get("stderr"))
    else:
        head = (f"{entry.get('node_id')} ({entry.get('role')}) · round {entry.get('round')} · "
                f"{entry.get('prompt_tokens')}+{entry.get('completion_tokens')} tokens · "
                f"{entry.get('finish_reason')}")
        msgs = "".join(f"<b>{_e(m.get('role'))}</b>{_pre(m.get('content'))}"
                       for m in entry.get("messages") or [])
        body = msgs + "<b>output</b>" + _pre(entry.get("output"))
    return f'<details class="node"><summary>{_e(head)}</summary>{body}</details>'


def workflow_columns(trace: list[dict], ok: bool) -> list[list[dict]]:
    """The pipeline as executed: question -> one column per round (its calls ran in one batch)
    -> answer; every node of a column feeds every node of the next."""
    rounds: dict[int, list[dict]] = {}
    for entry in trace:
        rounds.setdefault(int(entry.get("round", 0)), []).append(entry)
    columns = [[{"label": "question", "kind": "io"}]]
    for r in sorted(rounds):
        columns.append([{"label": f"{e.get('role')} ({e.get('node_id')})" if e.get("kind") == "llm"
                         else "python_tool", "kind": e.get("kind")} for e in rounds[r]])
    columns.append([{"label": "answer" if ok else "failed", "kind": "io" if ok else "bad"}])
    return columns


def workflow_mermaid(trace: list[dict], ok: bool) -> str:
    """The same graph as workflow_svg, as a Mermaid flowchart (mas_visualization.mmd)."""
    columns = workflow_columns(trace, ok)
    lines = ["flowchart LR"]
    for ci, col in enumerate(columns):
        for ri, node in enumerate(col):
            label = str(node["label"]).replace('"', "#quot;")
            lines.append(f'    n{ci}_{ri}["{label}"]:::{node["kind"] or "llm"}')
    for ci in range(1, len(columns)):
        lines += [f"    n{ci - 1}_{a} --> n{ci}_{b}" for a in range(len(columns[ci - 1]))
                  for b in range(len(columns[ci]))]
    lines += ["    classDef io fill:#e8f0fe", "    classDef llm fill:#fff4d6",
              "    classDef tool fill:#e2f5e8", "    classDef bad fill:#fde2e1"]
    return "\n".join(lines) + "\n"


def workflow_svg(trace: list[dict], ok: bool) -> str:
    """The pipeline as executed (workflow_columns), drawn as an inline SVG."""
    columns = workflow_columns(trace, ok)
    w, h, gap_x, gap_y = 150, 34, 60, 14
    height = max(len(c) for c in columns) * (h + gap_y) + gap_y
    width = len(columns) * (w + gap_x) + gap_x
    fill = {"io": "#e8f0fe", "llm": "#fff4d6", "tool": "#e2f5e8", "bad": "#fde2e1"}
    boxes, edges, centers = [], [], []
    for ci, col in enumerate(columns):
        x = gap_x + ci * (w + gap_x)
        top = (height - len(col) * (h + gap_y) + gap_y) / 2
        cur = []
        for ri, node in enumerate(col):
            y = top + ri * (h + gap_y)
            cur.append((x, y + h / 2))
            label = node["label"] if len(node["label"]) <= 22 else node["label"][:21] + "…"
            boxes.append(f'<g class="wf-node"><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" '
                         f'fill="{fill.get(node["kind"], "#eee")}" stroke="#6b7a99"/>'
                         f'<text x="{x + w / 2}" y="{y + h / 2 + 4}" text-anchor="middle" '
                         f'font-size="11">{_e(label)}</text></g>')
        for (px, py) in (centers[-1] if centers else []):
            for (cx, cy) in cur:
                edges.append(f'<line x1="{px + w}" y1="{py}" x2="{cx}" y2="{cy}" stroke="#9aa6bf" '
                             'marker-end="url(#mx-arrow)"/>')
        centers.append(cur)
    return (f'<svg class="workflow" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}"><defs><marker id="mx-arrow" '
            'viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
            'orient="auto"><path d="M0,0L10,5L0,10z" fill="#9aa6bf"/></marker></defs>'
            + "".join(edges) + "".join(boxes) + "</svg>")


def render_tabs(data: dict) -> str:
    ok = bool(data.get("ok"))
    source = (data.get("summary") or {}).get("source") or "designer"
    via = "" if source == "designer" else f" (by the {_e(source)}, not the designer's design)"
    status = f'<span class="ok">ran to an answer{via}</span>' if ok else \
        '<span class="bad">failed</span>'
    attempts = data.get("attempts") or []
    trace = data.get("trace") or []
    summary = (f"<p>Status: {status} · attempts: {len(attempts)} · node calls: "
               f"{sum(1 for t in trace if t.get('kind') == 'llm')} · "
               f"time: {float((data.get('timing') or {}).get('total_s', 0)):.1f}s</p>")
    weights = (data.get("summary") or {}).get("weights")
    if weights:
        summary += f'<p class="weights">Weights: {_e(weights)}</p>'
    if data.get("error"):
        summary += "<b>Error</b>" + _pre(data["error"], "error")
    design = "<b>mas_design.py</b> (the designer's program)" + _pre(data.get("design") or
                                                                     "(no design was extracted)")
    design += "<details><summary>mas.py (exactly what ran in the sandbox)</summary>" + \
        _pre(data.get("program") or "") + "</details>"
    execution = "<b>Final answer</b>" + _pre(data.get("answer")) + "<b>execution.log</b>" + \
        _pre(data.get("log") or "")
    nodes = "".join(_node_details(t) for t in trace) or "<p>No node was called.</p>"
    rows = "".join(
        f"<tr><td>{a.get('index')}</td><td>{_e(a.get('source'))}</td>"
        f"<td>{'ok' if a.get('ok') else 'failed'}</td>"
        f"<td>{_e(a.get('error') or '')}</td><td><details><summary>designer reply</summary>"
        f"{_pre(a.get('designer_reply'))}</details></td></tr>" for a in attempts)
    attempts_html = ("<table><tr><th>#</th><th>source</th><th>result</th><th>error</th><th>reply</th></tr>"
                     f"{rows}</table>")
    panes = [("Design", design), ("Execution", execution), ("Agent Trace", nodes),
             ("Workflow", workflow_svg(trace, ok)), ("Attempts", attempts_html)]
    tabs = "".join(f'<input type="radio" name="mx-tabs" id="mx-t{i}"{" checked" if i == 1 else ""}>'
                   f'<label for="mx-t{i}" class="tab-label">{name}</label>'
                   for i, (name, _) in enumerate(panes, 1))
    bodies = "".join(f'<div class="tab p{i}" data-tab="{name}">{body}</div>'
                     for i, (name, body) in enumerate(panes, 1))
    return f'<div class="mx"><style>{_CSS}</style>{summary}<div class="tabs">{tabs}{bodies}</div></div>'


def render_page(data: dict) -> str:
    question = _e(data.get("question"))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>MetaAgent-X run</title>"
            "</head><body style='max-width:1100px;margin:20px auto'>"
            f"<h2>MetaAgent-X run</h2><p><b>Task:</b> {question}</p>"
            f"<p><b>Answer:</b> {_e(data.get('answer'))}</p>{render_tabs(data)}"
            f"<script type='application/json' id='result'>{_e(json.dumps(data.get('summary', {})))}"
            "</script></body></html>")
