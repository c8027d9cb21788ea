#!/usr/bin/env bash
# The paper's claims at CPU scale on the embedded model, one command (see cpu_table.py for rows,
# sizes and outputs). Finished runs are skipped on a re-run, so it can be stopped and restarted:
#   bash scripts/results/cpu_table.sh                      # everything, seeds 0,1 -> docs/results/
#   bash scripts/results/cpu_table.sh --only math_easy     # one column (or rows: --only mas,at_grpo_l1)
#   bash scripts/results/cpu_table.sh --dry-run            # print every run's composed config
#   bash scripts/results/cpu_table.sh trainer.threads=1    # key=value go to every run
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" scripts/results/cpu_table.py "$@"
