#!/usr/bin/env bash
# Graph-based MAS: train an unmodified AG2 (AutoGen family) program (examples/autogen_math/program.py:
# a solver Agent and a verifier Agent) on easy math, one LoRA adapter per agent (L2) on the embedded
# model. Needs the graph extra: PETTINGLLMS_EXTRAS=graph bash setup.bash.
# The program runs as it is; its calls reach the trainer's gateway on 127.0.0.1 and become samples.
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"  # env.options.program is imported from the working directory
exec "$PYTHON" -m pettingllms.train --config-name graph_autogen_math "$@"
