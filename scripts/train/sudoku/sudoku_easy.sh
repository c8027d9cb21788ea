#!/usr/bin/env bash
# sudoku, easy level (env.data=sudoku_easy, built on first use): MAS + AT-GRPO with a shared LoRA
# policy, sized for CPU. The untrained embedded model (135M) still scores ~0 here (it rarely writes
# a valid move: docs/results/easy_levels.md), so with it most groups carry no signal; a larger
# model (model=... ) or an SFT start is needed for RL to climb: sudoku_easy_cold_start.sh runs this
# recipe from one (trainer.checkpoint.init_from=<its SFT run>).
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train at_grpo_shared sudoku sudoku_easy env.data=sudoku_easy env.max_turns=2 \
  rollout.batch_size=4 rollout.k=4 rollout.sampling.max_new_tokens=192 \
  trainer.total_steps=30 trainer.checkpoint.save_freq=10 trainer.validation.val_freq=10 eval.k=4 eval.limit=32 "$@"
