"""model.dtype=auto (issue 29): bf16 only where the hardware computes it natively, else float32;
one resolver for the engine, the policy workers (frozen base, logprobs, reference) and the plan."""
from __future__ import annotations

import logging

import pytest
import torch

from numerics import forward_tol
from pettingllms.cli.config_loading import load_config
from pettingllms.config.schema import ModelConfig
from pettingllms.errors import ConfigError
from pettingllms.utils import precision
from pettingllms.utils.precision import choose_dtype, cpu_flags, resolve_dtype

ZEN2 = frozenset({"fpu", "sse2", "avx", "avx2", "fma", "f16c"})  # AVX2 + FMA, no bf16 arithmetic
ZEN4 = ZEN2 | {"avx512f", "avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN2 | {"avx512f", "amx_tile", "amx_bf16"}


@pytest.fixture
def fake_cpu(monkeypatch):
    """Make this process's CPU look like one with the given flags (and forget what was logged)."""
    monkeypatch.setattr(precision, "_said", set())

    def use(flags: frozenset[str]) -> None:
        monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": flags)
    return use


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu avx2 fma\n\n"
                    "processor\t: 1\nflags\t\t: fpu avx2 fma avx512_bf16\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "fma"}  # the first processor's
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_no_cpu_bf16_env_hides_the_bf16_flags(tmp_path, monkeypatch):
    """PETTINGLLMS_NO_CPU_BF16=1 runs a bf16 box as an AVX2-only one: auto is float32 and the
    AVX512-BF16 kernels stay off; "0" or unset changes nothing."""
    from pettingllms.rollout.engines.hf_runtime import cpu_kernels

    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16\n")
    monkeypatch.setattr(precision, "_said", set())
    monkeypatch.setenv("PETTINGLLMS_NO_CPU_BF16", "0")
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(str(info))
    monkeypatch.setenv("PETTINGLLMS_NO_CPU_BF16", "1")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"}
    assert resolve_dtype("auto", "cpu") == "float32"
    assert not cpu_kernels._cpu_has_avx512_bf16() and not cpu_kernels.available()


@pytest.mark.parametrize("flags,want", [(ZEN2, "float32"), (ZEN4, "bfloat16"), (SAPPHIRE_RAPIDS, "bfloat16"),
                                        (frozenset(), "float32")], ids=["avx2", "avx512_bf16", "amx_bf16", "none"])
def test_auto_on_cpu_follows_native_bf16(flags, want):
    dtype, why = choose_dtype("cpu", flags=flags)
    assert dtype == want
    assert ("native bf16" in why) and (("no native" in why) == (want == "float32"))
    assert resolve_dtype("auto", "cpu", flags=flags) == want


def test_auto_on_gpus():
    assert choose_dtype("cuda", cuda_bf16=True)[0] == "bfloat16"
    assert choose_dtype(torch.device("cuda", 1), flags=ZEN2, cuda_bf16=True)[0] == "bfloat16"  # CPU flags ignored
    assert choose_dtype("cuda:0", flags=ZEN4, cuda_bf16=False)[0] == "float32"  # V100 / T4: no fp16 without a scaler
    assert choose_dtype("meta", flags=ZEN4)[0] == "float32"


def test_explicit_dtypes_are_honoured():
    for name in ("bfloat16", "float32", "bf16", "float16"):
        assert resolve_dtype(name, "cpu", flags=ZEN2) == name
        assert resolve_dtype(name, "cuda", cuda_bf16=False) == name
    assert resolve_dtype(torch.bfloat16) == "bfloat16" and resolve_dtype(torch.float32) == "float32"


def test_the_choice_is_logged_once_with_its_reason(fake_cpu, caplog):
    fake_cpu(ZEN2)
    with caplog.at_level(logging.INFO, logger=precision.__name__):
        for _ in range(3):
            assert resolve_dtype("auto", "cpu") == "float32"
        resolve_dtype("bfloat16", "cpu")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("model.dtype=auto: float32 on cpu (CPU has no native bf16")


def test_config_default_is_auto_and_train_dtype_stays_concrete():
    assert ModelConfig().dtype == "auto"
    assert str(load_config("tiny_test", ["model=embedded"]).model.dtype) == "auto"
    assert str(load_config("tiny_test", ["model.dtype=auto"]).model.dtype) == "auto"
    assert str(load_config("tiny_test", ["model.dtype=bfloat16"]).model.dtype) == "bfloat16"
    with pytest.raises(ConfigError, match="invalid value 'auto' for 'model.train_dtype'"):
        load_config("tiny_test", ["model.train_dtype=auto"])


@pytest.mark.parametrize("flags,want", [(ZEN2, torch.float32), (ZEN4, torch.bfloat16)], ids=["avx2", "avx512_bf16"])
def test_engine_and_worker_resolve_auto_the_same_way(fake_cpu, flags, want):
    """The HF engine's weights, the LoRA worker's frozen base and its autocast follow the CPU."""
    from policy_helpers import make_cfg
    from pettingllms.rollout.engines.hf import HFEngine
    from pettingllms.trainer.assemble import build_policy_set

    fake_cpu(flags)
    engine = HFEngine({"a": "tiny:test"}, dtype="auto")
    assert engine.dtype == str(want).removeprefix("torch.")
    assert {p.dtype for p in engine._slot("a").model.parameters()} == {want}
    worker = build_policy_set(make_cfg(lora=True, dtype="auto"), ["solo"]).workers["shared"]
    assert worker.dtype == want and worker.autocast == (want == torch.bfloat16)
    assert {p.dtype for _, p in worker._lora_base.base_params()} == {want}
    assert {p.dtype for _, p in worker._lora_base.adapter_params("shared")} == {torch.float32}  # train_dtype


def test_auto_fp32_engine_logprobs_keep_the_fp32_tolerance(fake_cpu):
    """On a CPU without bf16, auto gives the engine fp32 weights: its logprobs equal a float32
    teacher-forced forward within `forward_tol`, the tolerance the fp32 engine tests use."""
    from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams
    from pettingllms.rollout.engines.hf import HFEngine
    from pettingllms.utils.models import load_causal_lm

    fake_cpu(ZEN2)
    engine = HFEngine({"a": "tiny:test"}, dtype="auto")
    reference = load_causal_lm("tiny:test", "float32")
    out = engine.generate([GenerationRequest([{"role": "user", "content": "Count: one two"}], policy="a",
                                             params=SamplingParams(temperature=1.0, max_new_tokens=8, seed=3))])[0][0]
    ids = torch.tensor([out.prompt_ids + out.response_ids])
    with torch.no_grad():
        logits = reference(ids).logits[0, len(out.prompt_ids) - 1:-1].float()
    want = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.response_ids)[:, None]).squeeze(1)
    scale = max(abs(x) for x in out.logprobs) + 1.0
    tol = forward_tol(reference.config, ids.shape[1], scale)
    assert out.logprobs == pytest.approx(want.tolist(), abs=tol)


