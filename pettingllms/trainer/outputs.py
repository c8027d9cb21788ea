"""Run outputs: `<output_dir>/<experiment>/<run>/`.

    config.yaml                 the resolved config
    metrics.jsonl               one JSON object per step
    tensorboard/                TensorBoard event files
    trajectories/step_<N>.jsonl the step's episodes (pettingllms.records.Episode)
    checkpoints/step_NNNNNN/    see checkpoint.py (six-digit step)
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from pettingllms.records import Episode, write_jsonl
from pettingllms.trainer.run_folder import refuse_used_folder


def new_run_dir(cfg: DictConfig) -> Path:
    """A fresh run folder: run_name if set, else a timestamp."""
    root = Path(cfg.trainer.output_dir) / cfg.experiment
    if cfg.trainer.run_name:
        run = root / cfg.trainer.run_name
        refuse_used_folder(run)
        return run
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run, n = root / stamp, 1
    while run.exists():
        run, n = root / f"{stamp}-{n}", n + 1
    return run


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class RunOutputs:
    """Writes config, metrics, TensorBoard scalars and trajectories for one run."""

    def __init__(self, run_dir: Path, cfg: DictConfig, history: Iterable[dict] = (),
                 tensorboard: bool = True, purge_step: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        # On resume the checkpoint's history replaces metrics.jsonl, dropping steps
        # logged after that checkpoint (they will be run again).
        self.metrics_path = self.run_dir / "metrics.jsonl"
        with self.metrics_path.open("w", encoding="utf-8") as f:
            for row in history:
                f.write(json.dumps(row) + "\n")
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=purge_step)

    def log_metrics(self, metrics: dict[str, Any]) -> None:
        with self.metrics_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(metrics, default=float) + "\n")
        if self.writer is not None:
            step = int(metrics["step"])
            for k, v in metrics.items():
                if k != "step" and _finite(v):
                    self.writer.add_scalar(k, float(v), step)
            self.writer.flush()

    def write_trajectories(self, step: int, episodes: list[Episode]) -> Path:
        path = self.run_dir / "trajectories" / f"step_{step}.jsonl"
        write_jsonl(path, episodes)
        return path

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def summary_line(m: dict[str, Any], total_steps: int) -> str:
    """One console line per step."""
    def f(key: str, fmt: str = "{:.3f}") -> str:
        v = m.get(key)
        return fmt.format(v) if _finite(v) else "-"
    parts = [f"step {m['step']}/{total_steps}",
             f"reward {f('reward/mean')}",
             f"success {f('episode/success_rate', '{:.2f}')}",
             f"mixed {f('groups/mixed_frac', '{:.2f}')}",
             f"loss {f('train/loss', '{:.4f}')}",
             f"gnorm {f('train/grad_norm', '{:.3f}')}",
             f"tokens {f('tokens/response', '{:.0f}')}",
             f"{f('timing/step_s', '{:.1f}')}s (gen {f('timing/generate_s', '{:.1f}')}s"
             f", upd {f('timing/update_s', '{:.1f}')}s)"]
    val = [f"{k.removeprefix('val/')} {v:.3f}" for k, v in m.items()
           if k.startswith("val/") and k.count("/") == 2 and "@" in k and _finite(v)]
    return " | ".join(parts + val)
