#!/usr/bin/env bash
# Create .venv (if missing) and install everything the workbook needs, then assemble the model.
# Safe to re-run: each step is skipped when its result is already there. Each step prints its
# seconds, and .venv/.install-times keeps them (tab-separated) for `make bench-course`.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
LLAMA_CPP_VERSION=0.3.36  # keep in step with pyproject.toml
STAMP="$VENV/.installed"
TIMES="$VENV/.install-times"

# step NAME COMMAND...: run COMMAND, print and log how long it took.
step() {
    local name=$1 start=$SECONDS
    shift
    "$@"
    echo "[setup] $name: $(( SECONDS - start )) s"
    printf '%s\t%s\n' "$name" "$(( SECONDS - start ))" >> "$TIMES"
}

venv_seconds=""
if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV with $($PYTHON --version)"
    start=$SECONDS
    "$PYTHON" -m venv "$VENV"
    venv_seconds=$(( SECONDS - start ))
fi

want="$(cat pyproject.toml setup/install.sh setup/llama_cpp_no_common.cmake | sha256sum | cut -c1-16)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    printf '# %s cores, %s\n' "$(nproc)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$TIMES"
    [ -z "$venv_seconds" ] || printf 'venv\t%s\n' "$venv_seconds" >> "$TIMES"
    # CPU build of torch first: otherwise `pip install -e .` takes PyPI's multi-GB CUDA build.
    # Outside this workplace, set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
    echo "[setup] installing torch==2.13.0 (CPU)"
    step torch "$VENV/bin/pip" install --quiet ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} torch==2.13.0
    # llama-cpp-python compiles llama.cpp from source. Only the libraries its Python package
    # loads are built:
    # - GGML_NATIVE=OFF: a portable AVX2 build; -march=native also turns on AMX tile
    #   instructions, which crash inside some virtual machines.
    # - LLAVA_BUILD=OFF: no libmtmd (images and audio for multimodal models; the workbook is text).
    # - setup/llama_cpp_no_common.cmake: no common library (llama.cpp's own HTTP client,
    #   chat-format parsers and command-line tools; llama-cpp-python's server does not use it).
    # --no-cache-dir keeps pip from reusing a wheel built with other flags.
    echo "[setup] building llama-cpp-python from source (about 2 minutes on 2 cores)"
    step llama-cpp-python env \
        CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE='$PWD/setup/llama_cpp_no_common.cmake'" \
        CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$VENV/bin/pip" install --quiet --no-cache-dir "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
    echo "[setup] installing the workbook and its other dependencies"
    # "compat" editable mode puts the repo root on sys.path. The default mode's import hook loses
    # to the stray site-packages/lib/ folder (of shared libraries) that llama-cpp-python installs.
    step packages "$VENV/bin/pip" install --quiet -e . --config-settings editable_mode=compat
    echo "$want" > "$STAMP"
fi

if [ -f "$TIMES" ] && ! grep -q '^model' "$TIMES"; then
    step model "$VENV/bin/python" setup/get_model.py
else
    "$VENV/bin/python" setup/get_model.py
fi

# MiniLM vectors of the two training pools (.cache/embeddings/), so that no notebook and no first
# `make test` embeds them: about 40 s once, then read in well under a second.
if [ -f "$TIMES" ] && ! grep -q '^embeddings' "$TIMES"; then
    step embeddings "$VENV/bin/python" setup/embed_pools.py
else
    "$VENV/bin/python" setup/embed_pools.py
fi
