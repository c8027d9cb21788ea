#!/usr/bin/env bash
# Plan-path, paper row 'single agent + GRPO'.
# One agent does both roles; GRPO over K independent episodes per problem (flat rollouts).
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train single_grpo plan_path_single plan_path_single "$@"
