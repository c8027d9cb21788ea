#!/usr/bin/env bash
# Math (tool + reasoner), AT-GRPO, one shared policy (L1, roles by prompt).
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" -m pettingllms.train --config-name math_L1_prompt "$@"
