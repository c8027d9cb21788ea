#!/usr/bin/env bash
# MetaAgent-X cold start: build the synthetic SFT data set (designs from the DSL templates per train
# problem, executor traces from running them) if it is missing, then supervised fine-tuning (token-
# level NLL on the replies, LoRA by default) with configs/autoevol_sft.yaml. Prints the run folder;
# co-train from it with  INIT=<run folder> bash scripts/train/autoeval/example_cotrain_autoeval.sh
#   PROBLEMS=384 TRACE_PROBLEMS=32 bash scripts/train/autoeval/sft_cold_start.sh [overrides] [--dry-run]
# The measured cold start (docs/results/autoevol.md) is these defaults with TRACE_PROBLEMS=0.
# Measure the design-validity rate before / after with scripts/evaluate/autoevol/design_validity.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
DATA="${DATA:-datasets/autoevol_sft}"
case " $* " in
  *" --dry-run "*) ;;  # print the composed config only
  *) if [ ! -f "$DATA/train.jsonl" ]; then
       # the traces run on the same model / data as the SFT: config overrides go to the builder too
       OVERRIDES=()
       for a in "$@"; do case "$a" in hydra*|-*|sft.*|trainer.*) ;; *=*) OVERRIDES+=("$a") ;; esac; done
       "$PYTHON" scripts/dataprocess/build_autoevol_sft.py --out "$DATA" --problems "${PROBLEMS:-384}" \
         --trace-problems "${TRACE_PROBLEMS:-32}" ${OVERRIDES[@]+"${OVERRIDES[@]}"}
     fi ;;
esac
exec "$PYTHON" -m pettingllms.sft --config-name autoevol_sft "sft.data=$DATA/train.jsonl" "$@"
