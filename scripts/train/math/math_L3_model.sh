#!/usr/bin/env bash
# Math (tool -> reasoner), per-role policies as one full model per agent (L3).
# bf16 weights, idle policies offloaded; bases may differ (policies.<agent>.base=...).
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train math_L3_model math math_L3_model "$@"
