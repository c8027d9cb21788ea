"""rollout.engine=vllm on the tiny model (head_dim 32, fp32): logprobs, weight sync (LoRA and full),
two L2 adapters. One engine for the module: two vllm.LLMs (the LoRA policies share one base; the
full fine-tuned policy has its own), enforce_eager, 1 GiB of CPU KV cache each.

Tolerance: fp32 everywhere; vLLM's CPU kernels and HF's eager forward reduce in different orders
over a 64-wide hidden state and 2 layers, so per-token logprobs agree to ~1e-5; 2e-3 leaves room
for other CPUs' kernels while any wrong distribution (raw instead of processed logprobs at
T=0.7, a missing top-k renormalisation, stale weights) is off by 1e-1 or more.
"""
from __future__ import annotations

import math

import flask  # noqa: F401 - the demo imports it; vLLM must start in such a process too

import pytest
import torch

from pettingllms.config import VLLMConfig
from pettingllms.trainer.assemble import build_policy_set
from pettingllms.policies.logprobs import pack, response_logprobs
from pettingllms.records import Sample
from pettingllms.rollout.engines import GenerationRequest, SamplingParams
from pettingllms.utils.models import load_causal_lm
from policy_helpers import TINY, make_cfg, make_samples, update_all

ATOL = 2e-3
AGENTS = ["tool", "reasoner"]
PROMPT = [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def engine():
    from pettingllms.rollout.engines.vllm import VLLMEngine

    eng = VLLMEngine({"tool": TINY, "reasoner": TINY, "shared": TINY},
                     VLLMConfig(enforce_eager=True, cpu_kvcache_gib=1, max_num_seqs=16),
                     lora_ranks={"tool": 4, "reasoner": 4}, dtype="float32", seed=0, max_prompt_tokens=128,
                     max_new_tokens=16)
    yield eng
    eng.close()


def _ask(engine, policy, n=2, seed=7, **params):
    p = SamplingParams(n=n, seed=seed, max_new_tokens=params.pop("max_new_tokens", 12), **params)
    return engine.generate([GenerationRequest(PROMPT, policy=policy, params=p, request_id=policy)])[0]


def _teacher_forced(model, completions, temperature=1.0, top_k=0, penalty=1.0):
    """Per-token logprobs of each completion under `model`, with the sampler's processing (the
    repetition penalty on the prompt and the reply so far, then the temperature, then top-k)."""
    out = []
    for c in completions:
        ids = torch.tensor([c.prompt_ids + c.response_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(c.prompt_ids) - 1:-1].float()
        for t in range(len(logits)) if penalty != 1.0 else ():
            seen = torch.tensor(sorted(set(c.prompt_ids) | set(c.response_ids[:t])))
            v = logits[t, seen]
            logits[t, seen] = torch.where(v > 0, v / penalty, v * penalty)
        logits = logits / temperature
        if top_k:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(c.response_ids)[:, None]).squeeze(1)
        out.append(lp)
    return out


def test_returns_own_ids_n_candidates_stop_strings_and_seeded_samples(engine):
    comps = _ask(engine, "shared", n=3, temperature=1.0)
    assert [c.index for c in comps] == [0, 1, 2] and all(c.response_ids for c in comps)
    assert all(len(c.logprobs) == len(c.response_ids) and c.finish_reason in ("stop", "length") for c in comps)
    assert comps[0].prompt_ids == comps[1].prompt_ids and len({tuple(c.response_ids) for c in comps}) > 1
    again = _ask(engine, "shared", n=3, temperature=1.0)  # same per-request seed: same samples
    assert [c.response_ids for c in again] == [c.response_ids for c in comps]
    other = _ask(engine, "shared", n=3, temperature=1.0, seed=8)
    assert [c.response_ids for c in other] != [c.response_ids for c in comps]
    # a stop string cuts the text and ends the completion
    word = comps[0].text.strip()[:2]
    if word:
        cut = _ask(engine, "shared", n=3, temperature=1.0, stop=[word])
        assert word not in cut[0].text and cut[0].finish_reason == "stop"


@pytest.mark.parametrize("temperature,top_k,penalty", [(0.7, 0, 1.0), (1.0, 5, 1.0), (1.0, 0, 1.3)])
def test_logprobs_are_those_of_the_distribution_sampled_from(engine, temperature, top_k, penalty):
    """processed_logprobs: after the repetition penalty too (docs/algorithm.md)."""
    comps = _ask(engine, "shared", n=4, temperature=temperature, top_k=top_k, max_new_tokens=16,
                 repetition_penalty=penalty)
    model = load_causal_lm(TINY, torch.float32)
    for c, ref in zip(comps, _teacher_forced(model, comps, temperature, top_k, penalty)):
        assert torch.isfinite(ref).all()
        torch.testing.assert_close(torch.tensor(c.logprobs), ref, rtol=0, atol=ATOL)


def _as_samples(agent, comps):
    return [Sample(agent=agent, turn=0, problem_id="p", episode_id=f"e{i}", prompt_ids=c.prompt_ids,
                   response_ids=c.response_ids, logprobs=c.logprobs, candidate=i) for i, c in enumerate(comps)]


def test_lora_sync_reflects_each_adapter_and_two_adapters_differ(engine):
    ps = build_policy_set(make_cfg({"agents_mode": "per_agent_lora"}), AGENTS)
    for step in range(2):  # different updates for the two adapters
        update_all(ps, make_samples("tool", [1.0, -1.0, 0.5], seed=60 + step)
                  + make_samples("reasoner", [-1.0, 1.0, -0.5], seed=70 + step), step)
    before = _ask(engine, "tool", temperature=1.0)
    for w in ps.workers.values():
        engine.update_weights(w.weight_update())
    tool, reasoner = _ask(engine, "tool", temperature=1.0), _ask(engine, "reasoner", temperature=1.0)
    assert [c.response_ids for c in tool] != [c.response_ids for c in before]  # the sync took effect
    assert [c.response_ids for c in tool] != [c.response_ids for c in reasoner]  # same prompt and seed
    for name, comps in (("tool", tool), ("reasoner", reasoner)):  # each served by its own adapter
        mine = ps.workers[name].logprobs(_as_samples(name, comps))
        for c, ref in zip(comps, mine):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(ref), rtol=0, atol=ATOL)
    # a second sync replaces the adapter version (not stacked on it)
    update_all(ps, make_samples("tool", [1.0, -1.0], seed=80), 2)
    engine.update_weights(ps.workers["tool"].weight_update())
    comps = _ask(engine, "tool", temperature=1.0)
    for c, ref in zip(comps, ps.workers["tool"].logprobs(_as_samples("tool", comps))):
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(ref), rtol=0, atol=ATOL)


