"""Build a grid env's plan-agent cold-start SFT data set (JSONL, one row per supervised reply).

    python scripts/dataprocess/build_grid_sft.py                                  # sudoku_easy, 256 rows
    python scripts/dataprocess/build_grid_sft.py env=sokoban env.data=sokoban_easy --out datasets/sokoban_easy_sft
    python scripts/dataprocess/build_grid_sft.py model=tiny --problems 8          # a smoke run

Per train problem of the config's env.data: the plan agent's turn-1 prompt after a tool turn that
the config's model generated (rollout.sampling), and as the reply the solver's shortest solution
(pettingllms/envs/grid_cold_start.py). Writes <out>/train.jsonl and <out>/report.json.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

CHUNK = 32  # tool prompts per generate call


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config-name", default="grid_cold_start", help="experiment config (configs/NAME.yaml)")
    ap.add_argument("--out", default="datasets/sudoku_easy_sft", help="output folder")
    ap.add_argument("--problems", type=int, default=256, help="train problems (one row each)")
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. model=tiny env=sokoban")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # progress lines while the tool agent writes

    from pettingllms.cli.config_loading import load_config
    from pettingllms.errors import ConfigError, WriteFailed
    from pettingllms.trainer.stopping import EXIT_IO_ERROR
    from pettingllms.utils.diskio import write_atomic
    from pettingllms.envs.grid_cold_start import cold_start_rows
    from pettingllms.records import write_jsonl
    from pettingllms.trainer import components as comp

    t0 = time.perf_counter()
    try:
        cfg = load_config(args.config_name, args.overrides)
        problems = comp.load_problems(cfg, "train", args.problems)
        make_env = comp.make_env_factory(cfg)
        engine, policy, sampling = _tool_generator(cfg)
        try:
            rows, counts = cold_start_rows(make_env, problems, lambda prompts: _generate(engine, policy, sampling,
                                                                                      prompts, int(cfg.seed)),
                                           seed=int(cfg.seed))
        finally:
            engine.close()
    except (ConfigError, ValueError) as e:
        print(f"build_grid_sft: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        write_jsonl(out / "train.jsonl", rows)
    except WriteFailed as e:  # the disk is full...: one line, no half-written file
        print(f"build_grid_sft: {e}", file=sys.stderr)
        return EXIT_IO_ERROR
    report = {"synthetic": True, "config": args.config_name, "env": str(cfg.env.name), "data": str(cfg.env.data),
              "model": str(cfg.model.path), "seed": int(cfg.seed), **counts,
              "wall_s": round(time.perf_counter() - t0, 1)}
    try:
        write_atomic(out / "report.json", json.dumps(report, indent=1))
    except WriteFailed as e:
        print(f"build_grid_sft: {e} (train.jsonl was written)", file=sys.stderr)
        return EXIT_IO_ERROR
    print(json.dumps(report, indent=1))
    print(f"wrote {len(rows)} rows to {out / 'train.jsonl'}")
    return 0


def _tool_generator(cfg):
    from pettingllms.policies.mapping import resolve_policies
    from pettingllms.trainer import assemble

    plan = resolve_policies(assemble.mapping_config(cfg), ["tool", "plan"])
    engine = assemble.build_rollout_engine(cfg, {name: s.base for name, s in plan.specs.items()})
    return engine, plan.agent_policy["tool"], assemble.rollout_settings(cfg).sampling


def _generate(engine, policy: str, sampling: dict, prompts: list, seed: int) -> list[str]:
    from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams
    from pettingllms.utils.progress import Progress, token_counter
    from pettingllms.utils.seeding import derive_seed

    texts: list[str] = []
    with Progress("SFT rows (tool agent)", len(prompts), "prompts", token_counter(engine)) as progress:
        for start in range(0, len(prompts), CHUNK):
            requests = [GenerationRequest(messages=m, policy=policy, request_id=f"tool/{start + i}",
                                          params=SamplingParams(n=1, **sampling,
                                                                seed=derive_seed(seed, "cold_start_tool", start + i)))
                        for i, m in enumerate(prompts[start: start + CHUNK])]
            texts += [completions[0].text for completions in engine.generate(requests)]
            progress.advance(len(requests))
    return texts


if __name__ == "__main__":
    sys.exit(main())
