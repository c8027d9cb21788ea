#!/usr/bin/env bash
# MetaAgent-X co-training, shared policy (designer and executor are roles of one model): the
# published recipe, 4 designs x 4 executions per task, executor grouped by question, designer /
# executor learning rates 1e-9 / 5e-6 swapped every 10 steps (configs/autoevol_cotrain.yaml).
# From the SFT cold start:   INIT=outputs/autoevol_sft/<run> bash example_cotrain_autoeval.sh
# Extra arguments go to the trainer (e.g. trainer.total_steps=10); --dry-run prints the config.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" -m pettingllms.train --config-name autoevol_cotrain "trainer.checkpoint.init_from=${INIT:-}" "$@"