@pytest.mark.parametrize("via", ["tensors", "file"])
def test_full_weight_sync_reloads_in_place(engine, tmp_path, via):
    """Full weights as tensors (an in-process worker) or as a file each vLLM worker reads itself
    (trainer.backend=verl: only the path crosses the driver)."""
    from pettingllms.rollout.engines.weights import WeightUpdate, write_full_weights

    ps = build_policy_set(make_cfg(), ["solo"])
    worker = ps.workers["shared"]
    before = _ask(engine, "shared", temperature=1.0)
    for step in range(2):  # other samples per case: each case moves the engine's weights again
        worker.update(make_samples("solo", [1.0, -1.0, 0.5], seed=90 + 5 * (via == "file") + step), step)
    update = worker.weight_update()
    if via == "file":
        folder = write_full_weights(update.tensors, tmp_path / "v2", torch.float32)
        update = WeightUpdate(update.policy, "full", {}, version=update.version, path=str(folder))
    engine.update_weights(update)
    after = _ask(engine, "shared", temperature=1.0)
    assert [c.response_ids for c in after] != [c.response_ids for c in before]
    for c, ref in zip(after, worker.logprobs(_as_samples("solo", after))):
        assert all(math.isfinite(x) for x in c.logprobs)
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(ref), rtol=0, atol=ATOL)


