#!/usr/bin/env bash
# Set up attnviz in ./.venv: a CPU build of torch unless told otherwise, then attnviz with
# its test extra. Safe to run again; it only installs what is missing.
#
#   ATTNVIZ_TORCH_INDEX=https://download.pytorch.org/whl/cu128 bash setup.sh   # CUDA build
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${ATTNVIZ_TORCH_VERSION:-2.13.0}"

if [ ! -x .venv/bin/python ]; then
    echo "attnviz: creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv .venv
fi
PY=.venv/bin/python
"$PY" -m pip install --quiet --upgrade pip

# torch first and pinned, so that nothing later resolves an unpinned torch to the multi-GB
# CUDA build on a machine without a GPU.
if ! "$PY" -c "import torch" 2>/dev/null; then
    if [ -n "${ATTNVIZ_TORCH_INDEX:-}" ]; then
        echo "attnviz: installing torch==$TORCH_VERSION from $ATTNVIZ_TORCH_INDEX"
        "$PY" -m pip install --quiet "torch==$TORCH_VERSION" --index-url "$ATTNVIZ_TORCH_INDEX"
    else
        echo "attnviz: installing torch==$TORCH_VERSION"
        "$PY" -m pip install --quiet "torch==$TORCH_VERSION"
    fi
fi

echo "attnviz: installing attnviz and its test tools"
"$PY" -m pip install --quiet -e ".[test]"

# llama.cpp, the engine GGUF users run, is the second oracle of the GGUF tests: built from
# source (a few minutes; no native CPU tuning: a native build crashes in decode on some
# CPUs). Where it cannot be built, those tests skip and say why.
if ! "$PY" -c "import llama_cpp" 2>/dev/null && [ "${ATTNVIZ_NO_LLAMA_CPP:-}" != 1 ]; then
    echo "attnviz: building llama-cpp-python for the GGUF tests (a few minutes, once)"
    CMAKE_ARGS="${ATTNVIZ_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF}" \
        "$PY" -m pip install --quiet "llama-cpp-python>=0.3" >/dev/null 2>&1 \
        || echo "attnviz: could not build llama-cpp-python; its tests will skip"
fi

# The browser tests drive the system Chromium through Playwright (Playwright's own browser
# download is not used). Install it where we can; without it those tests skip and say why.
if ! command -v chromium >/dev/null 2>&1 && [ "${ATTNVIZ_NO_CHROMIUM:-}" != 1 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "attnviz: installing chromium for the browser tests (apt-get)"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
            >/dev/null 2>&1 || echo "attnviz: could not install chromium; browser tests will skip"
    else
        echo "attnviz: no chromium found; browser tests will skip (apt-get install chromium)"
    fi
fi
# Test speech is synthesized with espeak-ng (a Debian package); without it the speech tests
# that need new audio skip and say why.
if ! command -v espeak-ng >/dev/null 2>&1 && [ "${ATTNVIZ_NO_ESPEAK:-}" != 1 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "attnviz: installing espeak-ng for the speech tests (apt-get)"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng) \
            >/dev/null 2>&1 || echo "attnviz: could not install espeak-ng; speech synthesis tests will skip"
    else
        echo "attnviz: no espeak-ng found; speech synthesis tests will skip (apt-get install espeak-ng)"
    fi
fi
"$PY" -c "import torch, attnviz; print(f'attnviz {attnviz.__version__} ready (torch {torch.__version__}, cuda available: {torch.cuda.is_available()})')"
