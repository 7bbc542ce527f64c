#!/bin/sh
# bench/gpu_peers.sh — on the GPU machine (no network): installs what
# bench/gpu_peers_prep.sh made (carried as .peers and, in the next call on
# the same warm machine, .peers-2: mlx-cuda-13's wheel travels in two
# parts), then runs bench/gpu_peers.py with the arguments given. Engines
# whose wheels are not (yet) complete are left out and said so.
#     bench/gpu_peers.sh [--check] [gpu_peers.py args...]
# --check: only install and report versions and library resolution.
# Parts and wheels are kept in KEEP (/tmp/gpu-peers-keep) between calls.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KEEP=${KEEP:-/tmp/gpu-peers-keep}
SITE=${SITE:-/tmp/gpu-peers-site}
PEERS=$KEEP/base  # mlxr's bin/ lib/, tok/ (a tokenizer for mlx-lm), COMMIT
mkdir -p "$KEEP"
for d in "$ROOT"/.peers "$ROOT"/.peers-2; do
	[ -d "$d/whl" ] && cp "$d"/whl/* "$KEEP/" 2>/dev/null
	[ -f "$d/base.tar.xz" ] && rm -rf "$PEERS" && mkdir -p "$PEERS" && tar -xJf "$d/base.tar.xz" -C "$PEERS"
done
[ -x "$PEERS/bin/mlxr" ] || { echo "no mlxr here: carry .peers (bench/gpu_peers_prep.sh)"; exit 1; }
# mlx-cuda-13: join the parts once both have come
if ! ls "$KEEP"/mlx_cuda_13-*.whl >/dev/null 2>&1 && [ -f "$KEEP/mlx_cuda.sha256" ]; then
	name=$(awk '{print $2}' "$KEEP/mlx_cuda.sha256")
	if [ -f "$KEEP/$name.part0" ] && [ -f "$KEEP/$name.part1" ]; then
		cat "$KEEP/$name.part0" "$KEEP/$name.part1" > "$KEEP/$name"
		(cd "$KEEP" && sha256sum -c mlx_cuda.sha256) || rm -f "$KEEP/$name"
	else
		echo "mlx-cuda-13: $(ls "$KEEP"/*.part* 2>/dev/null | wc -l) of 2 parts here"
	fi
fi
have_mlx=0
ls "$KEEP"/mlx_cuda_13-*.whl >/dev/null 2>&1 && have_mlx=1
rm -rf "$SITE" && mkdir -p "$SITE"
tar -xJf "$KEEP/llama_cpp_python.tar.xz" -C "$SITE" || exit 1  # the wheel's files, as pip would place them
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$KEEP"/diskcache-*.whl
if [ $have_mlx = 1 ]; then
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
		"$KEEP"/mlx-*.whl "$KEEP"/mlx_cuda_13-*.whl "$KEEP"/mlx_lm-*.whl || { echo "mlx wheels: install failed"; have_mlx=2; }
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# libcudart/libcublas (llama.cpp) and the cu13 libraries mlx-cuda links: the
# CUDA toolkit's and the nvidia-* packages of the machine's Python
NV=$(python3 -c 'import nvidia, glob; print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib"))))' 2>/dev/null)
export LD_LIBRARY_PATH="${NV:+$NV:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pip list 2>/dev/null | grep -i -E '^(nvidia-(cublas|cuda-runtime|cuda-nvrtc|cudnn|nccl|cufft|cusolver)|numpy|transformers) '
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ldd "$SITE"/llama_cpp/lib/libggml-cuda.so | grep -E 'cuda|cublas|not found'
python3 -c 'import llama_cpp; print("llama-cpp-python", llama_cpp.__version__, "gpu offload:", llama_cpp.llama_supports_gpu_offload())' || echo "llama-cpp-python: import failed"
ENGINES="mlxr mlxr-fast llama.cpp"
if [ $have_mlx = 1 ]; then
	if python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device(), mx.gpu, (mx.ones(4) * 2).sum().item())'; then
		ENGINES="$ENGINES mlx-lm"
	else
		echo "mlx: import or GPU op failed: mlx-lm left out"
	fi
elif [ $have_mlx = 0 ]; then
	echo "mlx-cuda-13 not complete here: mlx-lm left out"
fi
[ "${1:-}" = "--check" ] && exit 0
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 exec python3 "$ROOT/bench/gpu_peers.py" --peers "$PEERS" --engines $ENGINES "$@"
