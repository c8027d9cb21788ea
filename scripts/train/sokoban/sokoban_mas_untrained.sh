#!/usr/bin/env bash
# Sokoban, paper row 'MAS' (untrained, evaluation only).
# Both agents (tool -> plan) on the base model; avg@k/pass@k on the test split.
# Extra arguments go to the evaluator (e.g. eval.k=8 eval.limit=32); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe eval at_grpo_shared sokoban sokoban_mas_untrained "$@"
