/* worker/import.c — GGUF file → MLX model directory (see import.h).
 *
 * Steps: read the file, parse it (gguf.c validates every count, offset and
 * size), map each tensor name to its Hugging Face / mlx-lm name, undo what
 * llama.cpp's convert_hf_to_gguf.py changed (row permutation of q/k for
 * "llama", norm weights stored as 1+w for the Gemma family), convert the
 * data, then write model.safetensors, config.json and the tokenizer files.
 */
#include "worker/import.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "common/modelfiles.h"

/* Files above this are refused: the import holds the file and its
 * converted copy in memory. 64 GiB covers 70B-class 4-bit models. */
#define IMPORT_MAX_FILE (64ull << 30)
#define IMPORT_MAX_LAYERS 1024 /* the largest public models have < 200 */

enum {
	ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_GEMMA, ARCH_GEMMA2, ARCH_GEMMA3, ARCH_COUNT
};

/* Architecture descriptors: what differs between families. */
static const struct arch_desc {
	const char *gguf;       /* general.architecture */
	const char *model_type; /* config.json model_type (mlx-lm module) */
	const char *hf_class;   /* config.json architectures[0] */
	int permute_qk;         /* convert_hf_to_gguf LlamaModel.permute on q/k rows */
	int norm_plus_one;      /* Gemma: the file stores 1+w for every *norm.weight */
	int gemma_norms;        /* four norms per layer (pre/post attention and ffw) */
} arch_descs[ARCH_COUNT] = {
	[ARCH_LLAMA] = { "llama", "llama", "LlamaForCausalLM", 1, 0, 0 },
	[ARCH_QWEN2] = { "qwen2", "qwen2", "Qwen2ForCausalLM", 0, 0, 0 },
	[ARCH_QWEN3] = { "qwen3", "qwen3", "Qwen3ForCausalLM", 0, 0, 0 },
	[ARCH_GEMMA] = { "gemma", "gemma", "GemmaForCausalLM", 0, 1, 0 },
	[ARCH_GEMMA2] = { "gemma2", "gemma2", "Gemma2ForCausalLM", 0, 1, 1 },
	[ARCH_GEMMA3] = { "gemma3", "gemma3_text", "Gemma3ForCausalLM", 0, 1, 1 },
};

typedef struct {
	const struct arch_desc *a;
	int arch;
	uint64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, ctx, vocab;
	double eps, rope_theta;
	int has_eps, has_rope;
	uint64_t sliding_window;
	int tied;
} hparams;

typedef struct {
	const gguf_import_opts *o;
	gguf_file g;
	hparams hp;
	st_out *out;
	size_t n_out, cap_out;
	/* per-module quantization actually used, for config.json */
	struct qrec { char *module; int bits, gs; } *q;
	size_t n_q;
	gguf_import_stats *st;
	char *err;
	size_t errlen;
} ictx;

static int ferr(ictx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ferr(ictx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

int imp_write_file(int fd, const char *name, const void *buf, size_t len, char *err, size_t errlen)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			snprintf(err, errlen, "writing %s: %s", name, strerror(errno));
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int read_whole(int fd, uint8_t **buf, size_t *size, char *err, size_t errlen)
{
	struct stat sb;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "not a regular file");
		return -1;
	}
	if ((uint64_t)sb.st_size > IMPORT_MAX_FILE) {
		snprintf(err, errlen, "file of %lld bytes is larger than the %llu-byte limit",
			 (long long)sb.st_size, (unsigned long long)IMPORT_MAX_FILE);
		return -1;
	}
	size_t n = (size_t)sb.st_size, got = 0;
	uint8_t *b = malloc(n ? n : 1);
	if (!b) {
		snprintf(err, errlen, "out of memory reading %zu bytes", n);
		return -1;
	}
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "read: %s", strerror(errno));
			free(b);
			return -1;
		}
		if (r == 0)
			break; /* shrank under us: parse what we have */
		got += (size_t)r;
	}
	*buf = b;
	*size = got;
	return 0;
}

/* ---- hyperparameters ---- */

static int hp_u64(ictx *c, const char *suffix, uint64_t *out, int required)
{
	char key[128];
	snprintf(key, sizeof(key), "%s.%s", c->hp.a->gguf, suffix);
	int r = gguf_get_u64(&c->g, key, out);
	if (r < 0)
		return ferr(c, "metadata %s has the wrong type", key);
	if (r > 0 && required)
		return ferr(c, "metadata %s is missing", key);
	return r;
}

