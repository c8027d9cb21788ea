"""Time from start to the first answer on CPU: the in-process vLLM engine against vLLM's own
OpenAI server started as serve_ui.sh starts it (`python -m vllm.entrypoints.openai.api_server
--enable-lora --enforce-eager --no-enable-chunked-prefill`), on the same ~1,600-token prompt and seed. This is
what picks the demo's default engine on CPU (docs/backends.md, "The demo on CPU").

    .venv/bin/python scripts/bench/bench_first_answer.py
    .venv/bin/python scripts/bench/bench_first_answer.py --model /path/to/hf/folder --port 8791
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

PROMPT = "You design multi-agent systems. " * 200 + "\nQuestion: What is 17 * 23?"
IN_PROCESS = r'''
import sys
if __name__ == "__main__":
    from pettingllms.config import VLLMConfig
    from pettingllms.rollout.engines import GenerationRequest, SamplingParams
    from pettingllms.rollout.engines.vllm import VLLMEngine
    eng = VLLMEngine({"p": sys.argv[1]}, VLLMConfig(), max_prompt_tokens=2048, max_new_tokens=512)
    out = eng.generate([GenerationRequest([{"role": "user", "content": sys.argv[2]}], policy="p",
                        params=SamplingParams(max_new_tokens=32, seed=1))])
    print("ANSWER", len(out[0][0].response_ids))
    eng.close()
'''


def in_process(model: str) -> float:
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", IN_PROCESS, model, PROMPT], capture_output=True, text=True)
    if "ANSWER" not in r.stdout:
        raise RuntimeError(r.stderr[-2000:])
    return time.perf_counter() - start


def server(model: str, port: int, log: str) -> tuple[float, float]:
    from pettingllms.utils.models import resolve_model_path

    path = resolve_model_path(model)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4"),
           "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path,
                             "--host", "127.0.0.1", "--port", str(port), "--enable-lora", "--max-lora-rank", "64",
                             "--enforce-eager", "--no-enable-chunked-prefill"], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited; see {log}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        ready = time.perf_counter() - start
        body = json.dumps({"model": path, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 32,
                           "seed": 1}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=600).read()
        return ready, time.perf_counter() - start
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--log", default="/tmp/pettingllms-bench-first-answer.log", help="the server's log")
    args = ap.parse_args(argv)
    first = in_process(args.model)
    load_in = os.getloadavg()[0]
    ready, answered = server(args.model, args.port, args.log)
    result = {"in_process_first_answer_s": round(first, 1), "server_ready_s": round(ready, 1),
              "server_first_answer_s": round(answered, 1),
              "loadavg_1m": [round(load_in, 1), round(os.getloadavg()[0], 1)]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
