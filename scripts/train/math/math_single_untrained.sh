#!/usr/bin/env bash
# Math, paper row 'single agent' (untrained, evaluation only).
# One agent (reasoner) solves alone; avg@k/pass@k of the base model on the test split.
# Extra arguments go to the evaluator (e.g. eval.k=8 eval.limit=32); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe eval math_single math_single math_single_untrained "$@"
