/* worker/session_cuda.h — the GPU backend of a session (session.h's
 * session_gpu) on CUDA device 0. Linked only into a worker built with
 * nvcc (MLXR_CUDA) and the GPU tests. */
#ifndef MLXR_SESSION_CUDA_H
#define MLXR_SESSION_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/ksample.h"
#include "worker/sampler.h"
#include "worker/session.h"

extern const session_gpu session_cuda;
/* cuInit, the context, the stream, the pinned slots (kc_init(0)). Call
 * after the GPU worker's Landlock step and before its seccomp step. */
int session_cuda_init(char *err, size_t errlen);
/* --fast-prefill: every prefill GEMM (n > 1 tokens, quantized weights)
 * from now on rounds x to f16 instead of splitting it into f16 hi + lo,
 * and the dequantized weights to f16 (kc_gemm_impl(KC_GEMM_FAST): about
 * half the tensor-core work, no per-group fold, 2 blocks per SM), and runs
 * the prompt's attention on the tensor cores with q, K/V and the softmax
 * weights rounded to f16 (kc_attention_impl(KC_ATT_FAST)); prefill logits
 * ~1e-3..4e-3 normwise from the CPU's instead of < 1e-4; the decode
 * kernels are the same, and decoding reads the K/V the prefill wrote).
 * Call once, before the model is opened: LOAD's warm-up
 * then runs the variant every later prefill takes, before the seccomp
 * step. Process-wide, not thread-safe. The GPU bench reports it
 * (wc_bench_res.prefill_x). */
void session_cuda_fast_prefill(void);
/* The device sampler's parameters for p (rng: the sampler's state), or -1
 * where it does not cover them: top-p / min-p without top-k (a sort of the
 * whole vocabulary), top_k > KS_MAX_K, no truncation over more than
 * KS_MAX_ALL entries; those stay on the CPU sampler. */
int session_cuda_ks_params(const sampler_params *p, int vocab, uint64_t rng, ks_params *k);

#endif
