#!/usr/bin/env bash
# Math, paper row 'MAS' (untrained, evaluation only).
# Both agents (tool -> reasoner) on the base model; avg@k/pass@k on the test split.
# (The 'MAS + AT-GRPO, shared policy' row is math_L1_prompt.sh.)
# Extra arguments go to the evaluator (e.g. eval.k=8 eval.limit=32); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe eval math_L1_prompt math math_mas_untrained "$@"
