#!/usr/bin/env bash
# plan_path_vision (the board as an image), AT-GRPO, ONE shared policy (L1: roles differ by prompt), LoRA on the language model, on the easy level.
# Default model: Qwen/Qwen2.5-VL-3B-Instruct (a GPU; learning needs a real VLM). Offline smoke run:
#   bash scripts/train/vision/plan_path_vision_L1_prompt.sh model=tiny_vl trainer.total_steps=2
# Extra arguments go to the trainer; --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train vision_L1_prompt plan_path_vision plan_path_vision_L1_prompt env.data=plan_path_easy "$@"
