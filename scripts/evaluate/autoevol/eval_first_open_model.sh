#!/usr/bin/env bash
# avg@k / pass@k of one open model as both MetaAgent-X designer and executor on the math test
# split, through the project's evaluation (python -m pettingllms.evaluate, the autoevol env: k
# designs per problem, each executed once in the sandbox).
#   MODEL=Qwen/Qwen2.5-1.5B-Instruct bash scripts/evaluate/autoevol/eval_first_open_model.sh
#   MODEL=/path/to/hf/folder bash ... eval.k=8 eval.limit=100        # any evaluate override
#   bash ... eval.checkpoint=outputs/autoevol_cotrain/<run>           # a trained checkpoint
# MODEL: default Mercury7353/MetaAgent-X (the released model; its designs are in the `workflow`
# format, docs/metaagent_x.md) when the hub answers, else the embedded model (said in one line);
# or a local HF folder / a hub id. DESIGN_FORMAT=workflow|pettingllms for other models.
# CONFIG: the experiment (default autoevol_cotrain). --dry-run prints the config and exits.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
RELEASED=Mercury7353/MetaAgent-X
if [ -z "${MODEL:-}" ]; then
  if [ "${HF_HUB_OFFLINE:-0}" != 1 ] && curl -sfI --max-time 5 \
      "${HF_ENDPOINT:-https://huggingface.co}/api/models/$RELEASED" >/dev/null 2>&1; then
    MODEL=$RELEASED
  else
    MODEL=embedded:smollm2-135m-instruct
    echo "the hub does not answer: evaluating the embedded model $MODEL, not $RELEASED (set MODEL=<folder> for a local copy)" >&2
  fi
fi
# DESIGN_FORMAT unset: read from the model folder (a marker in its config, model card or chat
# template), else from its name (pettingllms/mas/design_format.py); the reason goes to stderr.
DESIGN_FORMAT="${DESIGN_FORMAT:-$("$PYTHON" -m pettingllms.mas.design_format "$MODEL")}"
set -- "mas.design_format=$DESIGN_FORMAT" "$@"
exec "$PYTHON" -m pettingllms.evaluate --config-name "${CONFIG:-autoevol_cotrain}" "model.path=$MODEL" \
  env.options.executions=1 eval.split=test "$@"
