"""Build the MetaAgent-X cold-start SFT data set (synthetic; JSONL, one row per supervised reply).

    python scripts/dataprocess/build_autoevol_sft.py                          # designer rows only
    python scripts/dataprocess/build_autoevol_sft.py --trace-problems 64      # + executor traces
    python scripts/dataprocess/build_autoevol_sft.py --config-name autoevol_sft model=tiny --problems 8

Designer rows: per train problem of the config's data (env.data, the math env's by default),
--per-problem designs drawn from the DSL templates. Executor rows (--trace-problems > 0): those
problems' designs run by the real sandboxed executor on the config's model (rollout.sampling,
mas.budgets); the node calls of correct executions are kept. Writes <out>/train.jsonl and
<out>/report.json; every row has synthetic: true and its source.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config-name", default="autoevol_sft", help="experiment config (configs/NAME.yaml)")
    ap.add_argument("--out", default="datasets/autoevol_sft", help="output folder")
    ap.add_argument("--problems", type=int, default=512, help="train problems for designer rows")
    ap.add_argument("--per-problem", type=int, default=1, help="template designs per problem")
    ap.add_argument("--templates", nargs="+", default=None, help="template names (default: the short ones)")
    ap.add_argument("--trace-problems", type=int, default=0,
                    help="of those problems, how many get executor traces (0: none; needs the model)")
    ap.add_argument("--executions", type=int, default=2, help="executions per traced design")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. model=tiny env.data=math_easy")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # progress lines while traces run

    from pettingllms.cli.config_loading import load_config
    from pettingllms.errors import ConfigError, WriteFailed
    from pettingllms.trainer.stopping import EXIT_IO_ERROR
    from pettingllms.utils.diskio import write_atomic
    from pettingllms.envs.autoevol import sft_data
    from pettingllms.records import write_jsonl
    from pettingllms.trainer import components as comp

    try:
        cfg = load_config(args.config_name, args.overrides)
        if str(cfg.env.name) != "autoevol":
            raise ConfigError(f"{args.config_name}: env.name must be autoevol, got {cfg.env.name}")
        problems = comp.load_problems(cfg, "train", args.problems)
        templates = args.templates or list(sft_data.DEFAULT_TEMPLATES)
        rows = sft_data.designer_rows(problems, args.seed, args.per_problem, templates)
    except (ConfigError, ValueError) as e:
        print(f"build_autoevol_sft: {e}", file=sys.stderr)
        return 2
    report = {"synthetic": True, "config": args.config_name, "data": str(cfg.env.data), "problems": len(problems),
              "templates": templates, "designer_rows": len(rows), "executor_rows": 0}
    if args.trace_problems > 0:
        rows += _traces(cfg, problems[: args.trace_problems], rows, args, report)
    out = Path(args.out)
    try:
        write_jsonl(out / "train.jsonl", rows)
    except WriteFailed as e:  # the disk is full...: one line, no half-written file
        print(f"build_autoevol_sft: {e}", file=sys.stderr)
        return EXIT_IO_ERROR
    try:
        write_atomic(out / "report.json", json.dumps(report, indent=1))
    except WriteFailed as e:
        print(f"build_autoevol_sft: {e} (train.jsonl was written)", file=sys.stderr)
        return EXIT_IO_ERROR
    print(json.dumps(report, indent=1))
    print(f"wrote {len(rows)} rows to {out / 'train.jsonl'}")
    return 0


def _traces(cfg, problems, rows, args, report) -> list:
    from pettingllms.envs.autoevol import sft_data
    from pettingllms.policies.mapping import resolve_policies
    from pettingllms.rollout.engines.base import SamplingParams
    from pettingllms.trainer import assemble
    from pettingllms.utils.progress import Progress, token_counter

    plan = resolve_policies(assemble.mapping_config(cfg), ["designer", "executor"])
    policy = plan.agent_policy["executor"]
    settings = assemble.rollout_settings(cfg)
    engine = assemble.build_rollout_engine(cfg, {name: s.base for name, s in plan.specs.items()})
    wanted = {str(p["id"]) for p in problems}
    designs = [r for r in rows if r["problem_id"] in wanted]
    t0 = time.perf_counter()
    try:
        with Progress(f"executor traces ({len(designs)} designs x {args.executions})", None, "",
                      token_counter(engine)):
            traces, stats = sft_data.executor_rows(problems, designs, engine, policy,
                                                   SamplingParams(n=1, **settings.sampling), settings.mas_budgets,
                                                   args.seed, args.executions)
    finally:
        engine.close()
    report.update(executor_rows=len(traces), trace_problems=len(problems), trace_wall_s=time.perf_counter() - t0,
                  **{f"traces/{k}": v for k, v in stats.items()})
    return traces


if __name__ == "__main__":
    sys.exit(main())
