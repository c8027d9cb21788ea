#!/usr/bin/env bash
# Math (tool -> reasoner), paper row 'MAS + AT-GRPO, per-role policies' (L2).
# One LoRA adapter per agent on one shared base, each trained only on its own agent's samples.
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train math_L2_lora math math_L2_lora "$@"
