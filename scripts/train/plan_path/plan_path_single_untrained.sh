#!/usr/bin/env bash
# Plan-path, paper row 'single agent' (untrained, evaluation only).
# One agent does both roles; avg@k/pass@k of the base model on the test split.
# Extra arguments go to the evaluator (e.g. eval.k=8 eval.limit=32); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe eval single_grpo plan_path_single plan_path_single_untrained "$@"
