#!/usr/bin/env bash
# MetaAgent-X co-training, CPU-sized (the embedded model, math, our DSL design format): the
# published recipe's rules (shared policy, 4 designs x 4 executions per task, executor grouped by
# question, designer / executor learning rates 1e-9 / 5e-6 swapped every 10 steps) on one machine
# (configs/autoevol_cotrain.yaml). The published recipe itself is example_cotrain_autoeval.sh.
# From the SFT cold start:   INIT=outputs/autoevol_sft/<run> bash example_cotrain_autoeval_cpu.sh
# Extra arguments go to the trainer (e.g. trainer.total_steps=10); --dry-run prints the config.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" -m pettingllms.train --config-name autoevol_cotrain "trainer.checkpoint.init_from=${INIT:-}" "$@"
