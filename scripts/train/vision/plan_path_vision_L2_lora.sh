#!/usr/bin/env bash
# plan_path_vision (the board as an image), AT-GRPO, one LoRA adapter per agent on one shared base (L2), on the easy level.
# Default model: Qwen/Qwen2.5-VL-3B-Instruct (a GPU; learning needs a real VLM). Offline smoke run:
#   bash scripts/train/vision/plan_path_vision_L2_lora.sh model=tiny_vl trainer.total_steps=2
# Extra arguments go to the trainer; --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train vision_L2_lora plan_path_vision plan_path_vision_L2_lora env.data=plan_path_easy "$@"
