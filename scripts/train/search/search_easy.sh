#!/usr/bin/env bash
# Search, easy level (env.data=search_easy: 1-hop questions, built on first use): MAS + AT-GRPO with one
# shared LoRA policy, sized for CPU. Three turns suffice (decompose+search, answer, final answer).
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train search_L1_prompt search search_easy env.data=search_easy env.max_turns=3 \
  rollout.batch_size=4 rollout.k=4 rollout.sampling.max_new_tokens=96 \
  trainer.total_steps=30 trainer.checkpoint.save_freq=10 trainer.validation.val_freq=10 eval.k=4 eval.limit=32 "$@"
