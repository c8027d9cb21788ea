#!/usr/bin/env bash
# GPU smoke test: run it first on a new GPU machine (docs/gpus.md). Each case prints PASS/FAIL/SKIP,
# then SUMMARY: N pass, M fail, K skip. Exit 1 if any case failed.
#   bash scripts/gpu/smoke.sh [--dry-run] [--model PATH] [--case NAME ...]
# Machines without this package's light dependencies (omegaconf; hydra-core and antlr4 for the
# plan and verl cases) and no registry: put their wheels in a folder and set
# PETTINGLLMS_WHEELS=/that/folder; they are unpacked (no index, no deps) into a temporary folder
# on PYTHONPATH for this run only.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
if [ -n "${PETTINGLLMS_WHEELS:-}" ]; then
  site="$(mktemp -d)"
  trap 'rm -rf "$site"' EXIT
  "$PY" -m pip install --quiet --no-index --no-deps --target "$site" "$PETTINGLLMS_WHEELS"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" scripts/gpu/smoke.py "$@"
