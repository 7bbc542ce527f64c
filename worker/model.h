/* worker/model.h — model configuration, weights bound to the validated
 * safetensors mapping, and the forward pass.
 *
 * Architectures are descriptors: one forward pass with flags for the
 * differences (biases, q/k norm, (1+w) norms, GeGLU, soft-capping, sliding
 * windows, RoPE scaling). Reference numerics: mlx-lm's model files.
 */
#ifndef MLXR_MODEL_H
#define MLXR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/safetensors.h"
#include "common/wcapi.h"
#include "kernels/kernels.h"

typedef enum {
	ARCH_LLAMA,   /* also "mistral" */
	ARCH_QWEN2,
	ARCH_QWEN3,
	ARCH_PHI3,
	ARCH_GEMMA,
	ARCH_GEMMA2,
	ARCH_GEMMA3,  /* "gemma3_text" (and "gemma3" text-only) */
	ARCH_COUNT
} model_arch;

#define MODEL_MAX_LAYERS 512
#define MODEL_MAX_EOS 8

typedef struct {
	model_arch arch;
	char model_type[32];
	int hidden;          /* hidden_size */
	int n_layers;
	int n_heads, n_kv_heads, head_dim;
	int inter;           /* intermediate_size */
	int vocab;           /* vocab_size == embedding rows */
	int max_pos;         /* max_position_embeddings */
	float eps;
	int qkv_bias;        /* q/k/v projections have biases (qwen2, llama attention_bias) */
	int o_bias;          /* o_proj has a bias (llama attention_bias) */
	int qk_norm;         /* per-head RMSNorm of q and k (qwen3, gemma3) */
	int norm_add_one;    /* RMSNorm scales by (1 + w) (gemma family) */
	int sandwich;        /* post-attention and post-FFN norms (gemma2, gemma3) */
	int act;             /* 0 SiLU, 1 GELU tanh approximation, 2 GELU erf */
	int fused_qkv;       /* phi3: qkv_proj and gate_up_proj */
	float embed_scale;   /* multiply embeddings (gemma: sqrt(hidden)); 1 otherwise */
	float attn_scale;    /* q.k multiplier */
	float attn_softcap;  /* 0 = none */
	float final_softcap; /* 0 = none */
	int window;          /* sliding window size for sliding layers, 0 = none */
	int rot_dim;         /* rotated dims per head */
	float rope_mscale;   /* input scale of rotated dims (LongRoPE) */
	float *inv_freq;        /* [rot_dim/2] global layers */
	float *inv_freq_local;  /* [rot_dim/2] sliding layers (gemma3), else == inv_freq */
	uint8_t sliding[MODEL_MAX_LAYERS]; /* layer uses the window and local RoPE */
	int bos_id;          /* -1 if none */
	int eos_ids[MODEL_MAX_EOS];
	int n_eos;
	int tied;            /* lm_head is the embedding */
} model_config;

typedef struct {
	kq_matrix q, k, v, o;      /* phi3: q holds the fused qkv_proj */
	kq_matrix gate, up, down;  /* phi3: gate holds the fused gate_up_proj */
	float *q_bias, *k_bias, *v_bias, *o_bias; /* [rows] or NULL */
	float *attn_norm;      /* [hidden] input_layernorm */
	float *ffn_norm;       /* [hidden] pre-FFN norm */
	float *post_attn_norm; /* [hidden] sandwich only */
	float *post_ffn_norm;  /* [hidden] sandwich only */
	float *q_norm, *k_norm; /* [head_dim] qk_norm only */
} layer_weights;

typedef struct {
	model_config cfg;
	st_set st;
	kq_matrix embed;     /* [vocab][hidden] */
	kq_matrix lm_head;   /* == embed when tied */
	float *final_norm;   /* [hidden] */
	layer_weights *layers;
	uint64_t weight_bytes;      /* bytes of tensor data */
	uint64_t decode_bytes;      /* weight bytes read per decoded token */
} model;

/* Loads config.json + safetensors of a directory and validates every
 * tensor against the configuration. Returns 0 or -1 with one line in err
 * naming the file, tensor and rule. */
