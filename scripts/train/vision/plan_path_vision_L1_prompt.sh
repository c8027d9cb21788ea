#!/usr/bin/env bash
# plan_path_vision (the board as an image), AT-GRPO, ONE shared policy (L1: roles differ by prompt), LoRA on the language model, on the easy level.
# Learning run (a GPU, a real VLM): bash scripts/train/vision/plan_path_vision_L1_prompt.sh model=qwen2_5_vl
# (Qwen/Qwen2.5-VL-3B-Instruct; model.path= another Qwen2-VL / Qwen2.5-VL hub id or local folder).
# Without arguments: the offline smoke model tiny_vl (CPU; learns nothing), e.g. trainer.total_steps=2.
# Extra arguments go to the trainer; --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train vision_L1_prompt plan_path_vision plan_path_vision_L1_prompt env.data=plan_path_easy "$@"
