#!/usr/bin/env bash
# MetaAgent-X co-training, split policies: one LoRA adapter per role (L2; add
# policies=per_agent_model for one model per role), stage-wise alternation through trainer.phases
# (10 steps training one role, the other frozen) (configs/autoevol_cotrain_split.yaml).
# From the SFT cold start (run with the same policies):   INIT=outputs/autoevol_sft/<run> bash ...
# Extra arguments go to the trainer; --dry-run prints the config.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" -m pettingllms.train --config-name autoevol_cotrain_split "trainer.checkpoint.init_from=${INIT:-}" "$@"