static int hp_f64(ictx *c, const char *suffix, double *out, int *has)
{
	char key[128];
	snprintf(key, sizeof(key), "%s.%s", c->hp.a->gguf, suffix);
	int r = gguf_get_f64(&c->g, key, out);
	if (r < 0)
		return ferr(c, "metadata %s has the wrong type", key);
	if (has)
		*has = r == 0;
	if (r == 0 && !isfinite(*out))
		return ferr(c, "metadata %s is not finite", key);
	return 0;
}

static int read_hparams(ictx *c)
{
	hparams *h = &c->hp;
	const char *arch;
	uint64_t alen;
	int r = gguf_get_str(&c->g, "general.architecture", &arch, &alen);
	if (r)
		return ferr(c, "general.architecture is %s", r > 0 ? "missing" : "not a string");
	h->arch = -1;
	for (int i = 0; i < ARCH_COUNT; i++)
		if (strlen(arch_descs[i].gguf) == alen && !memcmp(arch, arch_descs[i].gguf, alen))
			h->arch = i;
	if (h->arch < 0) {
		char shown[40];
		size_t n = alen < sizeof(shown) - 1 ? (size_t)alen : sizeof(shown) - 1;
		memcpy(shown, arch, n);
		shown[n] = 0;
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)shown[i] < 0x20 || (unsigned char)shown[i] > 0x7e)
				shown[i] = '?';
		return ferr(c, "unsupported architecture '%s' (supported: llama, qwen2, qwen3, gemma, gemma2, gemma3)", shown);
	}
	h->a = &arch_descs[h->arch];
	snprintf(c->st->arch, sizeof(c->st->arch), "%s", h->a->gguf);
	if (hp_u64(c, "block_count", &h->n_layer, 1) < 0 || hp_u64(c, "embedding_length", &h->n_embd, 1) < 0 ||
	    hp_u64(c, "feed_forward_length", &h->n_ff, 1) < 0 ||
	    hp_u64(c, "attention.head_count", &h->n_head, 1) < 0)
		return -1;
	if ((r = hp_u64(c, "attention.head_count_kv", &h->n_head_kv, 0)) < 0)
		return -1;
	if (r)
		h->n_head_kv = h->n_head;
	if ((r = hp_u64(c, "context_length", &h->ctx, 0)) < 0)
		return -1;
	if (r)
		h->ctx = 4096;
	if (h->n_layer == 0 || h->n_layer > IMPORT_MAX_LAYERS)
		return ferr(c, "block_count %llu out of range (1..%d)", (unsigned long long)h->n_layer, IMPORT_MAX_LAYERS);
	if (h->n_head == 0 || h->n_head_kv == 0 || h->n_head % h->n_head_kv || h->n_embd == 0 || h->n_ff == 0 ||
	    h->n_head > (1u << 16))
		return ferr(c, "attention head counts %llu/%llu or sizes are inconsistent",
			    (unsigned long long)h->n_head, (unsigned long long)h->n_head_kv);
	if ((r = hp_u64(c, "attention.key_length", &h->head_dim, 0)) < 0)
		return -1;
	if (r) {
		if (h->n_embd % h->n_head)
			return ferr(c, "embedding_length is not a multiple of head_count");
		h->head_dim = h->n_embd / h->n_head;
	}
	if (h->head_dim == 0 || h->head_dim > (1u << 16))
		return ferr(c, "head dimension %llu out of range", (unsigned long long)h->head_dim);
	if (hp_f64(c, "attention.layer_norm_rms_epsilon", &h->eps, &h->has_eps) ||
	    hp_f64(c, "rope.freq_base", &h->rope_theta, &h->has_rope))
		return -1;
	if (!h->has_eps)
		h->eps = 1e-6;
	if (!h->has_rope)
		h->rope_theta = 10000.0;
	if (hp_u64(c, "attention.sliding_window", &h->sliding_window, 0) < 0)
		return -1;
	return 0;
}

/* ---- names ---- */

/* blk.N.<gguf> → model.layers.N.<hf>; the table covers every family here. */
static const struct { const char *gguf, *hf; } layer_names[] = {
	{ "attn_norm", "input_layernorm" },
	{ "attn_q", "self_attn.q_proj" },
	{ "attn_k", "self_attn.k_proj" },
	{ "attn_v", "self_attn.v_proj" },
	{ "attn_output", "self_attn.o_proj" },
	{ "attn_q_norm", "self_attn.q_norm" },
	{ "attn_k_norm", "self_attn.k_norm" },
	{ "ffn_gate", "mlp.gate_proj" },
	{ "ffn_up", "mlp.up_proj" },
	{ "ffn_down", "mlp.down_proj" },
	{ "ffn_norm", NULL }, /* depends on the family, see map_name */
	{ "post_attention_norm", "post_attention_layernorm" },
	{ "post_ffw_norm", "post_feedforward_layernorm" },
};

