#!/usr/bin/env bash
# sudoku, easy level, from a cold start. The untrained embedded model (135M) almost never writes a
# valid move on sudoku_easy (4.2% avg@2: docs/results/easy_levels.md), so RL from it has flat
# groups. This recipe first teaches the plan agent the answer on solved *train* puzzles, then runs
# sudoku_easy.sh's AT-GRPO from those weights:
#   1. rows: scripts/dataprocess/build_grid_sft.py (the plan agent's real turn-1 prompt after a tool
#      turn the model generated; the solver's answer), into $DATA unless it is there;
#   2. SFT: configs/grid_cold_start.yaml into outputs/grid_cold_start/$RUN, unless that run finished;
#   3. AT-GRPO: scripts/train/sudoku/sudoku_easy.sh trainer.checkpoint.init_from=<that run> and your arguments.
#   PROBLEMS=256 bash scripts/train/sudoku/sudoku_easy_cold_start.sh [trainer overrides] [--dry-run]
# --dry-run prints the AT-GRPO config (and builds and trains nothing).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"  # ROOT, PYTHON, and cd "$ROOT"
DATA="${DATA:-datasets/sudoku_easy_sft}"
RUN="${RUN:-sudoku_easy}"
SFT_DIR="outputs/grid_cold_start/$RUN"
case " $* " in
  *" --dry-run "*) ;;
  *) [ -f "$DATA/train.jsonl" ] || "$PYTHON" scripts/dataprocess/build_grid_sft.py --out "$DATA" \
       --problems "${PROBLEMS:-256}"
     [ -f "$SFT_DIR/sft_summary.json" ] || "$PYTHON" -m pettingllms.sft --config-name grid_cold_start \
       "sft.data=$DATA/train.jsonl" "trainer.run_name=$RUN" ;;
esac
exec bash scripts/train/sudoku/sudoku_easy.sh "trainer.checkpoint.init_from=$SFT_DIR" experiment=sudoku_easy_cold_start "$@"
