"""The demo runs the MetaAgent-X cold start when there is one (mas.checkpoint), on the tiny model:
its engine generates exactly what the saved policy's weights generate, not what the base does."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from cold_start import make_cold_start
from pettingllms.cli.config_loading import load_config
from pettingllms.errors import ConfigError
from pettingllms.trainer.assemble import build_policy_set
from pettingllms.rollout.engines import GenerationRequest, SamplingParams
from pettingllms.rollout.engines.hf import HFEngine
from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.ui.weights import build_demo_engine, demo_weights

MODEL = "tiny:demo-weights"


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """output_dir -> its one cold-start run, for a LoRA and a full fine-tuned cold start."""
    out = {}
    for lora in (True, False):
        root = tmp_path_factory.mktemp("lora" if lora else "full")
        out[lora] = (root, make_cold_start(root, MODEL, lora=lora))
    return out


def _demo_cfg(output_dir, *extra):
    return load_config("mas_demo", ["model=tiny", f"model.path={MODEL}", f"trainer.output_dir={output_dir}", *extra])


def _outputs(engine, policy):
    """Sampled tokens and sampler logprobs of two prompts (seeded, so equal weights give equal output)."""
    reqs = [GenerationRequest(messages=[{"role": "user", "content": f"What is {i} + 1?"}], policy=policy,
                              params=SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=7 + i),
                              request_id=f"r{i}") for i in range(2)]
    return [[(c.response_ids, c.logprobs) for c in cs] for cs in engine.generate(reqs)]


def _saved_engine(cfg, ckpt):
    """Reference: a PolicyWorker loaded from the checkpoint, its merged weights in a plain engine."""
    workers = build_policy_set(cfg, ["designer", "executor"]).workers
    ckpt_io.load_policies(ckpt, workers, weights_only=True)
    engine = HFEngine({"shared": MODEL}, dtype=str(cfg.model.dtype))
    engine.load_weights("shared", workers["shared"].generation_weights())
    return engine


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_demo_engine_runs_the_cold_start_checkpoint(cold, lora):
    tmp_path, run = cold[lora]
    ckpt = ckpt_io.latest_checkpoint(run)
    cfg = _demo_cfg(tmp_path, f"model.lora.enabled={str(lora).lower()}")
    assert str(cfg.mas.checkpoint) == "auto"  # the default finds the recipe's output folder
    weights = demo_weights(cfg)
    assert weights.checkpoint == ckpt and weights.roles == {"designer": "shared", "executor": "shared"}
    assert weights.note.startswith(f"cold-start checkpoint {ckpt}")
    assert ("LoRA adapter" if lora else "full weights") in weights.note
    engines = [build_demo_engine(cfg, weights), _saved_engine(cfg, ckpt),
               build_demo_engine(cfg, demo_weights(_demo_cfg(tmp_path, "mas.checkpoint=none")))]
    try:
        demo, saved, base = (_outputs(e, "shared") for e in engines)
    finally:
        for e in engines:
            e.close()
    assert demo == saved  # the checkpoint's weights, bit for bit (fp32 tiny model, same kernels)
    assert demo != base
    # the update moved the model for real: the sampler's logprobs of the first token differ clearly
    assert max(abs(d[0][1][0] - b[0][1][0]) for d, b in zip(demo, base)) > 1e-3


def _copy_run(run, dest, base=None):
    """A copy of a cold-start run folder, optionally relabelled as made on another model."""
    shutil.copytree(run, dest)
    if base:
        for meta in dest.glob("checkpoints/*/policies/*/policy.json"):
            meta.write_text(json.dumps({**json.loads(meta.read_text()), "base": base}))
    return dest


def test_weights_choice_auto_none_path_and_mismatch(cold, tmp_path):
    base = demo_weights(_demo_cfg(tmp_path))
    assert base.checkpoint is None and base.policies == {"shared": None}
    assert base.note == f"base model {MODEL} (no cold-start checkpoint for it under {tmp_path / 'autoevol_sft'})"
    made = cold[True][1]
    other = _copy_run(made, tmp_path / "autoevol_sft" / "other", base="tiny:other")
    auto = demo_weights(_demo_cfg(tmp_path))
    assert auto.checkpoint is None and "tiny:other" in auto.skipped[0]  # made on another model: passed over
    with pytest.raises(ConfigError, match="trained on tiny:other, not model.path=tiny:demo-weights"):
        demo_weights(_demo_cfg(tmp_path, f"mas.checkpoint={other}"))
    with pytest.raises(ConfigError, match="mas.checkpoint=.*not a complete checkpoint"):
        demo_weights(_demo_cfg(tmp_path, f"mas.checkpoint={tmp_path / 'nope'}"))
    mine = _copy_run(made, tmp_path / "autoevol_sft" / "mine")
    assert demo_weights(_demo_cfg(tmp_path)).checkpoint == ckpt_io.latest_checkpoint(mine)
    assert demo_weights(_demo_cfg(tmp_path, "mas.checkpoint=none")).checkpoint is None
    explicit = demo_weights(_demo_cfg(tmp_path, f"mas.checkpoint={mine}"))
    assert explicit.checkpoint == ckpt_io.latest_checkpoint(mine)
    # one policy per role (L2 / L3 cold start): designer and executor keep their own weights
    roles = tmp_path / "roles"
    shutil.copytree(ckpt_io.latest_checkpoint(mine), roles)
    shared = roles / "policies" / "shared"
    shutil.copytree(shared, roles / "policies" / "designer")
    shared.rename(roles / "policies" / "executor")
    split = demo_weights(_demo_cfg(tmp_path, f"mas.checkpoint={roles}"))
    assert split.roles == {"designer": "designer", "executor": "executor"} and "one policy per role" in split.note
    (roles / "policies" / "designer").rename(roles / "policies" / "critic")
    with pytest.raises(ConfigError, match=r"holds policies \['critic', 'executor'\]"):
        demo_weights(_demo_cfg(tmp_path, f"mas.checkpoint={roles}"))


def test_full_checkpoint_cannot_go_to_a_running_server(cold):
    tmp_path, run = cold[False]
    meta = json.loads((ckpt_io.latest_checkpoint(run) / "policies" / "shared" / "policy.json").read_text())
    assert meta["kind"] == "full"
    cfg = _demo_cfg(tmp_path, "rollout.engine=openai")
    with pytest.raises(ConfigError, match="cannot be sent to a running server"):
        build_demo_engine(cfg, demo_weights(cfg))


def test_demo_entry_point_says_which_weights(cold, tmp_path, capsys, monkeypatch):
    """serve_demo.sh's entry: one query on the cold start; the log and the report name the checkpoint."""
    from pettingllms.ui.serve import demo_main

    output_dir, run = cold[True]
    monkeypatch.setenv("QUESTION", "What is 2 + 1?")
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    assert demo_main(["model=tiny", f"model.path={MODEL}", f"trainer.output_dir={output_dir}",
                      "mas.max_attempts=1", "mas.designer_sampling.max_new_tokens=16",
                      "mas.executor_sampling.max_new_tokens=8",
                      f"hydra.run.dir={tmp_path / 'job'}"]) == 0
    captured = capsys.readouterr()
    ckpt = ckpt_io.latest_checkpoint(run)
    assert f"weights: cold-start checkpoint {ckpt}" in captured.err
    report = captured.out.strip().splitlines()[-1]
    result = json.loads((tmp_path / "runs").glob("*/result.json").__next__().read_text())
    assert result["weights"].startswith(f"cold-start checkpoint {ckpt}")
    assert f"Weights: cold-start checkpoint {ckpt}" in open(report).read()
