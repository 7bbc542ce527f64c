#!/bin/sh
# bench/gpu_peers_prep.sh — what bench/gpu_peers.sh needs on a GPU machine
# that has no network, made here (no GPU needed): the llama.cpp CUDA backend
# through llama-cpp-python (built by pip from its source distribution with
# nvcc, sm_90 only), the mlx + mlx-cuda-13 + mlx-lm wheels, and the mlxr
# binaries with the shared libraries they link, packed into DEST (default
# .peers/ in the checkout) and DEST-2, git-excluded, carried by two
# consecutive device calls (64 MiB a call; mlx-cuda-13 alone is ~90 MB).
# Usage: bench/gpu_peers_prep.sh [DEST]   (CACHE=~/.cache/mlxr/gpu-peers)
# The llama-cpp-python wheel is kept in CACHE/wheels (delete it to rebuild:
# ~65 min on 2 cores); mlxr is rebuilt when HEAD (or MLXR_COMMIT) moves.
set -eu
LLAMA_CPP_PYTHON_VERSION=0.3.36
MLX_VERSION=0.32.4
MLX_LM_VERSION=0.32.2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.peers}
CACHE=${CACHE:-$HOME/.cache/mlxr/gpu-peers}
W=$CACHE/wheels
mkdir -p "$W"

# 1. llama-cpp-python with CUDA: a py3-none wheel (ctypes bindings + the
# libllama/libggml*.so it builds). sm_90 (H100/H200) only, no -march=native
# (built on another machine), AVX2/FMA/F16C for ggml's CPU part (every
# x86-64 host of an H200 has them), no OpenMP (ggml's own pool), no NCCL
# (one GPU), no mtmd/llava, no tools/tests/examples/server. Flash attention
# stays llama.cpp's default (auto) at run time.
if ! ls "$W"/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION-*.whl >/dev/null 2>&1; then
	SDIST=${SDIST:-}
	if [ -z "$SDIST" ]; then
		pip download -q --no-deps --no-binary :all: -d "$CACHE/sdist" \
			"llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
		SDIST=$CACHE/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
	fi
	CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF -DGGML_CUDA_NCCL=OFF -DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
	CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} \
		nice -n 19 pip wheel --no-deps --no-binary :all: --no-cache-dir -w "$W" "$SDIST"
fi

# 2. MLX on CUDA and mlx-lm, as wheels for the GPU machine's Python 3.12,
# and diskcache, which llama-cpp-python imports (their other needs, numpy,
# transformers, jinja2, protobuf, pyyaml, sentencepiece, typing-extensions
# and the nvidia-* cu13 libraries, are on that machine already).
for spec in "mlx==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION" "mlx-lm==$MLX_LM_VERSION" "diskcache==5.6.3"; do
	n=$(echo "${spec%%[=]*}" | tr - _)
	ls "$W"/$n-*.whl >/dev/null 2>&1 ||
		pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
			--platform manylinux_2_35_x86_64 -d "$W" "$spec"
done

# 3. mlxr from the committed HEAD (or MLXR_COMMIT; never the working tree),
# the CUDA worker included (nvcc here), stripped, with the shared libraries
# it links that a bare GPU machine lacks (glibc and libcuda are there).
# Staged raw in STAGE (bin/ lib/ tok/ COMMIT: runnable here too), then packed.
STAGE=$CACHE/stage
COMMIT=$(git -C "$ROOT" rev-parse --short "${MLXR_COMMIT:-HEAD}")
SRC=${MLXR_SRC:-$CACHE/src}; BUILD=${MLXR_BUILD:-$CACHE/build}
if [ "$(cat "$SRC/.commit" 2>/dev/null)" != "$COMMIT" ]; then
	rm -rf "$SRC" && mkdir -p "$SRC"
	git -C "$ROOT" archive "$COMMIT" | tar -x -C "$SRC"
	echo "$COMMIT" > "$SRC/.commit"
fi
nice -n 10 make -C "$SRC" BUILD="$BUILD" -j"${JOBS:-2}" "$BUILD/mlxr" "$BUILD/mlxr-worker" "$BUILD/mlxr-fetcher" >/dev/null
rm -rf "$STAGE" && mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/tok"
for b in mlxr mlxr-worker mlxr-fetcher; do strip -o "$STAGE/bin/$b" "$BUILD/$b"; done
ldd "$STAGE"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r l; do
	case $(basename "$l") in libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|libcuda.so*|ld-linux*) ;;
	*) cp -L "$l" "$STAGE/lib/" ;;
	esac
