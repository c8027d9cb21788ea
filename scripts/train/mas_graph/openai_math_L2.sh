#!/usr/bin/env bash
# Graph-based MAS: train an unmodified openai-client program (examples/openai_math/program.py: a
# solver and a verifier) on easy math, one LoRA adapter per agent (L2) on the embedded model.
# The program runs as it is; its calls reach the trainer's gateway on 127.0.0.1 and become samples.
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"  # env.options.program is imported from the working directory
exec "$PYTHON" -m pettingllms.train --config-name graph_openai_math "$@"
