#!/usr/bin/env bash
# MetaAgent-X browser demo: the designer writes a multi-agent system per question, the executor
# runs it in the sandbox; the page shows the design, pipeline, node traces, logs and the result.
#   bash scripts/evaluate/autoevol/serve_ui.sh                       # 127.0.0.1:8899, embedded model
#   HOST=127.0.0.1 PORT=8899 MODEL=Qwen/Qwen2.5-1.5B-Instruct bash scripts/evaluate/autoevol/serve_ui.sh
#   START_VLLM=false OPENAI_BASE_URL=http://127.0.0.1:8000/v1 bash ...   # use a running server
# Engine: START_VLLM=false -> the running OpenAI-compatible server at OPENAI_BASE_URL; otherwise
# `vllm serve` is started (VLLM_PORT, default 8000) where vLLM is installed, else the in-process
# HF engine (ENGINE=hf forces it). Weights: CHECKPOINT (mas.checkpoint; default auto = the newest
# cold start of scripts/train/autoeval/sft_cold_start.sh made on MODEL, else the base model; none;
# or a run folder / checkpoint); the page and the log say which. Extra key=value arguments override
# the config (configs/mas_demo.yaml); --dry-run prints the config and exits. It binds 127.0.0.1
# unless you set HOST.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
export HOST="${HOST:-127.0.0.1}" PORT="${PORT:-8899}"
MODEL="${MODEL:-embedded:smollm2-135m-instruct}"
# The released MetaAgent-X model (Mercury7353/MetaAgent-X) writes designs in the `workflow` format
# (docs/metaagent_x.md); DESIGN_FORMAT=workflow|pettingllms sets it for any other model or folder.
case "$MODEL" in *[Mm]eta[Aa]gent-[Xx]*) DESIGN_FORMAT="${DESIGN_FORMAT:-workflow}" ;; esac
set -- "mas.design_format=${DESIGN_FORMAT:-pettingllms}" "$@"
START_VLLM="${START_VLLM:-auto}"
VLLM_PORT="${VLLM_PORT:-8000}"
CHECKPOINT="${CHECKPOINT:-auto}"
ENTRY="${ENTRY:-pettingllms.ui.serve}"
DRY=false
for a in "$@"; do [ "$a" = "--dry-run" ] && DRY=true; done

ENGINE_ARGS=()
if [ "${ENGINE:-}" = "hf" ]; then
  ENGINE_ARGS=(rollout.engine=hf)
elif [ "$START_VLLM" = "false" ]; then
  BASE_URL="${OPENAI_BASE_URL:-http://127.0.0.1:$VLLM_PORT/v1}"
  ENGINE_ARGS=(rollout.engine=openai "rollout.openai.base_url=$BASE_URL")
elif [ "$DRY" = false ] && "$PYTHON" -c "import vllm" >/dev/null 2>&1; then
  SERVED="$("$PYTHON" -c "import sys; from pettingllms.utils.models import resolve_model_path as r; print(r(sys.argv[1]))" "$MODEL")"
  VLLM_BIN="$(dirname "$PYTHON")/vllm"
  [ -x "$VLLM_BIN" ] || VLLM_BIN=vllm
  echo "starting vllm serve $SERVED on 127.0.0.1:$VLLM_PORT" >&2
  # LoRA on, adapters loadable at run time: the demo sends the cold-start adapter (if any) to it
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "$VLLM_BIN" serve "$SERVED" --host 127.0.0.1 --port "$VLLM_PORT" \
    --enable-lora --max-lora-rank "${VLLM_MAX_LORA_RANK:-64}" >"${VLLM_LOG:-/tmp/pettingllms-vllm.log}" 2>&1 &
  VLLM_PID=$!
  trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$VLLM_PORT/v1/models" >/dev/null 2>&1 && break
    kill -0 "$VLLM_PID" 2>/dev/null || { echo "vllm serve exited; see ${VLLM_LOG:-/tmp/pettingllms-vllm.log}" >&2; exit 1; }
    sleep 2
  done
  ENGINE_ARGS=(rollout.engine=openai "rollout.openai.base_url=http://127.0.0.1:$VLLM_PORT/v1")
fi
"$PYTHON" -m "$ENTRY" --config-name mas_demo "model.path=$MODEL" "mas.checkpoint=$CHECKPOINT" ${ENGINE_ARGS[@]+"${ENGINE_ARGS[@]}"} "$@"