done
echo "$COMMIT" > "$STAGE/COMMIT"

# 4. A tokenizer for mlx-lm's load (SmolLM2's, as the CPU bench's MLX
# directories carry; its 49152 ids fit every shape): tests/fixtures.py.
PY=${PY:-$HOME/.cache/mlxr/venv/bin/python}
TOK=$(cd "$ROOT" && "$PY" -c 'import sys, pathlib, os; sys.path.insert(0, "tests"); import fixtures
fx = pathlib.Path(os.environ.get("MLXR_FIXTURES", pathlib.Path.home() / ".cache/mlxr/fixtures")); fx.mkdir(parents=True, exist_ok=True)
print(fixtures.smol_tokenizer_dir(fx))')
cp "$TOK"/* "$STAGE/tok/"

# 5. What travels. A device call carries at most 64 MiB with the checkout.
# mlxr (bin, lib, tok) as base.tar.xz; llama-cpp-python's wheel unpacked
# into llama_cpp_python.tar.xz (its SASS packs ~3x smaller than in the
# zip; the device untars it into the site folder, which is all pip does
# with a wheel); mlx-cuda-13's wheel (~90 MB, about as small as it packs)
# in two parts, the first in DEST, the rest in DEST-2 for a second call
# on the warm machine (bench/gpu_peers.sh keeps the parts in /tmp between
# calls and joins them, checking SHA-256).
rm -rf "$DEST" "$DEST-2" && mkdir -p "$DEST/whl" "$DEST-2/whl"
tar -C "$STAGE" -cf - bin lib tok COMMIT | xz -9 -T"${JOBS:-2}" > "$DEST/base.tar.xz"
U=$CACHE/unpacked && rm -rf "$U" && mkdir -p "$U"
(cd "$U" && unzip -q "$W"/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION-*.whl
 # the wheel (zip: no symbolic links) holds every library 3 times in
 # llama_cpp/lib (name.so, .so.N, .so.N.M.P) and again in lib/ with
 # include/ (llama.cpp's own install, unused by the bindings, which load
 # llama_cpp/lib/libllama.so): keep llama_cpp/, the copies as links
 rm -rf lib include
 cd llama_cpp/lib && for f in *.so *.so.[0-9]; do
	real=$(ls "${f%%.so*}".so.[0-9]*.[0-9]* 2>/dev/null | head -1)
	[ -n "$real" ] && [ "$real" != "$f" ] && cmp -s "$real" "$f" && ln -sf "$real" "$f"
 done; true)
tar -C "$U" -cf - . | nice -n 19 xz -9 -T"${JOBS:-2}" > "$DEST/whl/llama_cpp_python.tar.xz"
cp "$W"/mlx-$MLX_VERSION-*.whl "$W"/mlx_lm-$MLX_LM_VERSION-*.whl "$W"/diskcache-5.6.3-*.whl "$DEST/whl/"
CUDA_WHL=$(ls "$W"/mlx_cuda_13-$MLX_VERSION-*.whl)
(cd "$(dirname "$CUDA_WHL")" && sha256sum "$(basename "$CUDA_WHL")") > "$DEST/whl/mlx_cuda.sha256"
cp "$DEST/whl/mlx_cuda.sha256" "$DEST-2/whl/"
LIMIT_KB=${LIMIT_KB:-64000}  # under 64 MiB (65536 KiB) with the checkout
TREE_KB=$(git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 du -ck --apparent-size 2>/dev/null) | tail -1 | cut -f1)
FIRST_KB=$((LIMIT_KB - TREE_KB - $(du -sk "$DEST" | cut -f1)))
[ "$FIRST_KB" -gt 0 ] || FIRST_KB=1
head -c $((FIRST_KB * 1024)) "$CUDA_WHL" > "$DEST/whl/$(basename "$CUDA_WHL").part0"
tail -c +$((FIRST_KB * 1024 + 1)) "$CUDA_WHL" > "$DEST-2/whl/$(basename "$CUDA_WHL").part1"
[ $(($(du -sk "$DEST-2" | cut -f1) + TREE_KB)) -le "$LIMIT_KB" ] ||
	echo "warning: $(basename "$DEST")-2 is over the limit of one call: carry less in $(basename "$DEST")" >&2
echo "carry $(basename "$DEST") ($(du -sh "$DEST" | cut -f1)) in one call and $(basename "$DEST")-2 ($(du -sh "$DEST-2" | cut -f1)) in the next; checkout ${TREE_KB} KiB"
