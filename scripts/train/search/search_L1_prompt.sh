#!/usr/bin/env bash
# Search: search_reasoning_agent + web_search_agent, MAS + AT-GRPO with one shared LoRA policy
# (configs/search_L1_prompt.yaml), on the synthetic 2-hop data with in-process BM25 (built on first use).
# A FlashRAG retrieval server instead: env.options.search_url=http://HOST:PORT/retrieve (or SEARCH_API_URL),
# with env.data=<a folder from scripts/dataprocess/load_search.py --hub>.
# Extra arguments go to the trainer (e.g. trainer.total_steps=10 rollout.k=8); --dry-run prints the config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_recipe.bash"
recipe train search_L1_prompt search search_L1_prompt "$@"
