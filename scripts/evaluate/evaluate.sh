#!/usr/bin/env bash
# avg@k and pass@k per env and benchmark, for the base model or a checkpoint:
#   bash scripts/evaluate/evaluate.sh --config-name quickstart eval.k=4
#   bash scripts/evaluate/evaluate.sh --config-name quickstart eval.checkpoint=outputs/quickstart/<run>
# (a run folder means its latest checkpoint). --dry-run prints the config and exits.
# Several models in turn, one comparison table at the end (the seed README's form): set the two
# variables below, or MODEL_PATHS="a b" (space-separated) and CONFIG_NAME=... in the environment.
# CONFIG_NAME may be one of the seed's names (math_single_policy = our math_L1_prompt).
set -euo pipefail
ENV_MODEL_PATHS="${MODEL_PATHS:-}"
MODEL_PATHS=()                 # e.g. MODEL_PATHS=("/path/to/your/model" "Qwen/Qwen3-1.7B")
CONFIG_NAME="${CONFIG_NAME:-}"  # e.g. CONFIG_NAME="math_single_policy"
[ -n "$ENV_MODEL_PATHS" ] && [ ${#MODEL_PATHS[@]} -eq 0 ] && read -r -a MODEL_PATHS <<< "$ENV_MODEL_PATHS"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
case "$CONFIG_NAME" in  # the seed's config names where ours differ
  math_single_policy) echo "CONFIG_NAME=math_single_policy is math_L1_prompt here" >&2; CONFIG_NAME=math_L1_prompt ;;
esac
ARGS=("$@")
[ -n "$CONFIG_NAME" ] && ARGS=(--config-name "$CONFIG_NAME" "$@")
[ ${#MODEL_PATHS[@]} -eq 0 ] && exec "$PYTHON" -m pettingllms.evaluate ${ARGS[@]+"${ARGS[@]}"}
RESULTS=()
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
for model in "${MODEL_PATHS[@]}"; do
  echo "== evaluating $model" >&2
  "$PYTHON" -m pettingllms.evaluate ${ARGS[@]+"${ARGS[@]}"} "model.path=$model" | tee "$LOG"
  file="$(sed -n 's/^results: //p' "$LOG" | tail -n 1)"
  [ -n "$file" ] && RESULTS+=("$file")
done
[ ${#RESULTS[@]} -eq 0 ] && exit 0  # --dry-run: configs only
echo "== comparison (${#RESULTS[@]} models)"
"$PYTHON" -c 'import json, sys; from pettingllms.trainer.evaluation import format_table
print(format_table([json.load(open(p)) for p in sys.argv[1:]], by_model=True))' "${RESULTS[@]}"
