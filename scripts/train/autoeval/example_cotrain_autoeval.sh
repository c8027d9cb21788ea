#!/usr/bin/env bash
# MetaAgent-X co-training as published (configs/autoevol_cotrain_published.yaml): Qwen3-1.7B, full
# fine-tuning, one shared policy, math + code (env autoevol_mixed, math_ratio 0.5), 4 designs x 4
# executions, executor grouped by question, 8k prompt / 8k response tokens, batch 8, 400 steps,
# designer / executor learning rates 1e-9 / 5e-6 swapped every 10 steps, designs in the released
# `workflow` format, the published reward terms; verl + vLLM on 8 GPUs (GPUS=N to change).
# The CPU-sized variant: example_cotrain_autoeval_cpu.sh. MODEL=<hub id or folder> to change the
# model, INIT=<run> to start from a checkpoint. Extra arguments go to the trainer; --dry-run
# prints the composed config.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cd "$ROOT"
exec "$PYTHON" -m pettingllms.train --config-name autoevol_cotrain_published \
  "model.path=${MODEL:-Qwen/Qwen3-1.7B}" "trainer.n_gpus_per_node=${GPUS:-8}" \
  "trainer.checkpoint.init_from=${INIT:-}" "$@"
