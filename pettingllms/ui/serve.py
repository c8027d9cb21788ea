"""Entry points of the demo: the web server and the one-query report.

    python -m pettingllms.ui.serve [--config-name mas_demo] [key=value ...]   (HOST, PORT, RUNS_DIR,
                                                                              DEMO_TOKEN)
    python -m pettingllms.ui.demo  [--config-name mas_demo] [key=value ...]   (QUESTION, RUNS_DIR)

The model and engine come from the experiment config (`model.path`, `rollout.engine`,
`rollout.openai.*`); the weights from `mas.checkpoint` (pettingllms/ui/weights.py: by default the
MetaAgent-X cold start when one was made on that model, else the base model; designer and
executor are one shared policy or one policy each), and `mas.*` sets budgets, attempts and
sampling. scripts/evaluate/autoevol/serve_ui.sh picks the
engine (a running OpenAI-compatible server, a vLLM server it starts, or the in-process vLLM or HF
engine); /api/health and the page name it.
The server binds HOST=127.0.0.1 by default; any other HOST needs a token on every request
(DEMO_TOKEN, or a fresh one printed in the address; docs/security.md).
"""
from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from omegaconf import DictConfig

from pettingllms.cli.app import JobInfo, run_main
from pettingllms.errors import ConfigError
from pettingllms.utils.net import is_loopback

DEFAULT_RUNS_DIR = "outputs/autoeval_interactive"  # where the seed README says the demo writes


def query_runner(cfg: DictConfig) -> tuple[Callable, dict, Callable[[], None]]:
    """(run_query_fn(question, out_dir, progress), info for /api/health, close)."""
    from pettingllms.mas.run import run_query
    from pettingllms.sandbox import configure_sandbox, sandbox_backend, sandbox_refusal
    from pettingllms.trainer.assemble import demo_config
    from pettingllms.ui.weights import build_demo_engine, demo_weights

    if cfg.get("policies"):
        raise ConfigError("the demo takes its policies from mas.checkpoint (one shared policy, or one per "
                          "role in a checkpoint); set no `policies`")
    configure_sandbox(bool(cfg.sandbox.allow_weak))  # designs are LLM-written code
    backend = sandbox_backend()
    refused = sandbox_refusal(backend)
    if refused:
        raise ConfigError(f"the demo runs designs in the sandbox, and here {refused}")
    weights = demo_weights(cfg)
    for line in weights.skipped:
        print(f"mas.checkpoint=auto passed over {line}", file=sys.stderr, flush=True)
    print(f"weights: {weights.note}", file=sys.stderr, flush=True)
    engine = build_demo_engine(cfg, weights)
    designer, executor = weights.roles["designer"], weights.roles["executor"]

    def run(question: str, out_dir: Path, progress=None):
        return run_query(question, engine, designer, engine, executor, out_dir, cfg.mas,
                         seed=int(cfg.seed), progress=progress, weights=weights.note)

    demo = demo_config(cfg)
    # the page names the engine, and for a server its address: which process answers is visible
    engine_name = demo.engine + (f" at {demo.server}" if demo.server else "")
    info = {"designer": demo.base, "executor": demo.base, "weights": weights.note, "engine": engine_name,
            "sandbox": backend.kind + (f" ({backend.confinement})" if backend.confinement else "")
            + (" (weaker: " + "; ".join(backend.weaker) + ")" if backend.weaker else "")}
    return run, info, engine.close


def _serve(cfg: DictConfig, job: JobInfo | None = None) -> int:
    from pettingllms.ui.app import create_app

    host, port = os.environ.get("HOST", "127.0.0.1"), os.environ.get("PORT", "8899")
    if not port.isdigit():
        raise ConfigError(f"PORT must be a number, got {port!r}")
    token, told = demo_token(host)
    run, info, close = query_runner(cfg)
    app = create_app(run, os.environ.get("RUNS_DIR", DEFAULT_RUNS_DIR), info, token=token)
    address = f"http://{host}:{port}/" + (f"?token={token}" if told else "")
    print(f"MetaAgent-X demo on {address} ({info['weights']})"
          + (" (token from DEMO_TOKEN)" if token and not told else ""), flush=True)
    try:
        app.run(host=host, port=int(port), threaded=True, use_reloader=False)
    finally:
        close()
    return 0


def demo_token(host: str) -> tuple[str | None, bool]:
    """(the token every request must carry or None, whether it is new and to be printed):
    DEMO_TOKEN when set; else a fresh one when HOST is not loopback (serving outside this
    machine is an opt-in, and the demo runs model-written code); else None."""
    given = os.environ.get("DEMO_TOKEN", "").strip()
    if given:
        return given, False
    return (None, False) if is_loopback(host) else (secrets.token_urlsafe(24), True)


def _one_query(cfg: DictConfig, job: JobInfo | None = None) -> int:
    question = os.environ.get("QUESTION", "").strip()
    if not question:
        raise ConfigError('set QUESTION="..." (the question to answer)')
    run, _, close = query_runner(cfg)
    out = Path(os.environ.get("RUNS_DIR", DEFAULT_RUNS_DIR)) / time.strftime("%Y%m%d-%H%M%S-demo")
    try:
        result = run(question, out, lambda e: print(f"  {e}", file=sys.stderr, flush=True))
    finally:
        close()
    print(f"{'ok' if result.ok else 'failed'}: {result.answer if result.ok else result.error}")
    print(Path(result.report).resolve())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(argv, prog="pettingllms.ui.serve", default_config="mas_demo",
                    what="Serve the MetaAgent-X demo (HOST, PORT, RUNS_DIR, DEMO_TOKEN from the environment).",
                    kind="serve", body=_serve)


def demo_main(argv: Sequence[str] | None = None) -> int:
    return run_main(argv, prog="pettingllms.ui.demo", default_config="mas_demo",
                    what="Answer QUESTION with a designed multi-agent system; print the report path.",
                    kind="demo", body=_one_query)


if __name__ == "__main__":
    sys.exit(main())
