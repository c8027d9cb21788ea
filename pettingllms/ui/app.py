"""The MetaAgent-X demo: a flask app that runs one query at a time and shows its report.

    create_app(run_query_fn, runs_dir, info) -> flask.Flask

`run_query_fn(question, out_dir, progress)` runs one query (pettingllms.mas.run.run_query with
the engines bound, see serve.py) and returns its QueryResult. Queries run one after another on
a single worker thread (the engine is not shared between threads); the page polls their state.

    GET  /                      the page
    GET  /api/health            {"status": "ok", ...info, "queued": n}
    POST /api/run               {"question": str} -> 202 {"run_id", "status_url"}; 4xx + message
    GET  /api/runs/<run_id>     {"state": queued|running|done|error, "progress", "result", "html"}
    GET  /runs/<run_id>/<file>  an artifact; only files inside runs_dir are served

With a `token` (serve.py sets one when HOST is not loopback, or from DEMO_TOKEN) every request
must carry it: `Authorization: Bearer <token>`, or `?token=<token>` once (the reply sets an
HttpOnly cookie the page then sends); anything else gets 401 (docs/security.md).
"""
from __future__ import annotations

import queue
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Callable

from flask import Flask, abort, g, jsonify, request, send_from_directory

from pettingllms.mas.report import render_tabs
from pettingllms.mas.run import report_data
from pettingllms.ui.page import PAGE

MAX_QUESTION_CHARS = 4000
MAX_QUEUED = 8
TOKEN_COOKIE = "pettingllms_demo_token"
_RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


class _Runs:
    """Run states and the worker that plays them in order."""

    def __init__(self, run_query_fn: Callable, runs_dir: Path) -> None:
        self.run_query_fn, self.runs_dir = run_query_fn, runs_dir
        self.states: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.todo: queue.Queue = queue.Queue()
        threading.Thread(target=self._work, name="mas-demo-worker", daemon=True).start()

    def submit(self, question: str) -> str:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        with self.lock:
            self.states[run_id] = {"run_id": run_id, "state": "queued", "question": question,
                                   "progress": {"stage": "queued"}, "started": time.time()}
        self.todo.put(run_id)
        return run_id

    def queued(self) -> int:
        with self.lock:
            return sum(s["state"] in ("queued", "running") for s in self.states.values())

    def get(self, run_id: str) -> dict | None:
        with self.lock:
            state = self.states.get(run_id)
            return dict(state) if state else None

    def _update(self, run_id: str, **fields) -> None:
        with self.lock:
            self.states[run_id].update(fields)

    def _work(self) -> None:
        while True:
            run_id = self.todo.get()
            state = self.get(run_id)
            self._update(run_id, state="running", started=time.time())
            try:
                result = self.run_query_fn(state["question"], self.runs_dir / run_id,
                                           lambda event: self._update(run_id, progress=event))
                data = report_data(result)
                files = sorted(p.name for p in (self.runs_dir / run_id).iterdir())
                self._update(run_id, state="done", result=data["summary"], html=render_tabs(data),
                             artifacts=[f"/runs/{run_id}/{name}" for name in files])
            except Exception as e:  # noqa: BLE001 - an engine failure ends this run, not the server
                self._update(run_id, state="error", error=f"{type(e).__name__}: {e}")


def _error(status: int, message: str):
    response = jsonify({"error": message})
    response.status_code = status
    return response


def _require_token(app: Flask, token: str) -> None:
    """Every request carries the token (header, cookie, or ?token= which then sets the cookie)."""
    @app.before_request
    def check():
        bearer = request.headers.get("Authorization", "")
        given = (bearer[len("Bearer "):] if bearer.startswith("Bearer ") else "") \
            or request.cookies.get(TOKEN_COOKIE) or request.args.get("token", "")
        if not secrets.compare_digest(given.encode(), token.encode()):
            return _error(401, "this demo needs its token: open the address it printed (.../?token=...) "
                               "or send 'Authorization: Bearer <token>'")
        g.token_from_query = request.args.get("token") == token

    @app.after_request
    def remember(response):
        if g.get("token_from_query"):
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
        return response


def create_app(run_query_fn: Callable, runs_dir: str | Path, info: dict | None = None,
               token: str | None = None) -> Flask:
    runs_dir = Path(runs_dir).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    app = Flask("pettingllms.ui")
    if token:
        _require_token(app, token)
    runs = _Runs(run_query_fn, runs_dir)
    info = dict(info or {})

    @app.get("/")
    def page():
        return PAGE, 200, {"Content-Type": "text/html; charset=utf-8"}

    @app.get("/api/health")
    def health():
        return jsonify({"status": "ok", **info, "queued": runs.queued()})

    @app.post("/api/run")
    def run():
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return _error(400, "expected a JSON object like {\"question\": \"...\"}")
        question = body.get("question")
        if not isinstance(question, str) or not question.strip():
            return _error(400, "'question' must be a non-empty string")
        if len(question) > MAX_QUESTION_CHARS:
            return _error(413, f"'question' is longer than {MAX_QUESTION_CHARS} characters")
        unknown = sorted(set(body) - {"question"})
        if unknown:
            return _error(400, f"unknown fields {unknown}; only 'question' is accepted")
        if runs.queued() >= MAX_QUEUED:
            return _error(429, "too many queries waiting; try again when one has finished")
        run_id = runs.submit(question.strip())
        return jsonify({"run_id": run_id, "status_url": f"/api/runs/{run_id}"}), 202

    @app.get("/api/runs/<run_id>")
    def run_state(run_id: str):
        state = runs.get(run_id) if _RUN_ID.match(run_id) else None
        if state is None:
            return _error(404, f"no run {run_id!r}")
        state["elapsed_s"] = round(time.time() - state["started"], 1)
        return jsonify(state)

    @app.get("/runs/<path:name>")
    def artifact(name: str):
        # send_from_directory refuses anything that resolves outside runs_dir (404)
        if ".." in name.split("/") or name.startswith("/"):
            abort(404)
        return send_from_directory(runs_dir, name)

    @app.errorhandler(404)
    def not_found(e):
        return _error(404, "not found")

    @app.errorhandler(405)
    def not_allowed(e):
        return _error(405, "method not allowed")

    return app
