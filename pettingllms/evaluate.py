"""Evaluate: `python -m pettingllms.evaluate --config-name NAME eval.checkpoint=PATH eval.k=4`.

Reports avg@k and pass@k per env and benchmark (the problems' `source` column) for the
base model (no eval.checkpoint) or a training checkpoint (<run>/checkpoints/step_NNNNNN, or a
run folder: its latest checkpoint). Prints a table and writes a JSON file.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from pettingllms.cli.app import JobInfo, run_main
from pettingllms.errors import ConfigError
from pettingllms.utils.diskio import as_write_failed, write_atomic


def _resolve_checkpoint(path: str) -> Path:
    from pettingllms.trainer.checkpoint import resolve_checkpoint
    return resolve_checkpoint(path, "eval.checkpoint")


def run_evaluation(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate per cfg.eval; returns the results dict (also written as JSON)."""
    from pettingllms.trainer import assemble
    from pettingllms.trainer import checkpoint as ckpt_io
    from pettingllms.trainer import components as comp
    from pettingllms.trainer.backends import make_backend
    from pettingllms.utils.seeding import derive_seed

    assemble.build_run(cfg)  # threads, seeds and device as for training
    env_factory = comp.make_env_factory(cfg)
    agents = list(env_factory().agents)
    limit = cfg.eval.limit if cfg.eval.limit is not None else cfg.env.test_limit
    problems = comp.load_problems(cfg, cfg.eval.split, limit)
    ckpt = _resolve_checkpoint(cfg.eval.checkpoint) if cfg.eval.checkpoint else None
    backend = make_backend(cfg, env_factory)
    try:
        policies = backend.build_policies(agents)
        bases = comp.policy_bases(policies)  # the models evaluated (model.path, or each policy's base)
        backend.start(bases)
        if ckpt is not None:
            ckpt_io.load_checkpoint(ckpt, policies.workers)  # one line if it does not fit
            backend.sync_weights()
        t0 = time.perf_counter()
        result = assemble.evaluate_on(backend.runner, cfg, problems, seed=derive_seed(int(cfg.seed), "eval") % (2**31))
        result["wall_s"] = time.perf_counter() - t0
    finally:
        backend.close()
    result.update({"experiment": str(cfg.experiment), "split": str(cfg.eval.split), "dtype": assemble.model_dtype(cfg),
                   "checkpoint": str(ckpt) if ckpt else "", "model": ", ".join(sorted(set(bases.values()))),
                   "seed": int(cfg.seed), "config": OmegaConf.to_container(cfg, resolve=True)})
    return result


# Config sections an evaluation's numbers depend on (with the checkpoint); eval.output and
# eval.progress_s are not.
_RESULT_SETTINGS = ("seed", "model", "rollout", "env", "reward", "policies", "agents", "agents_mode", "eval")


def settings_hash(cfg: DictConfig, checkpoint: str) -> str:
    """Short hash of what decides the results, so evals with other settings get other files
    (model.dtype=auto as it resolves here: a bf16 and a float32 box write different files)."""
    from pettingllms.trainer.assemble import model_dtype

    config = OmegaConf.to_container(cfg, resolve=True)
    settings = {k: config.get(k) for k in _RESULT_SETTINGS}
    settings["model"] = {**(settings["model"] or {}), "dtype": model_dtype(cfg)}
    settings["eval"] = {k: v for k, v in (settings["eval"] or {}).items() if k not in ("output", "progress_s")}
    blob = json.dumps([settings, checkpoint], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def output_path(cfg: DictConfig, checkpoint: str, digest: str, job_dir: Path | None = None) -> Path:
    """eval_<env>_<split>_k<K>_<settings hash>.json: never the file of an eval with other settings.
    Next to the checkpoint; for the base model in the command's job folder (`job_dir`)."""
    if cfg.eval.output:
        return Path(cfg.eval.output)
    name = f"eval_{cfg.env.name}_{cfg.eval.split}_k{cfg.eval.k}_{digest}.json"
    if checkpoint:
        return Path(checkpoint) / name
    if job_dir is not None:
        return Path(job_dir) / name
    stamp = time.strftime("%Y%m%d-%H%M%S")
    from pettingllms.trainer.assemble import run_place

    return Path(run_place(cfg).output_dir) / str(cfg.experiment) / "eval" / f"base_{stamp}_{name}"


def refuse_other_settings(out: Path, digest: str) -> None:
    """An existing results file is replaced only by an eval with the same settings."""
    if not out.exists():
        return
    try:
        earlier = json.loads(out.read_text()).get("settings_hash")
    except (OSError, ValueError, AttributeError):
        earlier = None
    if earlier != digest:
        raise ConfigError(f"eval.output={out} holds an evaluation made with other settings (or is not one); "
                          f"choose another file")


def _evaluate(cfg: DictConfig, job: JobInfo | None = None) -> int:
    from pettingllms.trainer.evaluation import format_table

    checkpoint = str(_resolve_checkpoint(cfg.eval.checkpoint)) if cfg.eval.checkpoint else ""
    digest = settings_hash(cfg, checkpoint)
    out = output_path(cfg, checkpoint, digest, job.output_dir if job else None)
    refuse_other_settings(out, digest)  # before the (long) evaluation
    result = run_evaluation(cfg)
    result["settings_hash"] = digest
    what = result["checkpoint"] or f"base model {result['model']}"
    print(f"{cfg.experiment}: {what}, split {result['split']}, {result['num_problems']} problems")
    print(format_table([result]), flush=True)  # before the write: a full disk does not lose the numbers
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(result, indent=1, default=float))
    except OSError as e:
        raise as_write_failed(out, e) from None
    print(f"results: {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(argv, prog="pettingllms.evaluate", default_config="quickstart",
                    what="Evaluate a base model or a checkpoint: avg@k and pass@k per env and benchmark.",
                    kind="eval", body=_evaluate)


if __name__ == "__main__":
    sys.exit(main())
