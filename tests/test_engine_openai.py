"""rollout.engine=openai against a real OpenAI-compatible server started here: vLLM's own server
(`vllm.entrypoints.openai.api_server`) on the tiny model, CPU, eager, 1 GiB KV cache."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
from net_helpers import free_port
from omegaconf import OmegaConf

from pettingllms.config.validate import validate
from pettingllms.errors import ConfigError
from pettingllms.rollout.engines import GenerationRequest, SamplingParams, build_engine, engine_policies
from pettingllms.rollout.engines.base import Completion
from pettingllms.rollout.engines.openai import completion_problem
from pettingllms.utils.models import resolve_model_path

TINY = "tiny:openai-server"
PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]



@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_model_path(TINY),
           "--served-model-name", "tiny", "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
           "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"vLLM server did not start:\n{log.read_text()[-3000:]}")
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _engine(url: str, **openai):
    cfg = validate(OmegaConf.create({"model": {"path": TINY}, "rollout": {"engine": "openai",
                                                                          "openai": {"base_url": url, **openai}}}))
    return build_engine(cfg.rollout, cfg.model, device="cpu", seed=int(cfg.seed),
                        policies=engine_policies(cfg.policies, cfg.model.path))


@pytest.mark.slow
def test_generates_with_token_ids_and_logprobs_from_a_real_server(server):
    engine = _engine(server)  # no model name: the server's first model
    try:
        assert engine.models == {"shared": "tiny"}
        reqs = [GenerationRequest(PROMPT, policy="shared", request_id=str(i),
                                  params=SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=i))
                for i in range(3)]
        out = engine.generate(reqs)
        assert [len(cs) for cs in out] == [2, 2, 2]
        for cs in out:
            for c in cs:
                assert c.prompt_ids and c.response_ids and len(c.logprobs) == len(c.response_ids)
                assert all(lp <= 0 for lp in c.logprobs) and c.finish_reason in ("stop", "length")
        again = engine.generate(reqs[:1])[0]
        assert [c.response_ids for c in again] == [c.response_ids for c in out[0]]  # seeded
        assert engine.training_problem() is None  # vLLM's server returns what training needs
    finally:
        engine.close()


def test_training_refuses_a_server_without_token_ids():
    c = Completion("r", "p", 0, prompt_ids=[], response_ids=[], logprobs=[-0.1], text="hi", finish_reason="stop")
    assert "returns no token ids" in completion_problem(c, "http://x/v1")
    c = Completion("r", "p", 0, prompt_ids=[1], response_ids=[2, 3], logprobs=[-0.1], text="hi", finish_reason="stop")
    assert "1 logprobs for 2 response tokens" in completion_problem(c, "http://x/v1")


def test_unreachable_server_is_one_clear_error():
    with pytest.raises(ConfigError, match="cannot reach"):
        _engine(f"http://127.0.0.1:{free_port()}/v1")
