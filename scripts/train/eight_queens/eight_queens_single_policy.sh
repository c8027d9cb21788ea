#!/usr/bin/env bash
# eight_queens, MAS + AT-GRPO with one policy shared by the tool and plan agents, on the full data.
# Extra arguments go to the trainer; --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train at_grpo_shared eight_queens eight_queens_single_policy "$@"