def test_bad_input_is_one_clear_error(engine):
    with pytest.raises(ValueError, match="unknown policy"):
        _ask(engine, "nobody")
    with pytest.raises(ValueError, match="bad sampling params"):
        _ask(engine, "shared", temperature=-1.0)


@pytest.mark.parametrize("setting, preset, expect", [
    (0, {}, {"OMP_NUM_THREADS": "3", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}),
    (2, {}, {"OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}),
    (0, {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"},  # the user's variables win
     {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}),
    (-1, {}, {"OMP_NUM_THREADS": None, "VLLM_CPU_OMP_THREADS_BIND": None}),  # vLLM's own default
])
def test_cpu_threads_setting_reaches_vllms_environment(monkeypatch, setting, preset, expect):
    import os

    from pettingllms.rollout.engines import vllm as vllm_engine

    for k in ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND"):
        monkeypatch.delenv(k, raising=False)
    for k, v in preset.items():
        monkeypatch.setenv(k, v)
    threads = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    vllm_engine._set_cpu_threads(setting)
    assert {k: os.environ.get(k) for k in expect} == expect
    assert threads == ([setting] if setting > 0 else [])


@pytest.mark.slow
def test_seeded_batch_that_outgrows_one_step_runs_on_cpu_and_repeats():
    """64 seeded requests with ~250-token prompts (~16k prompt tokens) in one call, on the embedded
    model: four times vLLM-CPU's default step budget (4,096 tokens), so with chunked prefill on
    some prefill is split over steps. vLLM 0.31 then rewinds that request's seeded generator in
    vllm/v1/worker/gpu_model_runner.py `GPUModelRunner._bookkeeping_sync`
    (`gen.set_offset(gen.get_offset() - 4)`), which raises "CPU Generator does not use offset" on
    CPU. The engine's rollout.vllm.cpu_prefill (engines/vllm.py `_cpu_prefill`) keeps every
    prefill whole; an upgrade of vllm-cpu that changes either side fails here. Same seeds, same
    tokens: the second call (prefix cache warm) samples exactly the first call's tokens.
    Cost: ~25 s engine start + ~40 s for the two calls on 2 cores."""
    import inspect

    from vllm.platforms import current_platform
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from pettingllms.rollout.engines.vllm import VLLMEngine, _cpu_prefill

    # the path this protects; a vllm-cpu that moves it needs _cpu_prefill re-checked
    assert "gen.set_offset(gen.get_offset() - 4)" in inspect.getsource(GPUModelRunner._bookkeeping_sync)
    assert current_platform.is_cpu() and _cpu_prefill("whole", 1024, 64) == {"enable_chunked_prefill": False}
    eng = VLLMEngine({"p": "embedded:smollm2-135m-instruct"}, VLLMConfig(cpu_kvcache_gib=2, max_num_seqs=64),
                     seed=0, max_prompt_tokens=512, max_new_tokens=8)
    try:
        scheduler = eng._engines[0].llm.llm_engine.vllm_config.scheduler_config
        assert not scheduler.enable_chunked_prefill and scheduler.max_num_batched_tokens == 4096
        requests = []
        for i in range(64):
            text = f"Case {i}. " + " ".join(f"item {i * 31 + j} costs {j} coins," for j in range(40)) + " Total?"
            requests.append(GenerationRequest([{"role": "user", "content": text}], policy="p", request_id=str(i),
                                              params=SamplingParams(temperature=0.7, top_p=0.95, max_new_tokens=8,
                                                                    seed=100 + i)))
        first = eng.generate(requests)
        assert sum(len(c[0].prompt_ids) for c in first) > 3 * scheduler.max_num_batched_tokens
        again = eng.generate(requests)
        assert [c[0].response_ids for c in again] == [c[0].response_ids for c in first]
        assert len({tuple(c[0].response_ids) for c in first}) > 32  # distinct prompts and seeds: distinct samples
        assert all(math.isfinite(x) for c in first for x in c[0].logprobs)
    finally:
        eng.close()