/* Fills hf (cap bytes). 0 ok; 1 to skip the tensor; -1 unknown. */
static int map_name(const ictx *c, const char *name, char *hf, size_t cap, int *layer, const char **base)
{
	*layer = -1;
	*base = NULL;
	if (!strcmp(name, "token_embd.weight"))
		return snprintf(hf, cap, "model.embed_tokens.weight"), 0;
	if (!strcmp(name, "output_norm.weight"))
		return snprintf(hf, cap, "model.norm.weight"), 0;
	if (!strcmp(name, "output.weight"))
		return snprintf(hf, cap, "lm_head.weight"), 0;
	if (!strcmp(name, "rope_freqs.weight"))
		return 1; /* llama.cpp's precomputed RoPE factors; config carries them */
	if (strncmp(name, "blk.", 4))
		return -1;
	const char *p = name + 4;
	char *end;
	errno = 0;
	unsigned long n = strtoul(p, &end, 10);
	if (end == p || *end != '.' || errno || n >= c->hp.n_layer || (p[0] == '0' && end - p > 1))
		return -1;
	p = end + 1;
	const char *dot = strrchr(p, '.');
	if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
		return -1;
	size_t blen = (size_t)(dot - p);
	for (size_t i = 0; i < sizeof(layer_names) / sizeof(layer_names[0]); i++) {
		if (strlen(layer_names[i].gguf) != blen || memcmp(layer_names[i].gguf, p, blen))
			continue;
		const char *hfn = layer_names[i].hf;
		if (!hfn)
			hfn = c->hp.a->gemma_norms ? "pre_feedforward_layernorm" : "post_attention_layernorm";
		else if (!strcmp(layer_names[i].gguf, "post_attention_norm") && !c->hp.a->gemma_norms)
			return -1;
		*layer = (int)n;
		*base = layer_names[i].gguf;
		return snprintf(hf, cap, "model.layers.%lu.%s%s", n, hfn, dot), 0;
	}
	return -1;
}

/* ---- output list ---- */

static st_out *add_out(ictx *c, const char *name, const char *dtype, uint32_t nd, const uint64_t *shape,
		       uint64_t nbytes)
{
	if (c->n_out == c->cap_out) {
		size_t nc = c->cap_out ? c->cap_out * 2 : 64;
		st_out *no = realloc(c->out, nc * sizeof(*no));
		if (!no)
			return NULL;
		c->out = no;
		c->cap_out = nc;
	}
	st_out *t = &c->out[c->n_out];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	t->data = malloc(nbytes ? (size_t)nbytes : 1);
	if (!t->name || !t->data) {
		free(t->name);
		free(t->data);
		return NULL;
	}
	t->dtype = dtype;
	t->n_dims = nd;
	for (uint32_t i = 0; i < nd; i++)
		t->shape[i] = shape[i];
	t->nbytes = nbytes;
	c->n_out++;
	return t;
}

static int add_qrec(ictx *c, const char *hf_weight, int bits, int gs)
{
	struct qrec *nq = realloc(c->q, (c->n_q + 1) * sizeof(*nq));
	if (!nq)
		return -1;
	c->q = nq;
	size_t n = strlen(hf_weight) - strlen(".weight");
	char *m = malloc(n + 1);
	if (!m)
		return -1;
	memcpy(m, hf_weight, n);
	m[n] = 0;
	c->q[c->n_q++] = (struct qrec){ m, bits, gs };
	return 0;
}

/* Source row r of the output: the inverse of convert_hf_to_gguf.py's
 *   permute(w, n_head) = w.reshape(n_head, 2, hd/2, ...).swapaxes(1, 2)
 * i.e. HF row h*hd + j*hd/2 + i was stored at GGUF row h*hd + 2*i + j. */
static uint64_t src_row(uint64_t r, uint64_t hd)
{
	if (!hd)
		return r;
	uint64_t h = r / hd, k = r % hd, half = hd / 2;
	uint64_t j = k / half, i = k % half;
	return h * hd + 2 * i + j;
}

/* Writes a packed MLX row from codes (one byte per value). */
static void pack_row(const uint8_t *codes, uint64_t n, int bits, uint32_t *out)
{
	uint64_t acc = 0;
	int nacc = 0;
	for (uint64_t j = 0; j < n; j++) {
		acc |= (uint64_t)codes[j] << nacc;
		nacc += bits;
		if (nacc >= 32) {
			*out++ = (uint32_t)acc;
			acc >>= 32;
			nacc -= 32;
		}
	}
}

