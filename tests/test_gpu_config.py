"""Config for GPU users (issue 28, c; findings 3, 5, 7, 10): vLLM's GPUs per engine, tensor
parallel and eager mode per device; rollout.engine=auto on CUDA; attention auto; fp16 refused
where no GradScaler runs. The GPU side of these runs in scripts/gpu/smoke.sh."""
from __future__ import annotations

import pytest

from pettingllms.cli.config_loading import load_config
from pettingllms.errors import ConfigError
from pettingllms.rollout import engines
from pettingllms.rollout.engines.vllm_gpu import gpu_kwargs
from pettingllms.utils.placement import attention_for, engine_gpu_ids


def test_vllm_engines_are_spread_over_the_gpus_not_all_on_cuda0():
    # finding 5: L3's two engines with the trainer on cuda:0 of 8 GPUs
    two = [gpu_kwargs(True, 8, "auto", 1, i, 2, trainer_gpu=0) for i in range(2)]
    assert [k["device_ids"] for k in two] == [[1], [2]]
    assert all(k["enforce_eager"] is False and k["tensor_parallel_size"] == 1 for k in two)  # CUDA graphs on GPU
    assert gpu_kwargs(True, 8, "auto", 4, 0, 1, trainer_gpu=0)["device_ids"] == [4, 5, 6, 7]  # finding 8
    assert gpu_kwargs(True, 1, True, 1, 0, 2, trainer_gpu=0) == {"enforce_eager": True, "tensor_parallel_size": 1,
                                                                  "device_ids": [0]}  # one GPU: shared
    assert gpu_kwargs(False, 0, "auto", 1, 0, 1) == {"enforce_eager": True}  # CPU: eager, vLLM's own device
    with pytest.raises(ConfigError, match="tensor_parallel_size=2 needs GPUs"):
        gpu_kwargs(False, 0, "auto", 2, 0, 1)
    with pytest.raises(ConfigError, match="tensor_parallel_size=4: this process sees 2 GPU"):
        engine_gpu_ids(2, 1, 4)


def test_auto_engine_looks_at_cuda_before_the_cpu_batch_rule(monkeypatch):
    import importlib.util

    rollout = load_config("tiny_test", ["rollout.engine=auto", "rollout.k=8"]).rollout  # 16 sequences a call
    assert engines.auto_engine(rollout)[0] == "hf"  # CPU: hf at >= 8 sequences (measured on 2 cores)
    monkeypatch.setattr(engines, "_has_cuda", lambda: True)
    expected = "vllm" if importlib.util.find_spec("vllm") else "hf"
    assert engines.auto_engine(rollout) == (expected, "CUDA is available" if expected == "vllm" else "vllm is not installed")


def test_attention_auto():
    assert attention_for("auto", "cpu") == "sdpa"
    assert attention_for("auto", "cuda") in ("sdpa", "flash_attention_2")  # flash only where flash_attn imports
    assert attention_for("eager", "cuda") == "eager"
    cfg = load_config("tiny_test", ["trainer=verl"])
    assert cfg.trainer.verl.attn_implementation == "auto" and cfg.rollout.vllm.enforce_eager == "auto"
    assert cfg.rollout.vllm.tensor_parallel_size == 1 and cfg.ray.gpus_per_worker == "auto"


@pytest.mark.parametrize("override, ok", [
    ("rollout.vllm.tensor_parallel_size=0", False), ("rollout.vllm.enforce_eager=maybe", False),
    ("rollout.vllm.enforce_eager=false", True), ("ray.gpus_per_worker=-1", False), ("ray.gpus_per_worker=0.5", True),
    ("trainer.verl.attn_implementation=flash", False), ("trainer.verl.place_timeout_s=0", False)])
def test_gpu_keys_are_checked(override, ok):
    if ok:
        load_config("tiny_test", [override])
    else:
        with pytest.raises(ConfigError, match=override.split("=")[0].replace(".", r"\.")):
            load_config("tiny_test", [override])


def test_fp16_on_local_is_refused_in_one_line():
    for key in ("model.dtype", "model.train_dtype"):
        with pytest.raises(ConfigError, match=f"{key}=float16 on trainer.backend=local.*no GradScaler"):
            load_config("tiny_test", [f"{key}=float16"])
    assert str(load_config("tiny_test", ["trainer=verl", "model.dtype=float16"]).model.dtype) == "float16"
