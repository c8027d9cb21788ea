#!/usr/bin/env bash
# The seed README's name for the Sudoku single-agent recipe (listed under games as
# sokodu_single.sh): runs scripts/train/sudoku/sudoku_single.sh with the same arguments.
set -euo pipefail
echo "sokodu_single.sh is scripts/train/sudoku/sudoku_single.sh" >&2
exec bash "$(dirname "${BASH_SOURCE[0]}")/sudoku_single.sh" "$@"
