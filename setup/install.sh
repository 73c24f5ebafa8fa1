#!/usr/bin/env bash
# Create .venv (if missing) and install everything the workbook needs, then assemble the model.
# Safe to re-run: each step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
LLAMA_CPP_VERSION=0.3.36  # keep in step with pyproject.toml
STAMP="$VENV/.installed"

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi

want="$(cat pyproject.toml setup/install.sh | sha256sum | cut -c1-16)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    start=$(date +%s)
    # CPU build of torch first: otherwise sentence-transformers pulls a multi-GB CUDA build.
    # Outside this workplace, set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
    echo "[setup] installing torch==2.13.0 (CPU)"
    "$VENV/bin/pip" install --quiet ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} torch==2.13.0
    # llama-cpp-python compiles llama.cpp from source (about 5 minutes on 2 cores). A portable
    # AVX2 build: -march=native also turns on AMX tile instructions, which crash inside some
    # virtual machines. --no-cache-dir keeps pip from reusing a wheel built with other flags.
    echo "[setup] building llama-cpp-python from source (about 5 minutes on 2 cores)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$VENV/bin/pip" install --quiet --no-cache-dir "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
    echo "[setup] installing the workbook and its other dependencies"
    # "compat" editable mode puts the repo root on sys.path. The default mode's import hook loses
    # to the stray site-packages/lib/ folder (of shared libraries) that llama-cpp-python installs.
    "$VENV/bin/pip" install --quiet -e . --config-settings editable_mode=compat
    echo "$want" > "$STAMP"
    echo "[setup] packages installed in $(( $(date +%s) - start )) s"
fi

"$VENV/bin/python" setup/get_model.py
