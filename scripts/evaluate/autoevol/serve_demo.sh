#!/usr/bin/env bash
# One MetaAgent-X query end to end: design, sandboxed execution, artifacts; prints the path of
# the HTML report (index.html next to mas_design.py, mas.py, execution.log, trace.jsonl, ...).
#   bash scripts/evaluate/autoevol/serve_demo.sh QUESTION="What is 17 * 23?"
#   MODEL=... START_VLLM=false bash scripts/evaluate/autoevol/serve_demo.sh QUESTION="..."
# The engine and weights (CHECKPOINT: the cold start when there is one) are chosen as in
# serve_ui.sh; RUNS_DIR (default outputs/autoeval_interactive) holds the run.
set -euo pipefail
ARGS=()
for a in "$@"; do
  case "$a" in
    QUESTION=*) export QUESTION="${a#QUESTION=}" ;;
    *) ARGS+=("$a") ;;
  esac
done
ENTRY=pettingllms.ui.demo exec bash "$(dirname "${BASH_SOURCE[0]}")/serve_ui.sh" ${ARGS[@]+"${ARGS[@]}"}