static int convert_tensor(ictx *c, const gguf_tensor *t)
{
	char hf[192];
	int layer;
	const char *base;
	int r = map_name(c, t->name, hf, sizeof(hf), &layer, &base);
	if (r > 0)
		return 0;
	if (r < 0)
		return ferr(c, "tensor '%s': not a tensor of a %s model", t->name, c->hp.a->gguf);
	const hparams *h = &c->hp;
	uint64_t hd = 0; /* permutation head size, 0 = none */
	if (h->a->permute_qk && base && (!strcmp(base, "attn_q") || !strcmp(base, "attn_k"))) {
		uint64_t nh = !strcmp(base, "attn_q") ? h->n_head : h->n_head_kv;
		uint64_t rows = t->n_dims == 1 ? t->ne[0] : t->ne[1];
		if (rows % (2 * nh))
			return ferr(c, "tensor '%s': %llu rows do not split into %llu heads", t->name,
				    (unsigned long long)rows, (unsigned long long)nh);
		hd = rows / nh;
	}
	int is_norm = strstr(hf, "norm.weight") != NULL;
	if (t->n_dims == 1 || (t->n_dims == 2 && t->ne[1] == 1 && is_norm)) {
		/* 1-D: f32, unquantized. */
		uint64_t n = t->ne[0];
		if (n > UINT64_MAX / 4)
			return ferr(c, "tensor '%s': too large", t->name);
		st_out *o = add_out(c, hf, "F32", 1, &n, n * 4);
		if (!o)
			return ferr(c, "out of memory");
		float *tmp = malloc((size_t)n * sizeof(float));
		if (!tmp)
			return ferr(c, "out of memory");
		gguf_dequant(t->type, t->data, tmp, n);
		float *dst = o->data;
		for (uint64_t i = 0; i < n; i++) {
			float v = tmp[hd ? src_row(i, hd) : i];
			/* convert_hf_to_gguf.py (Gemma*Model.modify_tensors) stored w + 1. */
			dst[i] = h->a->norm_plus_one && is_norm ? v - 1.0f : v;
		}
		free(tmp);
		c->st->dense++;
		return 0;
	}
	if (t->n_dims != 2)
		return ferr(c, "tensor '%s': %u dimensions where a matrix was expected", t->name, t->n_dims);
	uint64_t cols = t->ne[0], rows = t->ne[1];
	uint64_t shape[2] = { rows, cols };
	uint64_t row_bytes = cols / ggml_blck_size(t->type) * ggml_type_size(t->type);
	if (t->type == GGML_Q4_1 || t->type == GGML_Q8_0) {
		/* Exact: a ggml block of 32 is an MLX group of 32 with
		 * Q4_1: scale = d, bias = m, code = q;
		 * Q8_0: scale = d, bias = -128 d, code = q + 128
		 * (d*(q+128) - 128 d = d*q exactly in f32: 19 significant bits). */
		int bits = t->type == GGML_Q4_1 ? 4 : 8;
		uint64_t words = cols * (uint64_t)bits / 32, groups = cols / 32;
		uint64_t wshape[2] = { rows, words }, sshape[2] = { rows, groups };
		char nm[224];
		st_out *w = add_out(c, hf, "U32", 2, wshape, rows * words * 4);
		snprintf(nm, sizeof(nm), "%.*s.scales", (int)(strlen(hf) - 7), hf);
		st_out *s = w ? add_out(c, nm, "F16", 2, sshape, rows * groups * 2) : NULL;
		snprintf(nm, sizeof(nm), "%.*s.biases", (int)(strlen(hf) - 7), hf);
		st_out *b = s ? add_out(c, nm, "F16", 2, sshape, rows * groups * 2) : NULL;
		uint8_t *codes = malloc((size_t)cols);
		if (!b || !codes || add_qrec(c, hf, bits, 32)) {
			free(codes);
			return ferr(c, "out of memory");
		}
		w = &c->out[c->n_out - 3];
		s = &c->out[c->n_out - 2];
		uint16_t *sc = s->data, *bi = c->out[c->n_out - 1].data;
		for (uint64_t rr = 0; rr < rows; rr++) {
			const uint8_t *src = t->data + (hd ? src_row(rr, hd) : rr) * row_bytes;
			for (uint64_t g = 0; g < groups; g++) {
				const uint8_t *blk = src + g * ggml_type_size(t->type);
				uint16_t d = (uint16_t)(blk[0] | blk[1] << 8);
				uint8_t *cd = codes + g * 32;
				sc[rr * groups + g] = d;
				if (bits == 4) {
					bi[rr * groups + g] = (uint16_t)(blk[2] | blk[3] << 8);
					for (int j = 0; j < 16; j++) {
						cd[j] = blk[4 + j] & 0x0F;
						cd[j + 16] = blk[4 + j] >> 4;
					}
				} else {
					float bias = -128.0f * gguf_f16_to_f32(d);
					uint16_t hb = gguf_f32_to_f16(bias);
					if (isfinite(gguf_f16_to_f32(d)) && gguf_f16_to_f32(hb) != bias) {
						free(codes);
						return ferr(c, "tensor '%s': Q8_0 scale %g too large for an exact f16 bias",
							    t->name, (double)gguf_f16_to_f32(d));
					}
					bi[rr * groups + g] = hb;
					for (int j = 0; j < 32; j++)
						cd[j] = (uint8_t)((int8_t)blk[2 + j] + 128);
				}
			}
			pack_row(codes, cols, bits, (uint32_t *)w->data + rr * words);
		}
		free(codes);
		c->st->exact++;
		return 0;
	}
	int bits = c->o->bits, gs = c->o->group_size;
	float *row = malloc((size_t)cols * sizeof(float));
	if (!row)
		return ferr(c, "out of memory");
	if (cols % (uint64_t)gs) {
		/* Not divisible into groups: keep it dense in f16. mlx-lm only
		 * quantizes a module whose .scales it finds. */
		st_out *o = add_out(c, hf, "F16", 2, shape, rows * cols * 2);
		if (!o) {
			free(row);
			return ferr(c, "out of memory");
		}
		uint16_t *dst = o->data;
		for (uint64_t rr = 0; rr < rows; rr++) {
			gguf_dequant(t->type, t->data + (hd ? src_row(rr, hd) : rr) * row_bytes, row, cols);
			for (uint64_t j = 0; j < cols; j++)
				dst[rr * cols + j] = gguf_f32_to_f16(row[j]);
		}
		free(row);
		c->st->dense++;
		return 0;
	}
	uint64_t words = cols * (uint64_t)bits / 32, groups = cols / (uint64_t)gs;
	uint64_t wshape[2] = { rows, words }, sshape[2] = { rows, groups };
	char nm[224];
	st_out *w = add_out(c, hf, "U32", 2, wshape, rows * words * 4);
	snprintf(nm, sizeof(nm), "%.*s.scales", (int)(strlen(hf) - 7), hf);
	st_out *s = w ? add_out(c, nm, "F16", 2, sshape, rows * groups * 2) : NULL;
	snprintf(nm, sizeof(nm), "%.*s.biases", (int)(strlen(hf) - 7), hf);
	st_out *b = s ? add_out(c, nm, "F16", 2, sshape, rows * groups * 2) : NULL;
	if (!b || add_qrec(c, hf, bits, gs)) {
		free(row);
		return ferr(c, "out of memory");
	}
	w = &c->out[c->n_out - 3];
	s = &c->out[c->n_out - 2];
	for (uint64_t rr = 0; rr < rows; rr++) {
		gguf_dequant(t->type, t->data + (hd ? src_row(rr, hd) : rr) * row_bytes, row, cols);
		for (uint64_t j = 0; j < cols; j++) {
			/* MLX quantizes the f16 weights mlx-lm would hold. */
			float v = gguf_f16_to_f32(gguf_f32_to_f16(row[j]));
			if (!isfinite(v)) {
				/* Format the message before freeing row: it reads row[j]. */
				ferr(c, "tensor '%s': value %g at row %llu does not fit f16", t->name,
				     (double)row[j], (unsigned long long)rr);
				free(row);
				return -1;
			}
			row[j] = v;
		}
		mlx_quantize(row, 1, cols, bits, gs, (uint32_t *)w->data + rr * words,
			     (uint16_t *)s->data + rr * groups, (uint16_t *)c->out[c->n_out - 1].data + rr * groups);
	}
	free(row);
	c->st->requantized++;
	return 0;
}

