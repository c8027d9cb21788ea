#!/usr/bin/env bash
# The paper's results table in miniature, end to end on ONE env: build a small dataset, evaluate
# the untrained single agent and MAS, train single+GRPO, AT-GRPO shared and AT-GRPO per-role for
# a step or two through the scripts/train recipes, evaluate each run, then make_table.py.
# Sized for CPU minutes on the embedded model: it shows the pipeline works, not who wins.
#   bash scripts/results/run_small_table.sh                        # plan_path, embedded model
#   SMALL_ENV=math bash scripts/results/run_small_table.sh model=tiny   # key=value go to every run
#   bash scripts/results/run_small_table.sh --dry-run              # print each row's config only
# Settings (environment variables): SMALL_ENV (plan_path | sudoku | sokoban | code | math),
#   SMALL_WORK (outputs/small_table), SMALL_TAG (a timestamp), SMALL_STEPS (1), SMALL_PROBLEMS (4
#   test problems), SMALL_K (2: samples per problem, for eval and training), SMALL_TOKENS (96),
#   SMALL_SEEDS (0; e.g. 0,1,2: every row is a Hydra multirun over these seeds, one table per seed).
# Output: $SMALL_WORK/$SMALL_TAG/{runs,evals,results,table}; the table is table/results_table.{md,png}
# (with several seeds: table/seed_<s>/ from results/seed_<s>/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"

ENV_NAME="${SMALL_ENV:-plan_path}"
WORK="${SMALL_WORK:-outputs/small_table}"
TAG="${SMALL_TAG:-$(date +%Y%m%d-%H%M%S)}"
STEPS="${SMALL_STEPS:-1}" PROBLEMS="${SMALL_PROBLEMS:-4}" K="${SMALL_K:-2}" TOKENS="${SMALL_TOKENS:-96}"
SEEDS="${SMALL_SEEDS:-0}"
IFS=, read -r -a SEED_LIST <<< "$SEEDS"
OUT="$WORK/$TAG"
RECIPES="scripts/train/$ENV_NAME"

DRY=0 EXTRA=()
for a in "$@"; do
  if [ "$a" = --dry-run ]; then DRY=1; else EXTRA+=("$a"); fi
done

# Small data in the work folder (never touches datasets/); math uses the easy arithmetic preset.
DATA=()
build_data() {
  local dest="$WORK/datasets"
  case "$ENV_NAME" in
    plan_path|sudoku|sokoban)
      [ -f "$dest/$ENV_NAME/test.parquet" ] || "$PYTHON" "scripts/dataprocess/load_$ENV_NAME.py" \
        --out "$dest/$ENV_NAME" --n-train 32 --n-test "$PROBLEMS" >/dev/null ;;
    code)
      [ -f "$dest/code/test.parquet" ] || "$PYTHON" scripts/dataprocess/load_code.py --offline \
        --out "$dest/code" --io-tasks 16 --humaneval-limit 16 >/dev/null ;;
    math)
      [ -f "$dest/math_easy/test.parquet" ] || "$PYTHON" scripts/dataprocess/load_math.py --offline \
        --preset math_easy --out "$dest/math_easy" >/dev/null ;;
    *) echo "SMALL_ENV must be one of plan_path sudoku sokoban code math, not '$ENV_NAME'" >&2; exit 2 ;;
  esac
}
build_data_or_skip() { if [ "$DRY" = 1 ]; then return 0; fi; build_data; }
build_data_or_skip
[ "$ENV_NAME" = math ] && DATA=(env.data=math_easy)

# Row recipes: the shared-policy and per-role rows of math have math-specific names.
SHARED="$RECIPES/${ENV_NAME}_single_policy.sh" PER_ROLE="$RECIPES/${ENV_NAME}_two_policy.sh"
if [ "$ENV_NAME" = math ]; then SHARED="$RECIPES/math_L1_prompt.sh" PER_ROLE="$RECIPES/math_L2_lora.sh"; fi

SMALL=(env.data_root="$WORK/datasets" "${DATA[@]}" env.max_turns=2 env.train_limit=32
       trainer.output_dir="$OUT/runs" trainer.total_steps="$STEPS"
       trainer.checkpoint.save_freq=0 trainer.validation.val_freq=0 trainer.logging.progress_bar=false
       rollout.k="$K" rollout.batch_size=2 rollout.sampling.max_new_tokens="$TOKENS"
       eval.k="$K" eval.limit="$PROBLEMS")
[ "$DRY" = 1 ] && SMALL+=(--dry-run)

# Each row is one multirun over the seeds: job <n> (folder <sweep dir>/<n>) has seed SEED_LIST[n].
seed_results() { if [ "${#SEED_LIST[@]}" = 1 ]; then echo "$OUT/results"; else echo "$OUT/results/seed_$1"; fi; }
evaluate_base() {  # ROW RECIPE: an eval-only recipe; results/ROW.json per seed
  echo "== $1: $2"
  local sweep="$OUT/evals/$1" n
  bash "$2" "${SMALL[@]}" -m "seed=$SEEDS" "hydra.sweep.dir=$sweep" "${EXTRA[@]}"
  [ "$DRY" = 1 ] && return 0
  for n in "${!SEED_LIST[@]}"; do
    mkdir -p "$(seed_results "${SEED_LIST[$n]}")"
    cp "$sweep/$n"/eval_*.json "$(seed_results "${SEED_LIST[$n]}")/$1.json"
  done
}
train_and_evaluate() {  # ROW RECIPE EXPERIMENT: train, then evaluate each run with its own config
  echo "== $1: $2"
  local sweep="$OUT/runs/$3/small" n
  bash "$2" "${SMALL[@]}" -m "seed=$SEEDS" "hydra.sweep.dir=$sweep" "${EXTRA[@]}"
  [ "$DRY" = 1 ] && return 0
  for n in "${!SEED_LIST[@]}"; do
    bash scripts/evaluate/evaluate.sh --config-dir "$sweep/$n" --config-name config \
      eval.checkpoint="$sweep/$n" eval.output="$(seed_results "${SEED_LIST[$n]}")/$1.json"
  done
}

evaluate_base single "$RECIPES/${ENV_NAME}_single_untrained.sh"
train_and_evaluate single_grpo "$RECIPES/${ENV_NAME}_single.sh" "${ENV_NAME}_single"
evaluate_base mas "$RECIPES/${ENV_NAME}_mas_untrained.sh"
train_and_evaluate at_grpo_shared "$SHARED" "$(basename "$SHARED" .sh)"
train_and_evaluate at_grpo_per_role "$PER_ROLE" "$(basename "$PER_ROLE" .sh)"

if [ "$DRY" = 1 ]; then exit 0; fi
title="$ENV_NAME, $STEPS training step(s), $PROBLEMS test problems, k=$K"
if [ "${#SEED_LIST[@]}" = 1 ]; then
  "$PYTHON" scripts/results/make_table.py "$OUT/results" --out-dir "$OUT/table" --metric both --title "$title"
else
  for s in "${SEED_LIST[@]}"; do
    "$PYTHON" scripts/results/make_table.py "$OUT/results/seed_$s" --out-dir "$OUT/table/seed_$s" --metric both \
      --title "$title, seed $s"
  done
fi