int model_load(model *m, const char *dir, char *err, size_t errlen);
/* The same, then (par non-NULL) the weights are copied into huge-page
 * memory before binding (st_make_resident, parallel through par). The
 * broker validates with model_load and copies nothing. */
typedef void (*model_par_fn)(int n, void (*fn)(void *arg, int i), void *arg);
int model_load_ex(model *m, const char *dir, model_par_fn par, char *err, size_t errlen);
void model_free(model *m);

/* Parses config.json bytes into cfg (no tensors). */
int model_config_parse(model_config *cfg, const char *json, size_t len, char *err, size_t errlen);
void model_config_free(model_config *cfg);
/* Wire form (broker -> worker); unpack re-checks every bound. */
#include "common/ipc.h"
void model_config_pack(const model_config *cfg, ipc_blob *b);
int model_config_unpack(model_config *cfg, ipc_rd *rd, char *err, size_t errlen);
/* Builds a model from a configuration and a tensor set that the broker
 * validated (both taken over, freed by model_free): binds every tensor,
 * re-checking shapes, but not against config.json (which the worker never
 * sees). par as for model_load_ex. */
int model_from_parts(model *m, model_config *cfg, st_set *st, model_par_fn par, char *err, size_t errlen);
const char *model_arch_name(model_arch a);

/* Memory check, before anything is allocated: a session of ctx tokens
 * needs the weights (on the host unless gpu), a KV cache of
 * 2 x layers x ctx x kv_heads x head_dim values of model_kv_dtype(), and prefill scratch for
 * `batch` tokens. Compares with /proc/meminfo's MemAvailable (skipped when
 * unreadable, as inside the sandbox: the broker checks first). 0 fits; -1
 * with the numbers in err. */
int model_check_memory(const model_config *c, uint64_t weight_bytes, int ctx, int batch, int gpu, char *err,
		       size_t errlen);

/* The KV cache and scratch of one sequence. */
typedef struct {
	int ctx;       /* capacity in tokens */
	int pos;       /* tokens already in the cache */
	int max_batch; /* tokens per forward call */
	/* [n_layers][ctx][n_kv_heads][head_dim] of kv_dt (model_kv_dtype) */
	void *k, *v;
	kdtype kv_dt;
	/* scratch for up to max_batch tokens */
	float *x, *xb, *q, *kk, *vv, *att, *tmp, *gate, *up, *fused, *scores;
	float *logits; /* [max_batch][vocab] */
	uint64_t prefilled; /* tokens run through forward since init (for tests/verbose) */
	wc_prof *prof;      /* non-NULL: model_forward adds its time per category here */
} model_state;

int model_state_init(model_state *s, const model *m, int ctx, int max_batch);
void model_state_free(model_state *s);

/* Runs n tokens (1 <= n <= max_batch) at positions s->pos.. and appends
 * them to the cache. Logits: if all_logits, s->logits holds [n][vocab];
 * else s->logits holds the last position's [vocab]. Returns 0, or -1 if the
 * context is full. */
int model_forward(const model *m, model_state *s, const int *tokens, int n, int all_logits);

/* Element type of the CPU KV cache: KDT_F32 (default: the same numbers as
 * mlx-lm's float32 reference, tests/py/test_engine_ref.py) or, with
 * MLXR_KV=f16, KDT_F16: half the bytes that decode attention reads per
 * token (at 4K context on Llama-3.2-1B, 268 MB f32 against 695 MB of
 * weights), rounding K and V to 11 significant bits (logits move by up to
 * 0.37 on the random-weight fixtures, 1.2 on soft-capped gemma2, within
 * 0.05 on the real models: tests/py/test_kv_f16.py). mlx-lm
 * itself keeps its cache in the model's dtype, f16/bf16 for most models.
 * Read from the environment at each call. */
kdtype model_kv_dtype(void);

/* Bytes of a matrix as stored (codes + scales + biases, or dense). */
uint64_t model_matrix_bytes(const kq_matrix *q);

#endif
