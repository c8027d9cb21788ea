"""Evaluate: `python -m pettingllms.evaluate --config-name NAME eval.checkpoint=PATH eval.k=4`.

Reports avg@k and pass@k per env and benchmark (the problems' `source` column) for the
base model (no eval.checkpoint) or a training checkpoint (<run>/checkpoints/step_<N>, or a
run folder: its latest checkpoint). Prints a table and writes a JSON file.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from pettingllms.cli.app import JobInfo, run_main
from pettingllms.config import ConfigError


def _resolve_checkpoint(path: str) -> Path:
    from pettingllms.trainer import checkpoint as ckpt_io

    p = Path(path)
    if (p / "checkpoints").is_dir():
        latest = ckpt_io.latest_checkpoint(p)
        if latest is None:
            raise ConfigError(f"eval.checkpoint={path}: no complete checkpoint in that run folder")
        return latest
    if not ckpt_io.is_complete(p):
        raise ConfigError(f"eval.checkpoint={path}: not a complete checkpoint folder")
    return p


def run_evaluation(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate per cfg.eval; returns the results dict (also written as JSON)."""
    from pettingllms.trainer import checkpoint as ckpt_io
    from pettingllms.trainer import components as comp
    from pettingllms.trainer.backends import make_backend
    from pettingllms.trainer.evaluation import evaluate_problems
    from pettingllms.utils.seeding import derive_seed, set_seed

    set_seed(int(cfg.seed), bool(cfg.trainer.deterministic))
    env_factory = comp.make_env_factory(cfg)
    agents = list(env_factory().agents)
    limit = cfg.eval.limit if cfg.eval.limit is not None else cfg.env.test_limit
    problems = comp.load_problems(cfg, cfg.eval.split, limit)
    ckpt = _resolve_checkpoint(cfg.eval.checkpoint) if cfg.eval.checkpoint else None
    backend = make_backend(cfg, env_factory)
    try:
        policies = backend.build_policies(agents)
        backend.start(comp.policy_bases(policies))
        if ckpt is not None:
            ckpt_io.load_policies(ckpt, policies.workers)
            backend.sync_weights()
        t0 = time.perf_counter()
        result = evaluate_problems(backend.runner, cfg, problems, int(cfg.eval.k),
                                   seed=derive_seed(int(cfg.seed), "eval") % (2**31))
        result["wall_s"] = time.perf_counter() - t0
    finally:
        backend.close()
    result.update({"experiment": str(cfg.experiment), "split": str(cfg.eval.split),
                   "checkpoint": str(ckpt) if ckpt else "", "model": str(cfg.model.path),
                   "seed": int(cfg.seed), "config": OmegaConf.to_container(cfg, resolve=True)})
    return result


def output_path(cfg: DictConfig, result: dict[str, Any], job: JobInfo | None = None) -> Path:
    """eval.output; else next to the checkpoint (one job) or in the command's job folder."""
    if cfg.eval.output:
        return Path(cfg.eval.output)
    name = f"eval_{cfg.env.name}_{cfg.eval.split}_k{cfg.eval.k}.json"
    if result["checkpoint"] and not (job and job.multirun):
        return Path(result["checkpoint"]) / name
    if job is not None:
        return job.output_dir / name
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(cfg.trainer.output_dir) / str(cfg.experiment) / "eval" / f"base_{stamp}_{name}"


def _evaluate(cfg: DictConfig, job: JobInfo | None = None) -> int:
    from pettingllms.trainer.evaluation import format_table

    result = run_evaluation(cfg)
    out = output_path(cfg, result, job)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=float))
    what = result["checkpoint"] or f"base model {result['model']}"
    print(f"{cfg.experiment}: {what}, split {result['split']}, {result['num_problems']} problems")
    print(format_table([result]))
    print(f"results: {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(argv, prog="pettingllms.evaluate", default_config="quickstart",
                    what="Evaluate a base model or a checkpoint: avg@k and pass@k per env and benchmark.",
                    kind="eval", body=_evaluate)


if __name__ == "__main__":
    sys.exit(main())
