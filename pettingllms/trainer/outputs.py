"""Run outputs: `<output_dir>/<experiment>/<run>/`.

    config.yaml                 the resolved config
    metrics.jsonl               one JSON object per step
    tensorboard/                TensorBoard event files (trainer.logging.logger: see loggers.py)
    wandb/ mlflow.db loggers.json  W&B and MLflow runs, when trainer.logging.logger lists them
    trajectories/step_<N>.jsonl the step's episodes (pettingllms.records.Episode)
    checkpoints/step_NNNNNN/    see checkpoint.py (six-digit step)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from omegaconf import DictConfig, OmegaConf

from pettingllms.config.schema import LoggingConfig
from pettingllms.errors import ConfigError
from pettingllms.records import Episode, save_images, write_jsonl
from pettingllms.trainer import run_folder
from pettingllms.trainer.loggers import finite
from pettingllms.utils.diskio import as_write_failed

HYDRA_FILES = run_folder.HYDRA_FILES


def fresh_dir(root: Path) -> Path:
    """A timestamped folder under `root` that does not exist yet."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run, n = Path(root) / stamp, 1
    while run.exists():
        run, n = Path(root) / f"{stamp}-{n}", n + 1
    return run


@dataclass(frozen=True)
class RunPlace:
    """Where a run lives, `<output_dir>/<experiment>/<run_name or a timestamp>`, and how it starts
    (`trainer.checkpoint.resume`); `config` is the run config compared with a resumed run's own
    config.yaml, which may differ only with `allow_changes`. Built by `trainer.assemble.run_place`."""
    output_dir: str
    experiment: str
    run_name: str = ""
    resume: str = "none"
    allow_changes: bool = False
    config: Any = None


def new_run_dir(place: RunPlace) -> Path:
    """A fresh run folder: run_name if set, else a timestamp."""
    root = Path(place.output_dir) / place.experiment
    if place.run_name:
        run = root / place.run_name
        run_folder.refuse_used_folder(run)
        return run
    return fresh_dir(root)


def default_run_folder(place: RunPlace) -> Path:
    """The folder `resolve_run` will use without a command-line choice (no side effects)."""
    resume = str(place.resume)
    if resume in ("", "none"):
        return new_run_dir(place)
    if resume == "auto":
        if not place.run_name:
            raise ConfigError("trainer.checkpoint.resume=auto needs a stable run folder: set trainer.run_name "
                              "(or pass trainer.checkpoint.resume=PATH to a checkpoint folder)")
        return Path(place.output_dir) / place.experiment / place.run_name
    path = Path(resume)
    return path if (path / "checkpoints").is_dir() else path.parent.parent


def resolve_run(place: RunPlace, run_dir: Path | None = None) -> tuple[Path, Path | None]:
    """The run folder and the checkpoint to resume from (None for a fresh start).

    `run_dir` is the folder the command line chose (Hydra's run dir, which already holds
    Hydra's own files); without it the folder is `<output_dir>/<experiment>/<run_name or timestamp>`.
    """
    from pettingllms.trainer import checkpoint as ckpt_io

    resume = str(place.resume)
    if resume in ("", "none"):
        if run_dir is None:
            return new_run_dir(place), None
        run_folder.refuse_used_folder(Path(run_dir), ignore=HYDRA_FILES)
        return Path(run_dir), None
    if resume == "auto":
        run_dir = Path(run_dir) if run_dir is not None else default_run_folder(place)
        latest = ckpt_io.latest_checkpoint(run_dir)
        if latest is None:
            run_folder.start_fresh_in(run_dir)
            return run_dir, None
        run_folder.check_resume_config(run_dir, place.config, place.allow_changes, latest)
        return run_dir, latest
    path = Path(resume)
    if path.is_dir() and (path / "checkpoints").is_dir():  # a run folder: take its latest
        latest = ckpt_io.latest_checkpoint(path)
        if latest is None:
            raise ConfigError(f"trainer.checkpoint.resume={resume}: no complete checkpoint in that run folder")
        run_folder.check_resume_config(path, place.config, place.allow_changes, latest)
        return path, latest
    if not ckpt_io.is_complete(path):
        raise ConfigError(f"trainer.checkpoint.resume={resume}: not a complete checkpoint folder")
    if path.parent.name != "checkpoints":
        raise ConfigError(f"trainer.checkpoint.resume={resume}: expected <run>/checkpoints/step_NNNNNN")
    run_folder.check_resume_config(path.parent.parent, place.config, place.allow_changes, path)
    return path.parent.parent, path


class RunOutputs:
    """Writes the config, the step metrics (to every `trainer.logging.logger` sink) and trajectories."""

    def __init__(self, run_dir: Path, cfg: DictConfig, logging_cfg: LoggingConfig, total_steps: int,
                 history: Iterable[dict] = (), resume_step: int | None = None,
                 line: Callable[[dict[str, Any]], str] | None = None) -> None:
        """`cfg`: the run config written to config.yaml; `logging_cfg`: trainer.logging; `line`: the
        console line of one step's metrics (default: the RL step's summary_line)."""
        from pettingllms.trainer.loggers import make_loggers

        self.run_dir = Path(run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        except OSError as e:
            raise as_write_failed(self.run_dir / "config.yaml", e) from None
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.loggers = make_loggers(self.run_dir, cfg, logging_cfg, history, resume_step,
                                    line or (lambda m: summary_line(m, int(total_steps))))

    def log_metrics(self, metrics: dict[str, Any]) -> None:
        for sink in self.loggers:
            sink.log(metrics)

    def write_trajectories(self, step: int, episodes: list[Episode]) -> Path:
        path = self.run_dir / "trajectories" / f"step_{step}.jsonl"
        try:
            save_images(path.parent / "images", episodes)  # each distinct image once, named by hash
            write_jsonl(path, episodes)
        except OSError as e:  # no half-written file: a resumed run writes the step again
            path.unlink(missing_ok=True)
            raise as_write_failed(path, e) from None
        return path

    def close(self, stopped: str = "") -> None:
        """`stopped`: the signal that ended the run early (W&B and MLflow record it). Every sink is
        closed even when one fails (a full disk); the first failure is raised after."""
        loggers, self.loggers = self.loggers, []
        failure: BaseException | None = None
        for sink in loggers:
            try:
                sink.close(stopped)
            except Exception as e:  # noqa: BLE001 - close the others first
                failure = failure or e
        if failure is not None:
            raise failure


def summary_line(m: dict[str, Any], total_steps: int) -> str:
    """One console line per step."""
    def f(key: str, fmt: str = "{:.3f}") -> str:
        v = m.get(key)
        return fmt.format(v) if finite(v) else "-"
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
           if k.startswith("val/") and k.count("/") == 2 and "@" in k and finite(v)]
    return " | ".join(parts + val)