@pytest.mark.parametrize("flags", [ZEN2, ZEN4], ids=["avx2", "avx512_bf16"])
def test_plan_resolves_auto_as_the_worker_does(fake_cpu, flags):
    """The pre-flight plan's bytes for a LoRA worker on model.dtype=auto are the real worker's."""
    from test_plan import _measured, _planned

    fake_cpu(flags)
    cfg = load_config("tiny_test", ["model.dtype=auto", "model.lora.enabled=true", "model.lora.rank=4"])
    assert _planned(cfg) == _measured(cfg)


@pytest.mark.parametrize("flags,want", [(ZEN2, "fp32"), (ZEN4, "bf16")], ids=["avx2", "avx512_bf16"])
def test_verl_compute_dtype_resolves_auto_for_its_ranks_device(fake_cpu, flags, want):
    """verl's FSDP mixed precision (param_dtype: compute) follows the device its ranks run on."""
    pytest.importorskip("verl")
    from policy_helpers import make_cfg
    from pettingllms.policies import resolve_policies
    from pettingllms.policies.verl.setup import training_worker_config
    from pettingllms.trainer.assemble import mapping_config, verl_settings
    from pettingllms.utils.models import resolve_model_path

    fake_cpu(flags)
    cfg = make_cfg({"trainer": {"backend": "verl"}}, dtype="auto")
    spec = next(iter(resolve_policies(mapping_config(cfg), ["a"]).specs.values()))
    settings = verl_settings(cfg)
    config = training_worker_config(settings, spec, resolve_model_path(spec.base), None, "cpu")
    assert config.engine_config.mixed_precision["param_dtype"] == want
    on_gpu = training_worker_config(settings, spec, resolve_model_path(spec.base), None, "cuda")
    assert on_gpu.engine_config.mixed_precision["param_dtype"] == "bf16"  # a bf16 GPU, or none visible here (assumed)


def test_eval_results_name_the_dtype_that_ran(fake_cpu):
    """`pettingllms.evaluate` files results by a hash of their settings: auto counts as what it
    resolves to here, so a bf16 box and a float32 box never share a results file."""
    from pettingllms.evaluate import settings_hash
    from pettingllms.trainer.assemble import model_dtype

    def digest(*over):
        return settings_hash(load_config("tiny_test", ["model=embedded", *over]), "")
    fake_cpu(ZEN2)
    assert model_dtype(load_config("tiny_test", ["model=embedded"])) == "float32"
    assert digest() == digest("model.dtype=float32") != digest("model.dtype=bfloat16")
    assert digest() == digest("eval.progress_s=1")  # how often it reports changes no number
    fake_cpu(ZEN4)
    assert digest() == digest("model.dtype=bfloat16")
