"""The pre-flight plan (issue 28, d): it prints for every config without loading a model, and its
parameter, gradient and AdamW bytes are a real policy worker's, exactly."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pettingllms.cli.config_loading import load_config
from pettingllms.plan import plan_for
from pettingllms.policies import resolve_policies
from pettingllms.policies.worker import PolicyWorker
from pettingllms.trainer.assemble import mapping_config, worker_settings
from policy_helpers import make_samples

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
GIB = 1024 ** 3


def test_plan_prints_for_every_config_without_loading_a_model(monkeypatch):
    import transformers

    def refuse(*a, **k):
        raise AssertionError("the plan loaded a model's weights")
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))
    for name in CONFIGS:
        plan = plan_for(load_config(name), gpus=0, gpu_bytes=80 * GIB, host_bytes=24 * GIB)
        assert plan.lines[0].startswith("pre-flight plan:") and plan.lines[-1].startswith("  verdict:"), name
        assert plan.policies, name  # every policy's memory estimated (configs use embedded/tiny models)


def test_plan_places_verl_ranks_and_spreads_engines():
    cfg = load_config("math_L3_model", ["trainer=verl", "trainer.n_gpus_per_node=8", "rollout.engine=vllm"])
    plan = plan_for(cfg, gpus=8, gpu_bytes=80 * GIB, host_bytes=64 * GIB)
    assert plan.verl_ask.total == {"CPU": 16.0, "GPU": 8.0}
    engines = {d for d, items in plan.devices.items() if any("vLLM engine" in i for i in items)}
    assert engines == {"node0:gpu0", "node0:gpu1"}  # one engine per model, not both on cuda:0
    small = plan_for(cfg, gpus=8, gpu_bytes=int(2 * GIB), host_bytes=64 * GIB)
    assert not small.fits and "trainer.micro_batch_size" in small.lines[-1]


def test_plan_cli_exit_codes():
    r = subprocess.run([sys.executable, "-m", "pettingllms.plan", "--config-name", "tiny_test", "--gpus", "0"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "verdict: fits" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "pettingllms.plan", "--config-name", "tiny_test", "rollout.kk=1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown config key 'rollout.kk'")


def _measured(cfg) -> dict[str, int]:
    """A real local policy worker after one update: its parameter, gradient and AdamW state bytes
    (exp_avg + exp_avg_sq; the per-tensor `step` scalars are left out)."""
    spec = next(iter(resolve_policies(mapping_config(cfg), ["a"]).specs.values()))
    worker = PolicyWorker(spec, worker_settings(cfg, "cpu"))
    worker.update(make_samples("a", [1.0, -1.0, 0.5, -0.5]), step=1)
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    state = worker.optimizer.state.values()
    return {"weights": nbytes(worker.model.parameters()),
            "grads": nbytes(p for p in worker._params),  # a gradient per trainable parameter, same dtype
            "optimizer": nbytes(t for s in state for k, t in s.items() if k != "step" and torch.is_tensor(t))}


def _planned(cfg) -> dict[str, int]:
    plan = plan_for(cfg, gpus=0, gpu_bytes=80 * GIB, host_bytes=64 * GIB)
    m = next(iter(plan.policies.values()))
    return {"weights": m.weights, "grads": m.grads, "optimizer": m.optimizer}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_plan_bytes_match_a_real_worker_tiny(lora):
    cfg = load_config("tiny_test", [f"model.lora.enabled={str(lora).lower()}", "model.lora.rank=4"])
    assert _planned(cfg) == _measured(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_plan_bytes_match_a_real_worker_embedded(lora):
    cfg = load_config("tiny_test", ["model=embedded", f"model.lora.enabled={str(lora).lower()}",
                                    "trainer.micro_batch_size=2"])
    assert _planned(cfg) == _measured(cfg)
