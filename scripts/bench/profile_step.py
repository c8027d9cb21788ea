#!/usr/bin/env python
"""Where one training step's wall time goes: generate, env/sandbox, logprob, update, other.

    python scripts/bench/profile_step.py --config-name quickstart --steps 2 [key=value ...]

Runs the real trainer loop for --steps steps (outputs under a temporary folder unless
trainer.output_dir is given) and prints each step's split and the mean, in seconds and
percent of the step. `env` is rollout time outside the engine's generate calls (env
steps, sandboxed programs, prompt building); `logprob` is old-logprob recomputation when
the policy worker reports it separately (else it is inside `update`); `other` is
everything else (advantages, weight sync to the engine, metrics, trajectory files).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

PARTS = ("generate", "env", "logprob", "update", "other")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Any other key=value is a config override, as for pettingllms.train.")
    p.add_argument("--config-name", "-cn", default="quickstart", help="experiment config (default: quickstart)")
    p.add_argument("--steps", type=int, default=1, help="training steps to time (default: 1)")
    return p.parse_known_args(argv)


def table(rows: list[dict[str, float]]) -> str:
    lines = ["step   total_s  " + "  ".join(f"{p:>16}" for p in PARTS)]
    for m in rows:
        total = m["timing/step_s"]
        cells = [f"{m[f'timing/{p}_s']:7.2f}s {100 * m[f'timing/{p}_s'] / total:5.1f}%" for p in PARTS]
        lines.append(f"{int(m['step']):<5} {total:8.2f}  " + "  ".join(f"{c:>16}" for c in cells))
    if len(rows) > 1:
        total = sum(m["timing/step_s"] for m in rows) / len(rows)
        cells = []
        for p in PARTS:
            v = sum(m[f"timing/{p}_s"] for m in rows) / len(rows)
            cells.append(f"{v:7.2f}s {100 * v / total:5.1f}%")
        lines.append(f"{'mean':<5} {total:8.2f}  " + "  ".join(f"{c:>16}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse(sys.argv[1:] if argv is None else argv)
    from pettingllms.cli.config_loading import load_config
    from pettingllms.errors import ConfigError
    from pettingllms.trainer.local import LocalTrainer

    out = None
    if not any(o.startswith("trainer.output_dir=") for o in overrides):
        out = tempfile.mkdtemp(prefix="pettingllms-profile-")
        overrides.append(f"trainer.output_dir={out}")
    overrides += [f"trainer.total_steps={max(args.steps, 1)}", "trainer.checkpoint.save_freq=0", "trainer.validation.val_freq=0",
                  "trainer.logging.progress_bar=false", "trainer.logging.save_trajectories=true"]
    try:
        cfg = load_config(args.config_name, overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    trainer = LocalTrainer(cfg)
    setup_s = time.perf_counter() - t0
    try:
        # fit() would checkpoint at the end; time the steps alone.
        rows = []
        for step in range(1, args.steps + 1):
            rows.append(trainer.train_step(step))
            trainer.step = step
    finally:
        trainer.close()
    m = rows[-1]
    print(f"config {args.config_name}: model {cfg.model.path}, env {cfg.env.name}, strategy "
          f"{cfg.rollout.strategy}, batch {cfg.rollout.batch_size} problems x k={cfg.rollout.k}, "
          f"max_new_tokens {cfg.rollout.sampling.max_new_tokens}, lora {cfg.model.lora.enabled}")
    import torch
    print(f"setup (models, data, engine): {setup_s:.1f}s; torch threads {torch.get_num_threads()}; last step: "
          f"{int(m['samples/count'])} samples, {int(m['tokens/prompt'])} prompt + {int(m['tokens/response'])} "
          f"response tokens, {m['tokens/generated_per_s']:.1f} generated tok/s, reward {m['reward/mean']:.3f}, "
          f"mixed groups {m['groups/mixed_frac']:.2f}")
    print(table(rows))
    if out:
        print(f"(outputs in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
