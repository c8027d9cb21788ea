# Sourced (not run) by the paper-row recipes in scripts/train/<env>/*.sh:
#     recipe train|eval CONFIG ENV EXPERIMENT "$@"
# runs `python -m pettingllms.train` (or `pettingllms.evaluate`) on configs/CONFIG.yaml with
# env=ENV experiment=EXPERIMENT, the env's generation budget, then the caller's arguments
# (last, so they win; --dry-run prints the composed config and exits).
#
# The five paper rows per env, and the config each uses:
#   single agent          eval   single_grpo       <env>_single   <env>_single_untrained.sh
#   single agent + GRPO   train  single_grpo       <env>_single   <env>_single.sh
#   MAS                   eval   at_grpo_shared    <env>          <env>_mas_untrained.sh
#   MAS + AT-GRPO shared  train  at_grpo_shared    <env>          <env>_single_policy.sh
#   MAS + AT-GRPO per-role train at_grpo_per_role  <env>          <env>_two_policy.sh
# (math uses its own math_* configs; see scripts/train/math/.) Evaluate a trained run with the
# exact config it trained with:
#   bash scripts/evaluate/evaluate.sh --config-dir RUN --config-name config eval.checkpoint=RUN
# and build the table with scripts/results/make_table.py.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"

# New tokens per turn, by env family: the same for all five rows of an env so they compare
# fairly (code answers are whole programs; the others are a short program or a move list).
recipe_budget() {
  case "${1%_single}" in
    code) echo "rollout.sampling.max_new_tokens=512" ;;
    *) echo "rollout.sampling.max_new_tokens=256" ;;
  esac
}

recipe() {
  local mode="$1" config="$2" env="$3" experiment="$4" module
  shift 4
  case "$mode" in
    train) module=pettingllms.train ;;
    eval) module=pettingllms.evaluate ;;
    *) echo "recipe: mode must be train or eval, not '$mode'" >&2; return 2 ;;
  esac
  exec "$PYTHON" -m "$module" --config-name "$config" "env=$env" "experiment=$experiment" \
    "$(recipe_budget "$env")" "$@"
}
