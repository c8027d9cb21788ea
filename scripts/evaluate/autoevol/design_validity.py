"""Design-validity rate of the MetaAgent-X designer on held-out math problems.

    python scripts/evaluate/autoevol/design_validity.py                                  # untrained
    python scripts/evaluate/autoevol/design_validity.py --checkpoint outputs/autoevol_sft/<run>
    python scripts/evaluate/autoevol/design_validity.py --problems 32 eval.temperature=0.7 model=tiny

A design is valid when the designer's reply holds a design (a ```python block) that passes the DSL
checks and runs to an answer in the sandboxed executor (the same model answering its nodes). Each
problem (the first --problems of the --split split of env.data; train data never overlaps the test
split) gets one design at eval.temperature, through the training rollout (k = 1 design x 1
execution). Prints the rates per stage and writes a JSON file with every design and its outcome.
`mas.budgets.wall_s` / `round_wall_s` count wall time, generation included: on a loaded machine raise
them (e.g. mas.budgets.wall_s=3600 mas.budgets.round_wall_s=120) so that slowness is not scored
as an invalid design.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def stage(designer_info: dict, run: dict | None) -> str:
    """no_design | failed_checks | failed_run | valid."""
    if not designer_info.get("design_found"):
        return "no_design"
    if run is None:
        return "failed_run"
    if run["info"].get("ok"):
        return "valid"
    kind = str(run["info"].get("error") or "").split(":", 1)[0]
    return "failed_checks" if kind in ("design_check", "syntax") else "failed_run"


def summarise(episodes) -> dict:
    rows = []
    for e in episodes:
        des = next(s for s in e.samples if s.agent == "designer")
        runs = [st for st in e.trajectory.steps if st.agent == "executor"]
        run = {"info": runs[0].info} if runs else None
        rows.append({"problem_id": e.problem_id, "stage": stage(des.info, run), "design": des.text,
                     "error": run["info"].get("error") if run else None,
                     "outcome": e.trajectory.team_reward})
    n = max(1, len(rows))
    count = lambda *names: sum(r["stage"] in names for r in rows) / n  # noqa: E731
    return {"problems": len(rows), "has_design": count("failed_checks", "failed_run", "valid"),
            "passes_checks": count("failed_run", "valid"), "validity": count("valid"),
            "correct": sum(r["outcome"] for r in rows) / n, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config-name", default="autoevol_sft", help="experiment config (configs/NAME.yaml)")
    ap.add_argument("--checkpoint", default="", help="a run folder or checkpoint (default: the base model)")
    ap.add_argument("--problems", type=int, default=32)
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", default="", help="results JSON (default: next to the checkpoint or under outputs/)")
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. model=tiny eval.temperature=0")
    args = ap.parse_args(argv)

    from omegaconf import OmegaConf

    from pettingllms.cli.config_loading import load_config
    from pettingllms.errors import ConfigError
    from pettingllms.trainer import checkpoint as ckpt_io
    from pettingllms.trainer import components as comp
    from pettingllms.trainer.backends import make_backend
    from pettingllms.trainer.assemble import rollout_settings
    from pettingllms.trainer.evaluation import eval_settings
    from pettingllms.utils.seeding import derive_seed, set_seed

    try:
        cfg = load_config(args.config_name, args.overrides)
        if str(cfg.env.name) != "autoevol":
            raise ConfigError(f"{args.config_name}: env.name must be autoevol, got {cfg.env.name}")
        ckpt = ckpt_io.resolve_checkpoint(args.checkpoint, "--checkpoint") if args.checkpoint else None
        set_seed(int(cfg.seed), True)
        env_factory = comp.make_env_factory(cfg)
        problems = comp.load_problems(cfg, args.split, args.problems)
        backend = make_backend(cfg, env_factory)
    except ConfigError as e:
        print(f"design_validity: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        policies = backend.build_policies(list(env_factory().agents))
        backend.start(comp.policy_bases(policies))
        if ckpt is not None:
            ckpt_io.load_policies(ckpt, policies.workers, weights_only=True)
            backend.sync_weights()
        runner = backend.runner(eval_settings(rollout_settings(cfg), 1, float(cfg.eval.temperature)))
        batch = runner.run(problems, seed=derive_seed(int(cfg.seed), "validity") % (2**31), k=1)
    finally:
        backend.close()
    result = {"checkpoint": str(ckpt or ""), "model": str(cfg.model.path), "split": args.split,
              "temperature": float(cfg.eval.temperature), "wall_s": time.perf_counter() - t0,
              "designer_max_new_tokens": int(cfg.mas.designer_sampling.max_new_tokens),
              "budgets": OmegaConf.to_container(cfg.mas.budgets, resolve=True),
              **summarise(batch.episodes)}
    out = Path(args.out) if args.out else (
        (ckpt / "design_validity.json") if ckpt else
        Path(cfg.trainer.output_dir) / str(cfg.experiment) / "eval" / f"design_validity_base_{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"{result['problems']} problems ({args.split}), {result['checkpoint'] or 'base model ' + result['model']}: "
          f"has design {result['has_design']:.3f}, passes DSL checks {result['passes_checks']:.3f}, "
          f"valid (runs to an answer) {result['validity']:.3f}, correct {result['correct']:.3f}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