/* ---- config.json ---- */

/* The shortest decimal that reads back as the same f32 (1e-05, not
 * 9.99999975e-06): GGUF stores these hyperparameters as f32. */
static void jw_float(jw_buf *w, double v)
{
	char b[40];
	float f = (float)v;
	for (int p = 1; p <= 17; p++) {
		snprintf(b, sizeof(b), "%.*g", p, v);
		if (strtof(b, NULL) == f)
			break;
	}
	if (!strpbrk(b, ".eEn"))
		strcat(b, ".0");
	jw_cstr(w, b);
}

static int token_id(const gguf_file *g, const char *tok)
{
	const gguf_kv *kv = gguf_find(g, "tokenizer.ggml.tokens");
	if (!kv || kv->type != GGUF_V_ARRAY || kv->arr_type != GGUF_V_STRING)
		return -1;
	size_t tl = strlen(tok);
	for (uint64_t i = 0; i < kv->n && i < INT32_MAX; i++) {
		const char *s;
		uint64_t n;
		gguf_arr_str(g, kv, i, &s, &n);
		if (n == tl && !memcmp(s, tok, tl))
			return (int)i;
	}
	return -1;
}

static void write_quant_block(ictx *c, jw_buf *w, int dbits, int dgs)
{
	jw_fmt(w, "{\"group_size\":%d,\"bits\":%d,\"mode\":\"affine\"", dgs, dbits);
	for (size_t i = 0; i < c->n_q; i++) {
		if (c->q[i].bits == dbits && c->q[i].gs == dgs)
			continue;
		jw_cstr(w, ",");
		jw_str(w, c->q[i].module, strlen(c->q[i].module));
		jw_fmt(w, ":{\"group_size\":%d,\"bits\":%d}", c->q[i].gs, c->q[i].bits);
	}
	jw_cstr(w, "}");
}

