#!/usr/bin/env bash
# Code, paper row 'MAS + AT-GRPO, per-role policies' (L2).
# One LoRA adapter per agent (coder -> tester) on one shared base, each trained only on its own
# agent's samples; AT-GRPO tree rollouts. For one full model per agent (L3) add policies=per_agent_model
# trainer.optim.lr=1e-6 (full fine-tuning; this recipe's lr is for LoRA adapters).
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train at_grpo_per_role code code_two_policy "$@"
