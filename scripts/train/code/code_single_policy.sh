#!/usr/bin/env bash
# Code, paper row 'MAS + AT-GRPO, shared policy' (L1).
# Both agents (coder -> tester) share one LoRA policy, roles differ by prompt; AT-GRPO tree rollouts.
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train at_grpo_shared code code_single_policy "$@"
