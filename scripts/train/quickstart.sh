#!/usr/bin/env bash
# Quick start: AT-GRPO on math with the embedded SmolLM2-135M-Instruct (LoRA) on CPU (2 cores: ~5 min with bf16 instructions, ~8.5 without).
# Extra arguments go to the trainer:  bash scripts/train/quickstart.sh trainer.total_steps=2
# Print the composed config and exit:  bash scripts/train/quickstart.sh --dry-run
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" -m pettingllms.train --config-name quickstart "$@"
