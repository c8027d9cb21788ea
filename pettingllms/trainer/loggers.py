"""Metric sinks, chosen by `trainer.logging.logger` (a list): console, jsonl, tensorboard, wandb, mlflow.

Each sink is one class with `log(metrics)` (one dict per step, `step` included) and
`close()`. `jsonl` is always on: metrics.jsonl is what resume and the results scripts read.

W&B: project `trainer.logging.project`, group `experiment`, run name the run folder's name, the
resolved config as the run config, files under `<run>/wandb/`. With no API key (or no route
to the server) we set `WANDB_MODE=offline`; upload later with `wandb sync <run>/wandb/offline-run-*`.
MLflow: a local SQLite store `<run>/mlflow.db`, artifacts in `<run>/mlartifacts` (override
with MLFLOW_TRACKING_URI), experiment
`experiment`, run name the run folder's name, the config as params and as config.yaml.
Both keep their run id in `<run>/loggers.json`, so a resumed run continues the same run.
"""
from __future__ import annotations

import difflib
import json
import logging
import math
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from pettingllms.config.schema import LoggingConfig
from pettingllms.errors import ConfigError

log = logging.getLogger(__name__)

SINKS = ("console", "jsonl", "tensorboard", "wandb", "mlflow")
IDS_FILE = "loggers.json"


class MetricLogger(Protocol):
    def log(self, metrics: dict[str, Any]) -> None: ...

    def close(self, stopped: str = "") -> None: ...  # stopped: the signal that ended the run early


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a step, without `step` itself."""
    return {k: float(v) for k, v in metrics.items() if k != "step" and finite(v)}


def selected_sinks(logging_cfg: LoggingConfig) -> list[str]:
    names = [str(n) for n in logging_cfg.logger]
    if not bool(logging_cfg.log_tensorboard):  # the older switch still turns TensorBoard off
        names = [n for n in names if n != "tensorboard"]
    return ["jsonl"] + [n for n in dict.fromkeys(names) if n != "jsonl"]


def check_loggers(sinks: Sequence[str]) -> None:
    """Refuse an unknown `trainer.logging.logger` entry before anything starts."""
    for name in sinks:
        if name not in SINKS:
            close = difflib.get_close_matches(str(name), SINKS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown trainer.logging.logger entry '{name}'{hint}; choose from {', '.join(SINKS)}")
    for name, module in (("wandb", "wandb"), ("mlflow", "mlflow")):
        if name in sinks:
            try:
                __import__(module)
            except ImportError:
                raise ConfigError(f"trainer.logging.logger includes {name} but the '{module}' package is not installed "
                                  f"(pip install {module})") from None


# ---------------------------------------------------------------------- sinks
class ConsoleLogger:
    """One summary line per step (under the progress bar when there is one)."""

    def __init__(self, line: Callable[[dict[str, Any]], str], progress_bar: bool) -> None:
        self.line, self.progress_bar = line, progress_bar

    def log(self, metrics: dict[str, Any]) -> None:
        if self.progress_bar:
            from tqdm import tqdm
            tqdm.write(self.line(metrics), file=sys.stderr)
        else:
            print(self.line(metrics), flush=True)

    def close(self, stopped: str = "") -> None:
        pass


class JsonlLogger:
    """metrics.jsonl. On resume the checkpoint's history replaces the file, dropping steps
    logged after that checkpoint (they will be run again)."""

    def __init__(self, path: Path, history: Iterable[dict]) -> None:
        self.path = path
        with self.path.open("w", encoding="utf-8") as f:
            for row in history:
                f.write(json.dumps(row) + "\n")

    def log(self, metrics: dict[str, Any]) -> None:
        from pettingllms.utils.diskio import append_line

        append_line(self.path, json.dumps(metrics, default=float))  # whole, or WriteFailed and no trace

    def close(self, stopped: str = "") -> None:
        pass


class TensorBoardLogger:
    def __init__(self, log_dir: Path, purge_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step)

    def log(self, metrics: dict[str, Any]) -> None:
        step = int(metrics["step"])
        for k, v in scalars(metrics).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self, stopped: str = "") -> None:
        self.writer.close()


def wandb_mode() -> str:
    """WANDB_MODE if set; online with an API key and a route to the server; else offline (and set it)."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    host = urlparse(base).hostname or "api.wandb.ai"
    reason = ""
    if not (os.environ.get("WANDB_API_KEY") or _netrc_has(host)):
        reason = "no W&B API key"
    else:
        try:
            socket.create_connection((host, 443), timeout=3).close()
        except OSError:
            reason = f"cannot reach {host}"
    if not reason:
        return "online"
    os.environ["WANDB_MODE"] = "offline"
    log.warning("W&B: %s, logging offline (WANDB_MODE=offline); upload later with `wandb sync`", reason)
    return "offline"


