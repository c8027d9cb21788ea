"""Every bad config value fails when the config loads: one line naming the key, the value and
what is allowed; the CLI exits 2 before any model or data loads (pettingllms.config.checks)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from pettingllms.cli.config_loading import load_config
from pettingllms.errors import ConfigError
from pettingllms.config.checks import env_option_names
from pettingllms.envs import ENV_REGISTRY

BASE = "tiny_test"


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(BASE, list(overrides))
    message = str(e.value)
    assert "\n" not in message
    return message


def test_env_name():
    assert refused("env.name=maths") == ("invalid value 'maths' for 'env.name' (did you mean 'math'?); "
                                         f"choose one of {', '.join(sorted(ENV_REGISTRY))}")


def test_env_option_checked_against_the_constructor():
    msg = refused("env.name=math", "env.options.bogus=1")
    assert msg.startswith("unknown option 'env.options.bogus' for env 'math'; known: ")
    assert "strict_boxed" in msg and "timeout_s" in msg
    assert "did you mean 'timeout_s'" in refused("env.name=math", "env.options.timeout=1")
    assert "set env.max_turns" in refused("env.options.max_turns=3")


def test_env_option_names_follow_the_class_hierarchy():
    assert {"strict_boxed", "timeout_s", "memory_mb"} <= env_option_names(ENV_REGISTRY["math"])
    assert {"step_penalty", "tool_timeout_s"} <= env_option_names(ENV_REGISTRY["plan_path"])
    assert "max_turns" not in env_option_names(ENV_REGISTRY["math"])
    load_config(BASE, ["env.name=math", "env.options.timeout_s=2.0"])  # a real option passes


def test_rollout_engine():
    from pettingllms.rollout.engines import ENGINE_OPTIONS

    msg = refused("rollout.engine=nope")
    assert msg.startswith("invalid value 'nope' for 'rollout.engine'")
    assert msg.endswith(f"choose one of {', '.join(sorted(ENGINE_OPTIONS))}")


def test_engine_options_are_per_engine():
    msg = refused("rollout.engine_options.devise=cpu")
    assert msg == ("unknown option 'rollout.engine_options.devise' for engine 'hf' (did you mean 'device'?); "
                   "known: cpu_kernels, device, lean_forward, max_batch_size, threads")
    load_config(BASE, ["rollout.engine_options.device=cpu"])


def test_engine_registry_is_extensible(monkeypatch):
    from pettingllms.rollout import engines

    monkeypatch.setitem(engines.ENGINE_OPTIONS, "fancy", frozenset({"gpu_memory"}))
    load_config(BASE, ["rollout.engine=fancy", "rollout.engine_options.gpu_memory=0.5"])
    assert "for engine 'fancy'" in refused("rollout.engine=fancy", "rollout.engine_options.device=cpu")


def test_model_dtype():
    assert refused("model.dtype=bf17").startswith("invalid value 'bf17' for 'model.dtype' (did you mean 'bf16'?)")
    assert "'model.train_dtype'" in refused("model.train_dtype=float8")


@pytest.mark.parametrize("override,key,allowed", [
    ("rollout.k=0", "rollout.k", "must be >= 1"),
    ("rollout.sampling.top_p=0", "rollout.sampling.top_p", "must be in (0, 1]"),
    ("algorithm.dual_clip_c=0.5", "algorithm.dual_clip_c", "must be > 1, or null to disable dual clip"),
    ("trainer.total_steps=-1", "trainer.total_steps", "must be >= 1"),
    ("trainer.optim.lr=0", "trainer.optim.lr", "must be > 0"),
    ("rollout.sampling.temperature=-0.1", "rollout.sampling.temperature", "must be >= 0"),
    ("rollout.batch_size=0", "rollout.batch_size", "must be >= 1"),
    ("rollout.sampling.max_new_tokens=0", "rollout.sampling.max_new_tokens", "must be >= 1"),
    ("trainer.micro_batch_size=0", "trainer.micro_batch_size", "must be >= 1"),
    ("trainer.optim.betas=[0.9,1.5]", "trainer.optim.betas", "must be two numbers in [0, 1)"),
    ("eval.k=0", "eval.k", "must be >= 1"),
    ("eval.batch_problems=0", "eval.batch_problems", "must be >= 1 (or unset: rollout.batch_size)"),
    ("env.max_turns=0", "env.max_turns", "must be >= 1"),
    ("model.lora.rank=0", "model.lora.rank", "must be >= 1"),
    ("algorithm.clip_low=1.5", "algorithm.clip_low", "must be in [0, 1)"),
])
def test_numeric_ranges(override, key, allowed):
    value = override.split("=", 1)[1]
    msg = refused(override)
    assert msg.startswith("invalid value ") and f"for '{key}'; {allowed}" in msg, msg
    assert value.strip("[]").split(",")[0] in msg


def test_dual_clip_can_be_disabled():
    assert load_config(BASE, ["algorithm.dual_clip_c=null"]).algorithm.dual_clip_c is None


def test_per_policy_values():
    assert "for 'policies.tool.lr'; must be > 0" in refused("policies=per_agent_lora", "policies.tool.lr=-1")
    assert "'policies.tool.base'" in refused("policies=per_agent_lora", "policies.tool.base=/nonexistent/m")


def test_model_path_embedded_name():
    assert refused("model.path=embedded:nope") == (
        "invalid value 'embedded:nope' for 'model.path'; choose one of embedded:smollm2-135m-instruct")


def test_model_path_missing_local_folder(tmp_path):
    msg = refused("model.path=/nonexistent/model")
    assert msg.startswith("invalid value '/nonexistent/model' for 'model.path'; no such model folder")
    refused(f"model.path={tmp_path / 'nothing'}")
    refused("model.path=./relative/missing")
    # hub ids stay allowed (resolved when the model loads), as do existing folders
    assert load_config(BASE, ["model.path=HuggingFaceTB/SmolLM2-135M-Instruct"]).model.path.startswith("Hugging")
    load_config(BASE, [f"model.path={tmp_path}"])


def test_corrupt_parquet_is_one_line_naming_the_file(tmp_path):
    from pettingllms.envs.dataset import load_split

    folder = tmp_path / "mine"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ConfigError) as e:
        load_split("mine", "train", tmp_path)
    assert str(e.value).startswith(f"cannot read dataset file {folder / 'train.parquet'}: ")
    assert "\n" not in str(e.value)


def _cli(*args: str, module: str = "pettingllms.train") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module", ["pettingllms.train", "pettingllms.evaluate"])
def test_cli_bad_value_exits_2_and_leaves_no_run_folder(tmp_path, module):
    out = tmp_path / "outputs"
    r = _cli("--config-name", BASE, "rollout.k=0", f"trainer.output_dir={out}", "trainer.run_name=r",
             module=module)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: invalid value 0 for 'rollout.k'; must be >= 1 (candidates per problem, turn and agent)"
    assert "Traceback" not in r.stdout + r.stderr
    assert not out.exists()


def test_cli_corrupt_parquet_exits_2(tmp_path):
    data = tmp_path / "data" / "bad"
    data.mkdir(parents=True)
    for split in ("train", "test"):
        (data / f"{split}.parquet").write_bytes(b"not parquet at all")
    r = _cli("--config-name", BASE, "env.name=math", "env.data=bad", f"env.data_root={tmp_path / 'data'}",
             f"trainer.output_dir={tmp_path / 'out'}", module="pettingllms.evaluate")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "train.parquet" not in lines[0] and "bad/test.parquet" in lines[0]
    assert "Traceback" not in r.stderr
