"""MetaAgent-X cold start: the synthetic data set, the SFT loss on the policy workers, the SFT run and
its checkpoint as co-training's start, and the design-validity eval script (tiny model)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from script_helpers import load_script
import torch

from policy_helpers import make_cfg, make_samples
from pettingllms.algorithms.loss import sft_nll_loss
from pettingllms.cli.config_loading import load_config
from pettingllms.errors import ConfigError
from pettingllms.envs.autoevol import sft_data
from pettingllms.envs.autoevol.env import design_source
from pettingllms.mas.checks import check_design
from pettingllms.trainer.assemble import build_policy_set
from pettingllms.records import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = [{"id": f"m{i}", "question": f"What is {i} + 1?", "answer": str(i + 1), "source": "toy"}
            for i in range(6)]


_script = load_script


def test_sft_loss_is_the_token_mean_nll_of_the_reply():
    lp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(sft_nll_loss(lp, mask, 3)) == pytest.approx((1 + 2 + 0.5) / 3)
    # two micro-batches over the whole batch's token count add up to the batch's loss
    assert float(sft_nll_loss(lp[:1], mask[:1], 3) + sft_nll_loss(lp[1:], mask[1:], 3)) == pytest.approx(3.5 / 3)


def test_sft_update_trains_on_reply_tokens_only():
    cfg = make_cfg({"trainer": {"lr": 1e-2}})
    worker = build_policy_set(cfg, ["designer", "executor"]).workers["shared"]
    samples = make_samples("designer", [0.0] * 4, seed=3)
    before = worker.logprobs(samples)  # reply tokens only, at temperature 1
    total = sum(len(r) for r in before)
    report = worker.sft_update(samples)
    assert report["nll"] == pytest.approx(-sum(sum(r) for r in before) / total, rel=1e-4)
    assert report["num_tokens"] == total == sum(len(s.response_ids) for s in samples)
    for _ in range(3):
        last = worker.sft_update(samples)
    assert last["nll"] < report["nll"]  # it learns the replies


def test_designer_rows_are_valid_template_designs():
    rows = sft_data.designer_rows(PROBLEMS, seed=1, per_problem=2)
    assert len(rows) == 12 and all(r["synthetic"] and r["agent"] == "designer" for r in rows)
    assert {r["source"].split(":")[1] for r in rows} <= set(sft_data.DEFAULT_TEMPLATES)
    for r in rows:
        source = design_source(r["reply"])
        assert source and check_design(source) == [], r["source"]
        assert r["messages"][-1]["content"].count(f"What is {r['problem_id'][1:]} + 1?") == 1
    assert rows == sft_data.designer_rows(PROBLEMS, seed=1, per_problem=2)  # seeded
    with pytest.raises(ValueError, match="unknown templates"):
        sft_data.designer_rows(PROBLEMS, templates=["nope"])


def _data(tmp_path):
    out = tmp_path / "datasets" / "autoevol_toy"
    out.mkdir(parents=True)
    pd.DataFrame(PROBLEMS).to_parquet(out / "train.parquet")
    pd.DataFrame(PROBLEMS[:3]).to_parquet(out / "test.parquet")
    return ["model=tiny", "env.data=autoevol_toy", f"env.data_root={tmp_path / 'datasets'}",
            "rollout.sampling.max_new_tokens=8", "rollout.max_prompt_tokens=256"]


@pytest.mark.slow
def test_build_sft_then_cotrain_from_it_and_measure_validity(tmp_path, capsys):
    common = _data(tmp_path)
    build = _script("scripts/dataprocess/build_autoevol_sft.py")
    assert build.main(["--out", str(tmp_path / "sft"), "--problems", "4", "--trace-problems", "1",
                       "--executions", "1", *common]) == 0
    rows = list(read_jsonl(tmp_path / "sft" / "train.jsonl"))
    report = json.loads((tmp_path / "sft" / "report.json").read_text())
    assert report["designer_rows"] == 4 and report["traces/ran_fraction"] == 1.0 and report["synthetic"]
    assert len(rows) == 4 + report["executor_rows"]

    from pettingllms.trainer.sft import run_sft
    cfg = load_config("autoevol_sft", [*common, f"sft.data={tmp_path / 'sft' / 'train.jsonl'}", "sft.epochs=2",
                                       "sft.batch_size=2", f"trainer.output_dir={tmp_path / 'out'}",
                                       "trainer.run_name=sft", "trainer.logging.log_tensorboard=false"])
    run_dir = run_sft(cfg)
    console = capsys.readouterr().out  # one SFT line per step, counted against the SFT's own steps
    assert "sft step 1/4 epoch 0 shared: nll" in console and "sft step 4/4 epoch 1" in console
    assert "reward" not in console
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 4 and all(m["sft/nll"] > 0 for m in metrics)
    assert (run_dir / "checkpoints" / "step_000004" / "policies" / "shared" / "adapter").is_dir()

    # co-training from the LoRA cold start with a full-FT policy: the adapter is merged in
    from pettingllms.policies.lora import SharedLoraBase  # noqa: F401
    from pettingllms.trainer import checkpoint as ckpt_io
    full = load_config("autoevol_cotrain", [*common, "model.lora.enabled=false"])
    worker = build_policy_set(full, ["designer", "executor"]).workers["shared"]
    base = worker.trainable_state()
    ckpt_io.load_policies(ckpt_io.resolve_checkpoint(str(run_dir), "trainer.checkpoint.init_from"), {"shared": worker},
                          weights_only=True)
    merged = worker.trainable_state()
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed and all("proj" in k for k in changed)  # exactly the LoRA-targeted weights moved

    validity = _script("scripts/evaluate/autoevol/design_validity.py")
    out = tmp_path / "validity.json"
    assert validity.main(["--problems", "2", "--checkpoint", str(run_dir), "--out", str(out), *common]) == 0
    result = json.loads(out.read_text())
    assert result["problems"] == 2 and len(result["rows"]) == 2
    assert 0.0 <= result["validity"] <= result["passes_checks"] <= result["has_design"] <= 1.0
    assert "valid (runs to an answer)" in capsys.readouterr().out


def test_sft_bad_inputs_fail_clearly(tmp_path):
    from pettingllms.trainer.sft import load_rows
    common = _data(tmp_path)
    cfg = load_config("autoevol_sft", [*common, f"sft.data={tmp_path / 'missing.jsonl'}"])
    with pytest.raises(ConfigError, match="build_autoevol_sft"):
        load_rows(cfg, ["designer", "executor"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"agent": "critic", "messages": [], "reply": "x"}) + "\n")
    with pytest.raises(ConfigError, match="critic"):
        load_rows(load_config("autoevol_sft", [*common, f"sft.data={bad}"]), ["designer", "executor"])
    validity = _script("scripts/evaluate/autoevol/design_validity.py")
    assert validity.main(["--config-name", "tiny_test", "--problems", "1"]) == 2


def test_sft_continues_from_init_from(tmp_path):
    """trainer.checkpoint.init_from: SFT starts from that checkpoint's weights (at lr 1e-20 two Adam steps move
    each weight by at most ~2e-20, so they come out as they went in)."""
    from safetensors.torch import load_file

    from cold_start import make_cold_start
    from pettingllms.trainer.checkpoint import latest_checkpoint

    def adapter(run):
        return load_file(str(latest_checkpoint(run) / "policies" / "shared" / "adapter" / "adapter_model.safetensors"))

    first = adapter(make_cold_start(tmp_path, "tiny:sft-init", run_name="first"))
    again = adapter(make_cold_start(tmp_path, "tiny:sft-init", run_name="again",
                                    overrides=(f"trainer.checkpoint.init_from={tmp_path / 'autoevol_sft' / 'first'}", "trainer.optim.lr=1e-20")))
    assert set(first) == set(again)
    for k in first:
        torch.testing.assert_close(again[k], first[k], rtol=0, atol=1e-18)
    # not a fresh adapter (peft starts lora_B at zero; from there lr 1e-20 would leave it below 1e-18)
    assert max(float(v.abs().max()) for k, v in again.items() if ".lora_B." in k) > 1e-4
