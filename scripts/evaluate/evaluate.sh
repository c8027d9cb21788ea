#!/usr/bin/env bash
# avg@k and pass@k per env and benchmark, for the base model or a checkpoint:
#   bash scripts/evaluate/evaluate.sh --config-name quickstart eval.k=4
#   bash scripts/evaluate/evaluate.sh --config-name quickstart eval.checkpoint=outputs/quickstart/<run>
# (a run folder means its latest checkpoint). --dry-run prints the config and exits.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" -m pettingllms.evaluate "$@"
