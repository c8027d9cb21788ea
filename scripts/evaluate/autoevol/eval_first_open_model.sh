#!/usr/bin/env bash
# avg@k / pass@k of one open model as both MetaAgent-X designer and executor on the math test
# split, through the project's evaluation (python -m pettingllms.evaluate, the autoevol env: k
# designs per problem, each executed once in the sandbox).
#   MODEL=Qwen/Qwen2.5-1.5B-Instruct bash scripts/evaluate/autoevol/eval_first_open_model.sh
#   MODEL=/path/to/hf/folder bash ... eval.k=8 eval.limit=100        # any evaluate override
#   bash ... eval.checkpoint=outputs/autoevol_cotrain/<run>           # a trained checkpoint
# MODEL: embedded:smollm2-135m-instruct (default), a local HF folder or a hub id.
# CONFIG: the experiment (default autoevol_cotrain). --dry-run prints the config and exits.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
MODEL="${MODEL:-embedded:smollm2-135m-instruct}"
exec "$PYTHON" -m pettingllms.evaluate --config-name "${CONFIG:-autoevol_cotrain}" "model.path=$MODEL" \
  env.options.executions=1 eval.split=test "$@"
