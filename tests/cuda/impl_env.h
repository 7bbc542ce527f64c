/* tests/cuda/impl_env.h — the kernel-variant switches of the GPU tests and
 * cuda-bench, read from the environment: ATT_IMPL, MV_IMPL, GEMM_IMPL,
 * RESID_IMPL and ROPE_IMPL set kc_attention_impl, kc_matvec_impl,
 * kc_gemm_impl, kc_residual_impl and kc_rope_impl
 * (kernels/cuda/kcuda.h) before anything runs; each one
 * set is printed. For A/B comparisons only: mlxr itself reads none.
 * Also what the tests expect of a variant's dispatch (att_f16_expected). */
#ifndef MLXR_TESTS_CUDA_IMPL_ENV_H
#define MLXR_TESTS_CUDA_IMPL_ENV_H

#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/kcuda.h"

/* Whether kc_attention under attention impl `impl` takes k_attn_fa16 (the
 * tensor-core kernel, KC_PATH_ATT_F16) for n queries of these heads, as
 * kcuda.h states it: impls 5 and 6, n >= 16, head_dim 64, 128 or 256, at
 * most 64 q heads per kv head (the tiled kernel's limit); the tests'
 * statement of the contract, not a copy of the dispatch. */
static inline int att_f16_expected(int impl, int n, int nh, int nkv, int hd)
{
	return (impl == 5 || impl == 6) && n >= 16 && (hd == 64 || hd == 128 || hd == 256) && nh / nkv <= 64;
}

/* Whether kc_attention takes the f32-class tensor-core kernel
 * (KC_PATH_ATT_X3): impl 0 (the default) or 7, n >= 16, head_dim 64 or
 * 128, at most 64 q heads per kv head. Like att_f16_expected this assumes
 * a device whose opt-in shared memory a block holds every variant (sm_90:
 * 227 KB; the GPU tests' machines); on smaller ones kcuda.cu falls back to
 * the tiled kernel and these expectations do not hold. */
static inline int att_x3_expected(int impl, int n, int nh, int nkv, int hd)
{
	return (impl == 0 || impl == 7) && n >= 16 && (hd == 64 || hd == 128) && nh / nkv <= 64;
}

static inline void impls_from_env(void)
{
	static const struct {
		const char *env, *what;
		int (*set)(int);
	} t[] = {
		{"ATT_IMPL", "attention", kc_attention_impl},
		{"MV_IMPL", "matvec", kc_matvec_impl},
		{"GEMM_IMPL", "gemm", kc_gemm_impl},
		{"RESID_IMPL", "residual", kc_residual_impl},
		{"ROPE_IMPL", "rope", kc_rope_impl},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		const char *v = getenv(t[i].env);
		if (v) {
			t[i].set(atoi(v));
			printf("%s impl %d\n", t[i].what, t[i].set(-1));
		}
	}
}

#endif
