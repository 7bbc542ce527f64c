#!/bin/sh
# bench/setup_peers.sh — the peer engine for bench/run.py: llama.cpp through
# llama-cpp-python, built by pip from its source distribution (native CPU
# flags: AVX-512/VNNI where the machine has them, as a user's `pip install`
# would give), into its own virtual environment, never the test venv.
# Idempotent: a venv that already imports the pinned version is kept.
# Usage: bench/setup_peers.sh [VENV]   (default ~/.cache/mlxr/bench-venv)
set -eu
LLAMA_CPP_PYTHON_VERSION=0.3.36
VENV=${1:-$HOME/.cache/mlxr/bench-venv}
if [ -x "$VENV/bin/python" ] &&
   "$VENV/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_PYTHON_VERSION')" 2>/dev/null &&
   [ -f "$VENV/.mlxr-build-v2" ]; then
	exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# GGML_NATIVE: -march=native, what a local source build does by default.
# AMX off: the 2-vCPU VMs this is run on report AMX in CPUID but do not
# grant the tile state, and ggml's AMX path dies there with SIGILL on its
# first tilezero (GCC keeps an explicit -mno-* over -march=native).
# OpenMP off: ggml's own thread pool, the same n_threads as the others.
CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_C_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16 -DCMAKE_CXX_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16" \
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} \
	"$VENV/bin/pip" install --force-reinstall --no-binary llama-cpp-python --no-cache-dir \
	"llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
"$VENV/bin/python" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"
touch "$VENV/.mlxr-build-v2" # the build flags above; bump to rebuild
