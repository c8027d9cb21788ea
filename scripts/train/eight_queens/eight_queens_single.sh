#!/usr/bin/env bash
# eight_queens, single agent + GRPO (one plan agent does the whole task), on the full data.
# Extra arguments go to the trainer; --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train single_grpo eight_queens_single eight_queens_single "$@"
