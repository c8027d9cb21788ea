"""trainer.logging.logger: every sink gets the same step metrics; W&B offline and MLflow's local store
are read back from the run folder; a resumed run continues the same W&B / MLflow run."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pettingllms.errors import ConfigError
from pettingllms.trainer.loggers import check_loggers, mlflow_name, scalars, selected_sinks
from trainer_fixtures import trainer_cfg

ROOT = Path(__file__).resolve().parents[1]


def test_sink_selection_and_checks(tmp_path):
    cfg = trainer_cfg(tmp_path, "trainer.logging.logger=[console,tensorboard]")
    assert selected_sinks(cfg.trainer.logging) == ["jsonl", "console", "tensorboard"]  # jsonl is always on
    cfg = trainer_cfg(tmp_path, "trainer.logging.logger=[console,tensorboard]", "trainer.logging.log_tensorboard=false")
    assert selected_sinks(cfg.trainer.logging) == ["jsonl", "console"]
    with pytest.raises(ConfigError, match="unknown trainer.logging.logger entry 'wandbb' \\(did you mean 'wandb'\\?\\)"):
        check_loggers(trainer_cfg(tmp_path, "trainer.logging.logger=[console,wandbb]").trainer.logging.logger)
    assert scalars({"step": 3, "a": 1, "b": float("nan"), "c": "x", "d": True}) == {"a": 1.0}
    assert mlflow_name("val/math/avg@4") == "val/math/avg_4"


def wandb_records(path: Path):
    """Record payloads of a W&B transaction log (`.wandb`: a LevelDB-style log of protobufs)."""
    block, header = 32768, 7
    buf = path.read_bytes()
    assert struct.unpack("<4sHB", buf[:7])[:2] == (b":W&B", 0xBEE1), "not a W&B transaction log"
    pos, parts = 7, []
    while pos + header <= len(buf):
        if block - pos % block < header:  # block trailer padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", buf[pos:pos + header])
        parts.append(buf[pos + header:pos + header + length])
        pos += header + length
        if kind in (1, 4):  # FULL or LAST chunk of a record
            yield b"".join(parts)
            parts = []


def wandb_offline_run(run_dir: Path) -> tuple[str, dict, list[dict]]:
    """Run id, config and logged history rows of the W&B offline run(s) under run_dir."""
    from wandb.proto import wandb_internal_pb2

    rows, ids, config = [], set(), {}
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        for data in wandb_records(path):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(data)
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                ids.add(rec.run.run_id)
                config.update({u.key: json.loads(u.value_json) for u in rec.run.config.update})
            elif kind == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in rec.history.item})
    assert len(ids) == 1, ids
    return ids.pop(), config, rows


def mlflow_runs(run_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    return client, runs


@pytest.mark.slow  # two tiny runs in subprocesses, each importing wandb and mlflow
def test_tiny_run_logs_to_every_sink_and_resume_continues(tmp_path):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from test_cli_hydra import tiny_args  # the same tiny CLI run
    data = tmp_path / "data"
    subprocess.run([sys.executable, "scripts/dataprocess/load_math.py", "--offline", "--preset", "math_easy",
                    "--out", str(data / "math_easy")], cwd=ROOT, check=True, capture_output=True)
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", WANDB_API_KEY="", HOME=str(tmp_path))  # no key
    base = [sys.executable, "-m", "pettingllms.train", *tiny_args(data, tmp_path / "out"), f"hydra.run.dir={run}",
            "trainer.logging.logger=[console,jsonl,tensorboard,wandb,mlflow]", "trainer.logging.project=pl_test",
            "trainer.checkpoint.save_freq=1"]
    r = subprocess.run(base, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step 1/1 | reward" in r.stdout  # console
    jsonl = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in jsonl] == [1]
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))

    run_id, config, rows = wandb_offline_run(run)
    assert run_id == json.loads((run / "loggers.json").read_text())["wandb"]
    assert [row["_step"] for row in rows] == [1]
    want = scalars(jsonl[0])
    assert {k: rows[0][k] for k in want} == pytest.approx(want)
    assert config["experiment"] == "tiny_test" and config["trainer"]["logging"]["project"] == "pl_test"
    assert config["trainer"]["total_steps"] == 1

    client, runs = mlflow_runs(run)
    assert len(runs) == 1 and runs[0].info.run_name == "run"
    assert runs[0].data.params["trainer.total_steps"] == "1" and runs[0].data.params["experiment"] == "tiny_test"
    got = {mlflow_name(k): v for k, v in runs[0].data.metrics.items()}
    assert got == pytest.approx({mlflow_name(k): v for k, v in want.items()})

    # resume to step 2 in the same folder: the same W&B run id and MLflow run continue
    r = subprocess.run(base + ["trainer.total_steps=2", "trainer.checkpoint.resume=auto",
                                                        "trainer.checkpoint.resume_allow_changes=true"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run_id2, _, rows = wandb_offline_run(run)
    assert run_id2 == run_id and sorted(row["_step"] for row in rows) == [1, 2]
    client, runs = mlflow_runs(run)
    assert len(runs) == 1
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "reward/mean")] == [1, 2]
    assert OmegaConf.load(run / "config.yaml").trainer.total_steps == 2
