/* common/wcapi.h — the generation request and its events, as the broker
 * and the worker both see them (the IPC codec carries these; the worker's
 * executor runs them; broker/wclient.h is the broker's handle). */
#ifndef MLXR_WCAPI_H
#define MLXR_WCAPI_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	char model_type[32];
	char chat_format[16]; /* "chatml", "qwen3", "llama3", ... */
	int chat_ok;          /* 0: the template was not recognised; ChatML fallback */
	char chat_note[256];  /* why, for the user */
	int vocab, ctx, max_pos, n_layers, hidden, n_heads, n_kv_heads;
	uint64_t weight_bytes; /* tensor bytes */
	uint64_t decode_bytes; /* weight bytes read per decoded token */
	double load_s;         /* validation + worker start + load */
	char device[96];       /* what runs the model: "cpu (avx2, 8 threads)", "cuda: NVIDIA H200 (...)" */
} wc_info;

typedef enum {
	WC_ROLE_SYSTEM,
	WC_ROLE_USER,
	WC_ROLE_ASSISTANT,
	WC_ROLE_COUNT
} wc_role;

typedef struct {
	wc_role role;
	const char *text;
	size_t len;
} wc_msg;

#define WC_MAX_STOPS 8

typedef struct {
	/* Either a conversation (rendered with the model's chat template;
	 * message text is plain text and can never be a control token) ... */
	const wc_msg *msgs;
	size_t n_msgs;
	int no_think;        /* Qwen3: thinking off */
	int continue_final;  /* assistant prefill: continue the last message */
	int trim;            /* drop oldest turns (keeping the system prompt and
			      * the last message) when the prompt does not fit;
			      * 0: a prompt that does not fit is WC_ERR_CONTEXT */
	/* ... or a raw prompt (msgs == NULL). */
	const char *prompt;
	size_t prompt_len;
	int parse_special;   /* raw prompt only: recognise special tokens */
	/* Sampling (see worker/sampler.h); temperature 0 is greedy, and so
	 * is top_p 0 (top_p 1 is off): set them through wc_request_defaults
	 * or explicitly, never from a zeroed struct. The unpacker rejects
	 * top_p outside [0, 1]. */
	float temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
	int top_k, repeat_last_n;
	uint64_t seed;
	int max_tokens;      /* <= 0: until EOS or the context is full */
	const char *stops[WC_MAX_STOPS];
	int n_stops;
} wc_request;

/* Fills r with the defaults (Ollama's sampling defaults, random seed). */
void wc_request_defaults(wc_request *r);

typedef enum {
	WC_EV_TEXT,      /* answer text: complete UTF-8 */
	WC_EV_REASONING, /* thinking text (Qwen3 <think>...</think>) */
	WC_EV_PROGRESS,  /* prefill progress: prompt_tokens, prefilled so far */
	WC_EV_END,
	WC_EV_COUNT
} wc_event_type;

typedef enum {
	WC_FINISH_STOP,      /* end of sequence or stop string */
	WC_FINISH_LENGTH,    /* max_tokens */
	WC_FINISH_CONTEXT,   /* the context filled up */
	WC_FINISH_CANCELLED,
	WC_FINISH_COUNT
} wc_finish;

typedef struct {
	wc_event_type type;
	const char *text; /* TEXT, REASONING */
	size_t len;
	/* PROGRESS and END */
	wc_finish finish;
	size_t prompt_tokens, prefilled, completion_tokens;
	double prefill_s, decode_s, ttft_s;
} wc_event;

/* Return nonzero to cancel the request (it then ends within one decode
 * step with WC_FINISH_CANCELLED). */
typedef int (*wc_event_fn)(void *arg, const wc_event *ev);

typedef enum {
	WC_ERR_NONE,
	WC_ERR_INVALID,  /* the request is invalid (bad conversation, bad ids) */
	WC_ERR_CONTEXT,  /* the prompt does not fit: prompt_tokens > ctx */
	WC_ERR_MODEL,    /* the model failed validation or loading */
	WC_ERR_WORKER,   /* the worker crashed or broke protocol */
	WC_ERR_COUNT
} wc_error_kind;

typedef struct {
	wc_error_kind kind;
	size_t prompt_tokens;
	int ctx;
	char msg[512];
} wc_error;

/* mlxr bench, run inside the worker. */
typedef struct {
	int prefill;  /* tokens of the timed prefill (512) */
	int decode;   /* decoded tokens per measurement (128) */
	int long_ctx; /* context before the second decode measurement (1024) */
} wc_bench_req;

