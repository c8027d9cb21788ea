#!/usr/bin/env bash
# code, easy level (env.data=code_easy, built on first use): MAS + AT-GRPO with a shared LoRA
# policy, sized for CPU. On the full code data the embedded model scores 0, so its groups carry
# no signal; the easy level is where RL at CPU scale has something to climb.
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train at_grpo_shared code code_easy env.data=code_easy env.max_turns=2 \
  rollout.batch_size=4 rollout.k=4 rollout.sampling.max_new_tokens=256 \
  trainer.total_steps=30 trainer.checkpoint.save_freq=10 trainer.validation.val_freq=10 eval.k=4 eval.limit=32 "$@"