static int write_config(ictx *c, int fd)
{
	const hparams *h = &c->hp;
	jw_buf w = { 0 };
	/* Default quantization = the most common (bits, group) pair, so the
	 * per-layer overrides list only the exceptions. */
	int dbits = c->o->bits, dgs = c->o->group_size;
	size_t best = 0;
	for (size_t i = 0; i < c->n_q; i++) {
		size_t k = 0;
		for (size_t j = 0; j < c->n_q; j++)
			k += c->q[j].bits == c->q[i].bits && c->q[j].gs == c->q[i].gs;
		if (k > best) {
			best = k;
			dbits = c->q[i].bits;
			dgs = c->q[i].gs;
		}
	}
	jw_fmt(&w, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", h->a->hf_class, h->a->model_type);
	jw_fmt(&w, "  \"hidden_size\": %llu,\n  \"num_hidden_layers\": %llu,\n  \"intermediate_size\": %llu,\n",
	       (unsigned long long)h->n_embd, (unsigned long long)h->n_layer, (unsigned long long)h->n_ff);
	jw_fmt(&w, "  \"num_attention_heads\": %llu,\n  \"num_key_value_heads\": %llu,\n  \"head_dim\": %llu,\n",
	       (unsigned long long)h->n_head, (unsigned long long)h->n_head_kv, (unsigned long long)h->head_dim);
	jw_cstr(&w, "  \"rms_norm_eps\": ");
	jw_float(&w, h->eps);
	jw_cstr(&w, ",\n  \"rope_theta\": ");
	jw_float(&w, h->rope_theta);
	jw_fmt(&w, ",\n  \"vocab_size\": %llu,\n  \"max_position_embeddings\": %llu,\n",
	       (unsigned long long)h->vocab, (unsigned long long)h->ctx);
	jw_fmt(&w, "  \"tie_word_embeddings\": %s,\n", h->tied ? "true" : "false");
	uint64_t v;
	if (!gguf_get_u64(&c->g, "tokenizer.ggml.bos_token_id", &v) && v < h->vocab)
		jw_fmt(&w, "  \"bos_token_id\": %llu,\n", (unsigned long long)v);
	if (!gguf_get_u64(&c->g, "tokenizer.ggml.padding_token_id", &v) && v < h->vocab)
		jw_fmt(&w, "  \"pad_token_id\": %llu,\n", (unsigned long long)v);
	if (!gguf_get_u64(&c->g, "tokenizer.ggml.eos_token_id", &v) && v < h->vocab) {
		/* Gemma chats end a turn with <end_of_turn>; the HF generation
		 * config lists both, and mlx-lm reads a list here. */
		int eot = h->a->norm_plus_one ? token_id(&c->g, "<end_of_turn>") : -1;
		if (eot >= 0 && (uint64_t)eot != v)
			jw_fmt(&w, "  \"eos_token_id\": [%llu, %d],\n", (unsigned long long)v, eot);
		else
			jw_fmt(&w, "  \"eos_token_id\": %llu,\n", (unsigned long long)v);
	}
	jw_cstr(&w, "  \"rope_scaling\": null,\n");
	switch (h->arch) {
	case ARCH_LLAMA:
		jw_cstr(&w, "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n");
		break;
	case ARCH_QWEN2:
	case ARCH_QWEN3:
		jw_cstr(&w, "  \"hidden_act\": \"silu\",\n");
		if (h->sliding_window)
			jw_fmt(&w, "  \"sliding_window\": %llu,\n", (unsigned long long)h->sliding_window);
		jw_cstr(&w, "  \"use_sliding_window\": false,\n");
		break;
	case ARCH_GEMMA:
		jw_cstr(&w, "  \"hidden_act\": \"gelu_pytorch_tanh\",\n  \"hidden_activation\": \"gelu_pytorch_tanh\",\n");
		break;
	case ARCH_GEMMA2:
	case ARCH_GEMMA3: {
		/* llama.cpp (llama-model.cpp) scales queries by 1/sqrt(n_embd/n_head)
		 * for the 27B models and 1/sqrt(head_dim) otherwise; HF's
		 * query_pre_attn_scalar says the same. */
		uint64_t qpas = h->n_embd / h->n_head;
		if (h->n_layer != 46 && h->n_layer != 62)
			qpas = h->head_dim;
		uint64_t sw = h->sliding_window ? h->sliding_window : (h->arch == ARCH_GEMMA3 ? 512 : 4096);
		jw_cstr(&w, "  \"hidden_activation\": \"gelu_pytorch_tanh\",\n");
		jw_fmt(&w, "  \"query_pre_attn_scalar\": %llu,\n  \"sliding_window\": %llu,\n",
		       (unsigned long long)qpas, (unsigned long long)sw);
		if (h->arch == ARCH_GEMMA2) {
			double cap;
			jw_cstr(&w, "  \"attn_logit_softcapping\": ");
			if (!gguf_get_f64(&c->g, "gemma2.attn_logit_softcapping", &cap) && isfinite(cap))
				jw_float(&w, cap);
			else
				jw_cstr(&w, "50.0");
			jw_cstr(&w, ",\n  \"final_logit_softcapping\": ");
			if (!gguf_get_f64(&c->g, "gemma2.final_logit_softcapping", &cap) && isfinite(cap))
				jw_float(&w, cap);
			else
				jw_cstr(&w, "30.0");
			jw_cstr(&w, ",\n");
		} else {
			/* Not in the file; google/gemma-3-*-it configs and mlx-lm's
			 * gemma3_text defaults: local RoPE base 10000, every 6th layer
			 * global. */
			jw_cstr(&w, "  \"rope_local_base_freq\": 10000.0,\n  \"sliding_window_pattern\": 6,\n");
			jw_cstr(&w, "  \"final_logit_softcapping\": null,\n  \"attn_logit_softcapping\": null,\n");
			jw_cstr(&w, "  \"layer_types\": [");
			for (uint64_t i = 0; i < h->n_layer; i++)
				jw_fmt(&w, "%s\"%s\"", i ? ", " : "", (i + 1) % 6 ? "sliding_attention" : "full_attention");
			jw_cstr(&w, "],\n");
		}
		break;
	}
	default:
		break;
	}
	if (c->n_q) {
		jw_cstr(&w, "  \"quantization\": ");
		write_quant_block(c, &w, dbits, dgs);
		jw_cstr(&w, ",\n  \"quantization_config\": ");
		write_quant_block(c, &w, dbits, dgs);
		jw_cstr(&w, ",\n");
	}
	jw_cstr(&w, "  \"torch_dtype\": \"float16\"\n}\n");
	if (jw_finish(&w)) {
		jw_free(&w);
		return ferr(c, "out of memory");
	}
	int rc = imp_write_file(fd, "config.json", w.buf, w.len, c->err, c->errlen);
	jw_free(&w);
	return rc;
}

/* Every layer has the tensors its family needs, with the shapes the
 * hyperparameters imply: a file missing one gets an error naming it here,
 * not a directory that mlx-lm refuses later. */
static int check_complete(ictx *c)
{
	const hparams *h = &c->hp;
	uint64_t q = h->n_head * h->head_dim, kv = h->n_head_kv * h->head_dim;
	const struct { const char *n; uint64_t cols, rows; int need; } req[] = {
		{ "attn_norm", h->n_embd, 0, 1 },
		{ "ffn_norm", h->n_embd, 0, 1 },
		{ "attn_q", h->n_embd, q, 1 },
		{ "attn_k", h->n_embd, kv, 1 },
		{ "attn_v", h->n_embd, kv, 1 },
		{ "attn_output", q, h->n_embd, 1 },
		{ "ffn_gate", h->n_embd, h->n_ff, 1 },
		{ "ffn_up", h->n_embd, h->n_ff, 1 },
		{ "ffn_down", h->n_ff, h->n_embd, 1 },
		{ "post_attention_norm", h->n_embd, 0, h->a->gemma_norms },
		{ "post_ffw_norm", h->n_embd, 0, h->a->gemma_norms },
		{ "attn_q_norm", h->head_dim, 0, h->arch == ARCH_GEMMA3 || h->arch == ARCH_QWEN3 },
		{ "attn_k_norm", h->head_dim, 0, h->arch == ARCH_GEMMA3 || h->arch == ARCH_QWEN3 },
	};
	if (!gguf_find_tensor(&c->g, "output_norm.weight"))
		return ferr(c, "tensor 'output_norm.weight' is missing");
	for (uint64_t l = 0; l < h->n_layer; l++)
		for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
			if (!req[i].need)
				continue;
			char nm[96];
			snprintf(nm, sizeof(nm), "blk.%llu.%s.weight", (unsigned long long)l, req[i].n);
			const gguf_tensor *t = gguf_find_tensor(&c->g, nm);
			if (!t)
				return ferr(c, "tensor '%s' is missing", nm);
			int ok = req[i].rows ? t->n_dims == 2 && t->ne[0] == req[i].cols && t->ne[1] == req[i].rows
					     : t->ne[0] == req[i].cols && t->n_elem == req[i].cols;
			if (!ok)
				return ferr(c, "tensor '%s': shape [%llu, %llu] where [%llu, %llu] was expected", nm,
					    (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
					    (unsigned long long)req[i].cols, (unsigned long long)(req[i].rows ? req[i].rows : 1));
		}
	return 0;
}

static int cmp_out(const void *a, const void *b)
{
	return strcmp(((const st_out *)a)->name, ((const st_out *)b)->name);
}

int gguf_import_fds(int in_fd, const imp_outs *outs, const gguf_import_opts *opts, gguf_import_stats *stats, char *err,
		size_t errlen)
{
	ictx c = { 0 };
	gguf_import_stats st0;
	uint8_t *buf = NULL;
	size_t size = 0;
	int rc = -1, parsed = 0;
	c.o = opts;
	c.st = stats ? stats : &st0;
	memset(c.st, 0, sizeof(*c.st));
	c.err = err;
	c.errlen = errlen;
	if (!mlx_quant_supported(opts->bits, opts->group_size)) {
		ferr(&c, "unsupported quantization: %d bits, group size %d", opts->bits, opts->group_size);
		goto out;
	}
	if (read_whole(in_fd, &buf, &size, err, errlen))
		goto out;
	if (gguf_parse(&c.g, buf, size, err, errlen))
		goto out;
	parsed = 1;
	if (read_hparams(&c))
		goto out;
	const gguf_tensor *emb = gguf_find_tensor(&c.g, "token_embd.weight");
	if (!emb || emb->n_dims != 2)
		goto missing;
	if (emb->ne[0] != c.hp.n_embd) {
		ferr(&c, "tensor 'token_embd.weight': width %llu, embedding_length is %llu",
		     (unsigned long long)emb->ne[0], (unsigned long long)c.hp.n_embd);
		goto out;
	}
	c.hp.vocab = emb->ne[1];
	c.hp.tied = gguf_find_tensor(&c.g, "output.weight") == NULL;
	if (check_complete(&c))
		goto out;
	for (uint64_t i = 0; i < c.g.n_tensors; i++)
		if (convert_tensor(&c, &c.g.tensors[i]))
			goto out;
	qsort(c.out, c.n_out, sizeof(*c.out), cmp_out);
	c.st->tensors = c.n_out;
	if (st_write(outs->safetensors, c.out, c.n_out, err, errlen))
		goto out;
	if (write_config(&c, outs->config))
		goto out;
	if (gguf_write_tokenizer(&c.g, c.hp.a->gguf, c.hp.ctx, outs, err, errlen))
		goto out;
	rc = 0;
	goto out;
missing:
	ferr(&c, "tensor 'token_embd.weight' is missing or not a matrix");
out:
	for (size_t i = 0; i < c.n_out; i++) {
		free(c.out[i].name);
		free(c.out[i].data);
	}
	free(c.out);
	for (size_t i = 0; i < c.n_q; i++)
		free(c.q[i].module);
	free(c.q);
	if (parsed)
		gguf_free(&c.g);
	free(buf);
	return rc;
}

int gguf_import(int in_fd, int out_dirfd, const gguf_import_opts *opts, gguf_import_stats *stats, char *err,
		size_t errlen)
{
	static const char *names[4] = { "model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json" };
	int fds[4] = { -1, -1, -1, -1 }, rc = -1;
	for (int i = 0; i < 4; i++) {
		fds[i] = openat(out_dirfd, names[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fds[i] < 0) {
			snprintf(err, errlen, "creating %s: %s", names[i], strerror(errno));
			goto out;
		}
	}
	imp_outs o = { fds[0], fds[1], fds[2], fds[3] };
	rc = gguf_import_fds(in_fd, &o, opts, stats, err, errlen);
out:
	for (int i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (rc) /* nothing half-written stays behind */
		for (int i = 0; i < 4; i++)
			unlinkat(out_dirfd, names[i], 0);
	return rc;
}