/* Where a decode step's time goes (`mlxr bench --verbose`): wall time of
 * each kind of operation, timed on the calling thread around each kernel
 * call (so a pooled kernel counts until its last task is done), summed
 * over a decode measurement. Matvec categories and attention also count
 * the bytes they read (weights; the K/V cache rows). What is left of the
 * measured time (residual adds, the pool's hand-offs between calls, the
 * timer itself) is the broker's "other". */
typedef enum {
	WC_PROF_QKV,       /* matvec: attention q, k, v projections */
	WC_PROF_ATTN_OUT,  /* matvec: attention output projection */
	WC_PROF_GATE_UP,   /* matvec: MLP gate and up */
	WC_PROF_DOWN,      /* matvec: MLP down */
	WC_PROF_LM_HEAD,   /* matvec: output layer, and the embedding lookup */
	WC_PROF_ATTENTION, /* attention over the cache */
	WC_PROF_KV_STORE,  /* the new K/V rows into the cache (copy, or f32 -> f16) */
	WC_PROF_NORM,      /* RMSNorms (incl. q/k norms) */
	WC_PROF_ROPE,
	WC_PROF_GLU,
	WC_PROF_SAMPLE,    /* token selection between steps */
	WC_PROF_COUNT
} wc_prof_cat;

typedef struct {
	double s[WC_PROF_COUNT];       /* seconds, summed over the measurement */
	uint64_t bytes[WC_PROF_COUNT]; /* bytes read, summed over the measurement */
} wc_prof;

/* What the prefill GEMMs (n > 1 tokens) computed with, as the worker that
 * ran the benchmark reports it: F32 is f32-class on every path (the CPU's
 * f32 GEMM, AMX's exact three-term bf16 split, the GPU's f16 hi + lo
 * split); F16 is the GPU's opt-in fast prefill (--fast-prefill,
 * kc_gemm_impl(KC_GEMM_FAST)): x and the weights rounded to f16 (and the
 * prompt's attention on f16 operands, kc_attention_impl(KC_ATT_FAST)). */
typedef enum {
	WC_PREFILL_X_F32,
	WC_PREFILL_X_F16,
	WC_PREFILL_X_COUNT
} wc_prefill_x;

typedef struct {
	char kernels[16];
	int threads;
	wc_prefill_x prefill_x;
	double prefill_s;       /* seconds for `prefill` tokens */
	double decode_short_s;  /* seconds for `decode` tokens after 16 */
	double decode_long_s;   /* seconds for `decode` tokens after long_ctx */
	double mem_bw;          /* bytes/s, memory read */
	uint64_t decode_bytes;  /* weight bytes per decoded token */
	double peak_rss_mb;     /* of the worker */
	wc_prof prof_short;     /* breakdown of the short-context decode */
	wc_prof prof_long;      /* breakdown of the long-context decode */
} wc_bench_res;

/* ---- wire forms (common/wcproto.c): the broker packs, the worker unpacks,
 * and the other way round; every unpack is bounded and validates enums and
 * counts, whichever side it runs on. ---- */
#include "common/ipc.h"

/* A request travels in a sealed memfd; the unpacked strings point into its
 * mapping (valid while it is mapped). msgs is malloc'd by the unpacker. A
 * refused request's err names the field ("malformed generation request:
 * top_p"; tests/unit/test_ipc.c checks each). */
int wc_request_pack(const wc_request *r, ipc_blob *b);
int wc_request_unpack(const uint8_t *p, size_t n, wc_request *r, wc_msg **msgs, char *err, size_t errlen);
/* Frees what wc_request_unpack allocated (msgs and the stop strings). */
void wc_request_unpacked_free(wc_request *r, wc_msg *msgs);
void wc_event_pack(const wc_event *ev, ipc_wr *w);
int wc_event_unpack(const uint8_t *p, size_t n, wc_event *ev);
void wc_error_pack(const wc_error *e, ipc_wr *w);
int wc_error_unpack(const uint8_t *p, size_t n, wc_error *e);
void wc_info_pack(const wc_info *i, ipc_wr *w);
int wc_info_unpack(const uint8_t *p, size_t n, wc_info *i);
void wc_bench_res_pack(const wc_bench_res *b, ipc_wr *w);
int wc_bench_res_unpack(const uint8_t *p, size_t n, wc_bench_res *b);

#endif