def _netrc_has(host: str) -> bool:
    import netrc
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbLogger:
    def __init__(self, run_dir: Path, cfg: DictConfig, project: str, run_id: str | None) -> None:
        import wandb

        self.run = wandb.init(project=str(project), group=str(cfg.experiment), name=run_dir.name,
                              id=run_id, resume="allow", dir=str(run_dir), mode=wandb_mode(),
                              config=OmegaConf.to_container(cfg, resolve=True), job_type="train")
        self.run_id = self.run.id

    def log(self, metrics: dict[str, Any]) -> None:
        self.run.log(scalars(metrics), step=int(metrics["step"]))

    def close(self, stopped: str = "") -> None:
        if stopped:  # W&B shows the run as preempted, not crashed; a resume continues it
            self.run.summary["stopped_by"] = stopped
            self.run.mark_preempting()
        self.run.finish()


_MLFLOW_BAD = re.compile(r"[^\w./\- :]")  # MLflow's allowed metric/param name characters


def mlflow_name(key: str) -> str:
    return _MLFLOW_BAD.sub("_", key)


class MlflowLogger:
    def __init__(self, run_dir: Path, cfg: DictConfig, project: str, run_id: str | None) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        # MLflow's own default is a SQLite file; ours lives in the run folder, artifacts beside it
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
        self.client = MlflowClient(tracking_uri=uri)
        if run_id is not None:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return
        name = str(cfg.experiment)
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(
            name, artifact_location=(run_dir / "mlartifacts").resolve().as_uri())
        run = self.client.create_run(exp_id, run_name=run_dir.name,
                                     tags={"project": str(project), "run_dir": str(run_dir)})
        self.run_id = run.info.run_id
        flat = _flatten(OmegaConf.to_container(cfg, resolve=True))
        params = [Param(mlflow_name(k), str(v)[:6000]) for k, v in flat.items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        self.client.log_text(self.run_id, OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")

    def log(self, metrics: dict[str, Any]) -> None:
        import time

        from mlflow.entities import Metric

        step, now = int(metrics["step"]), int(time.time() * 1000)
        rows = [Metric(mlflow_name(k), v, now, step) for k, v in scalars(metrics).items()]
        for i in range(0, len(rows), 1000):
            self.client.log_batch(self.run_id, metrics=rows[i:i + 1000])

    def close(self, stopped: str = "") -> None:
        if stopped:
            self.client.set_tag(self.run_id, "stopped_by", stopped)
        self.client.set_terminated(self.run_id, status="KILLED" if stopped else "FINISHED")


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out or ({prefix[:-1]: "{}"} if prefix else {})
    return {prefix[:-1]: node}


# ---------------------------------------------------------------------- factory
def make_loggers(run_dir: Path, cfg: DictConfig, logging_cfg: LoggingConfig, history: Iterable[dict],
                 resume_step: int | None,
                 console_line: Callable[[dict[str, Any]], str]) -> list[MetricLogger]:
    """The sinks `logging_cfg` (trainer.logging) names; `cfg` is the run config they record (W&B
    config, MLflow params and config.yaml). Resuming after step `resume_step` continues the stored
    W&B / MLflow runs (None: a fresh run)."""
    check_loggers(logging_cfg.logger)
    ids_path = run_dir / IDS_FILE
    resumed = resume_step is not None
    ids = json.loads(ids_path.read_text()) if resumed and ids_path.exists() else {}
    sinks: list[MetricLogger] = []
    for name in selected_sinks(logging_cfg):
        if name == "jsonl":
            sinks.append(JsonlLogger(run_dir / "metrics.jsonl", history))
        elif name == "console":
            sinks.append(ConsoleLogger(console_line, bool(logging_cfg.progress_bar)))
        elif name == "tensorboard":
            sinks.append(TensorBoardLogger(run_dir / "tensorboard", resume_step + 1 if resumed else None))
        elif name == "wandb":
            sink = WandbLogger(run_dir, cfg, logging_cfg.project, ids.get("wandb"))
            ids["wandb"] = sink.run_id
            sinks.append(sink)
        elif name == "mlflow":
            sink = MlflowLogger(run_dir, cfg, logging_cfg.project, ids.get("mlflow"))
            ids["mlflow"] = sink.run_id
            sinks.append(sink)
    if ids:
        ids_path.write_text(json.dumps(ids, indent=1) + "\n")
    return sinks
