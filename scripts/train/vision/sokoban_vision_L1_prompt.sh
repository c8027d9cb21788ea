#!/usr/bin/env bash
# sokoban_vision (the board as an image), AT-GRPO, ONE shared policy (L1: roles differ by prompt), LoRA on the language model, on the easy level.
# Default model: Qwen/Qwen2.5-VL-3B-Instruct (a GPU; learning needs a real VLM). Offline smoke run:
#   bash scripts/train/vision/sokoban_vision_L1_prompt.sh model=tiny_vl trainer.total_steps=2
# Extra arguments go to the trainer; --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train vision_L1_prompt sokoban_vision sokoban_vision_L1_prompt env.data=sokoban_easy "$@"
