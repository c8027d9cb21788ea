#!/usr/bin/env bash
# math_aggregation, easy level (env.data=math_easy, built on first use): two samplers and an aggregator,
# MAS + AT-GRPO with one shared LoRA policy, sized for CPU. The embedded model's untrained success on
# this level is in docs/results/easy_levels.md.
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train at_grpo_shared math_aggregation math_aggregation_easy env.data=math_easy \
  rollout.batch_size=4 rollout.k=4 rollout.sampling.max_new_tokens=192 \
  trainer.total_steps=30 trainer.checkpoint.save_freq=10 trainer.validation.val_freq=10 eval.k=4 eval.limit=32 "$@"
