/* worker/model.c — binds validated safetensors to a model and runs the
 * forward pass. The forward pass reads top to bottom (llama2.c style); each
 * architecture difference is a flag in model_config. */
#include "worker/model.h"
#include "common/json.h"
#include "common/modelfiles.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- quantization block ---- */

typedef struct {
	const json_value *q; /* the "quantization" object or NULL */
	int trusted;         /* the broker already checked the tensors against it */
} qcfg;

/* Expected (bits, group) for a module path: per-layer override, else the
 * default; bits 0 when the module is not quantized. */
static int qcfg_for(const qcfg *qc, const char *path, int *bits, int *gs, char *err, size_t errlen)
{
	*bits = 0;
	*gs = 0;
	if (!qc->q)
		return 0;
	const json_value *ov = json_get(qc->q, path);
	const json_value *src = qc->q;
	if (ov) {
		if (ov->type == JSON_FALSE)
			return 0;
		if (ov->type != JSON_OBJECT) {
			snprintf(err, errlen, "config.json: quantization.%s must be an object or false", path);
			return -1;
		}
		src = ov;
	}
	int64_t b, g;
	if (json_get_int(src, "bits", &b) != 0 || json_get_int(src, "group_size", &g) != 0) {
		snprintf(err, errlen, "config.json: quantization%s%s needs integer bits and group_size",
			 ov ? "." : "", ov ? path : "");
		return -1;
	}
	if (b < 2 || b > 8 || g < 32 || g > 128 || !mlx_quant_supported((int)b, (int)g)) {
		snprintf(err, errlen, "config.json: quantization%s%s: bits %lld / group_size %lld unsupported "
			 "(bits 2,3,4,5,6,8; group 32,64,128)", ov ? "." : "", ov ? path : "", (long long)b, (long long)g);
		return -1;
	}
	*bits = (int)b;
	*gs = (int)g;
	return 0;
}

static int dtype_k(st_dtype d, kdtype *out)
{
	switch (d) {
	case ST_F32: *out = KDT_F32; return 0;
	case ST_F16: *out = KDT_F16; return 0;
	case ST_BF16: *out = KDT_BF16; return 0;
	default: return -1;
	}
}

static const char *shard_of(const model *m, const st_tensor *t)
{
	const char *p = m->st.shards[t->shard].path;
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* Binds module `path` (e.g. model.layers.3.self_attn.q_proj) as a
 * [rows][cols] matrix, dense or quantized, and checks every shape. */
static int bind_matrix(model *m, const qcfg *qc, const char *path, int rows, int cols, kq_matrix *out,
		       char *err, size_t errlen)
{
	char n[600];
	snprintf(n, sizeof(n), "%s.weight", path);
	const st_tensor *w = st_find(&m->st, n);
	if (!w) {
		snprintf(err, errlen, "tensor %s: missing (the %s architecture needs it)", n, m->cfg.model_type);
		return -1;
	}
	snprintf(n, sizeof(n), "%s.scales", path);
	const st_tensor *s = st_find(&m->st, n);
	snprintf(n, sizeof(n), "%s.biases", path);
	const st_tensor *b = st_find(&m->st, n);
	int ebits = 0, egs = 0;
	if (!qc->trusted && qcfg_for(qc, path, &ebits, &egs, err, errlen))
		return -1;
	memset(out, 0, sizeof(*out));
	out->rows = rows;
	out->cols = cols;
	if (!s) {
		if (ebits && qc->q && json_get(qc->q, path)) {
			snprintf(err, errlen, "%s: tensor %s.weight: config quantizes it but there are no scales",
				 shard_of(m, w), path);
			return -1;
		}
		if (dtype_k(w->dtype, &out->wdt) || w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols) {
			snprintf(err, errlen, "%s: tensor %s.weight: expected %s [%d, %d] (f32/f16/bf16), found %s rank %d "
				 "[%lld, %lld]", shard_of(m, w), path, "dense", rows, cols, st_dtype_name(w->dtype),
				 w->ndim, (long long)w->shape[0], (long long)(w->ndim > 1 ? w->shape[1] : 0));
			return -1;
		}
		out->w = w->data;
		return 0;
	}
	if (!b) {
		snprintf(err, errlen, "%s: tensor %s.scales has no matching %s.biases", shard_of(m, s), path, path);
		return -1;
	}
	if (w->dtype != ST_U32 || w->ndim != 2 || w->shape[0] != rows || s->ndim != 2 || s->shape[0] != rows ||
	    b->ndim != 2 || b->shape[0] != rows || s->shape[1] != b->shape[1] || s->dtype != b->dtype ||
	    dtype_k(s->dtype, &out->sdt) || s->shape[1] == 0) {
		snprintf(err, errlen, "%s: tensor %s: quantized weight must be U32 [%d, packed], scales and biases "
			 "[%d, groups] of one float dtype", shard_of(m, w), path, rows, rows);
		return -1;
	}
	/* bits = 32 * packed / cols; group = cols / groups (both exact). */
	int64_t packed = w->shape[1], groups = s->shape[1];
	if ((packed * 32) % cols || cols % groups) {
		snprintf(err, errlen, "%s: tensor %s: packed width %lld and %lld groups do not divide %d input columns",
			 shard_of(m, w), path, (long long)packed, (long long)groups, cols);
		return -1;
	}
	int bits = (int)(packed * 32 / cols), gs = (int)(cols / groups);
	if (!mlx_quant_supported(bits, gs)) {
		snprintf(err, errlen, "%s: tensor %s: shapes imply %d bits / group %d, unsupported", shard_of(m, w),
			 path, bits, gs);
		return -1;
	}
	if (!qc->trusted && !qc->q) {
		snprintf(err, errlen, "%s: tensor %s is quantized but config.json has no quantization block",
			 shard_of(m, w), path);
		return -1;
	}
	if (!qc->trusted && (bits != ebits || gs != egs)) {
		snprintf(err, errlen, "%s: tensor %s: %d bits / group %d in the file but config.json says %d / %d",
			 shard_of(m, w), path, bits, gs, ebits, egs);
		return -1;
	}
	out->bits = bits;
	out->group_size = gs;
	out->w = w->data;
	out->scales = s->data;
	out->biases = b->data;
	return 0;
}

/* A 1-D float tensor of n values, copied to f32 (norms and biases are
 * tiny; this is not a dequantized copy of a matrix). */
static int bind_vec(model *m, const char *name, int n, float **out, char *err, size_t errlen)
{
	const st_tensor *t = st_find(&m->st, name);
	kdtype dt;
	if (!t) {
		snprintf(err, errlen, "tensor %s: missing (the %s architecture needs it)", name, m->cfg.model_type);
		return -1;
	}
	if (dtype_k(t->dtype, &dt) || t->ndim != 1 || t->shape[0] != n) {
		snprintf(err, errlen, "%s: tensor %s: expected a float vector [%d], found %s rank %d", shard_of(m, t),
			 name, n, st_dtype_name(t->dtype), t->ndim);
		return -1;
	}
	*out = malloc(sizeof(float) * (size_t)n);
	if (!*out) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int i = 0; i < n; i++)
		(*out)[i] = k_load(dt, t->data, (size_t)i);
	return 0;
}

kdtype model_kv_dtype(void)
{
	const char *e = getenv("MLXR_KV");
	return e && !strcmp(e, "f16") ? KDT_F16 : KDT_F32;
}

uint64_t model_matrix_bytes(const kq_matrix *q)
{
	uint64_t n = (uint64_t)q->rows * (uint64_t)q->cols;
	if (!q->bits)
		return n * (q->wdt == KDT_F32 ? 4 : 2);
	uint64_t groups = n / (uint64_t)q->group_size;
	return n * (uint64_t)q->bits / 8 + groups * 2 * (q->sdt == KDT_F32 ? 4 : 2);
}

/* Binds every tensor the architecture needs, checking names and shapes
 * (and, unless trusted, bits and group sizes against config.json). */
static int model_bind(model *m, const qcfg *qcp, char *err, size_t errlen)
{
	qcfg qc = *qcp;
	model_config *c = &m->cfg;
	int H = c->hidden, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
	if (bind_matrix(m, &qc, "model.embed_tokens", c->vocab, H, &m->embed, err, errlen))
		return -1;
	int has_head = st_find(&m->st, "lm_head.weight") != NULL;
	if (c->arch == ARCH_GEMMA || c->arch == ARCH_GEMMA2)
		c->tied = 1; /* mlx-lm: always the embedding */
	else if (c->tied == -1)
		c->tied = !has_head;
	else if (!c->tied && !has_head) {
		snprintf(err, errlen, "tensor lm_head.weight: missing although config.json says tie_word_embeddings false");
		return -1;
	}
	if (c->tied)
		m->lm_head = m->embed;
	else if (bind_matrix(m, &qc, "lm_head", c->vocab, H, &m->lm_head, err, errlen))
		return -1;
	if (bind_vec(m, "model.norm.weight", H, &m->final_norm, err, errlen))
		return -1;
	m->layers = calloc((size_t)c->n_layers, sizeof(layer_weights));
	if (!m->layers) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int i = 0; i < c->n_layers; i++) {
		layer_weights *L = &m->layers[i];
		char p[256], n[300];
#define MAT(field, sub, rows, cols) \
	(snprintf(p, sizeof(p), "model.layers.%d.%s", i, sub), bind_matrix(m, &qc, p, rows, cols, &L->field, err, errlen))
#define VEC(field, sub, len) \
	(snprintf(n, sizeof(n), "model.layers.%d.%s", i, sub), bind_vec(m, n, len, &L->field, err, errlen))
		if (c->fused_qkv) {
			if (MAT(q, "self_attn.qkv_proj", qd + 2 * kvd, H) || MAT(gate, "mlp.gate_up_proj", 2 * c->inter, H))
				return -1;
		} else {
			if (MAT(q, "self_attn.q_proj", qd, H) || MAT(k, "self_attn.k_proj", kvd, H) ||
			    MAT(v, "self_attn.v_proj", kvd, H) || MAT(gate, "mlp.gate_proj", c->inter, H) ||
			    MAT(up, "mlp.up_proj", c->inter, H))
				return -1;
		}
		if (MAT(o, "self_attn.o_proj", H, qd) || MAT(down, "mlp.down_proj", H, c->inter))
			return -1;
		if (c->qkv_bias && (VEC(q_bias, "self_attn.q_proj.bias", qd) || VEC(k_bias, "self_attn.k_proj.bias", kvd) ||
				    VEC(v_bias, "self_attn.v_proj.bias", kvd)))
			return -1;
		if (c->o_bias && VEC(o_bias, "self_attn.o_proj.bias", H))
			return -1;
		if (VEC(attn_norm, "input_layernorm.weight", H))
			return -1;
		if (c->sandwich) {
			if (VEC(post_attn_norm, "post_attention_layernorm.weight", H) ||
			    VEC(ffn_norm, "pre_feedforward_layernorm.weight", H) ||
			    VEC(post_ffn_norm, "post_feedforward_layernorm.weight", H))
				return -1;
		} else if (VEC(ffn_norm, "post_attention_layernorm.weight", H)) {
			return -1;
		}
		if (c->qk_norm && (VEC(q_norm, "self_attn.q_norm.weight", hd) || VEC(k_norm, "self_attn.k_norm.weight", hd)))
			return -1;
#undef MAT
#undef VEC
		m->decode_bytes += model_matrix_bytes(&L->q) + model_matrix_bytes(&L->k) + model_matrix_bytes(&L->v) +
				   model_matrix_bytes(&L->o) + model_matrix_bytes(&L->gate) + model_matrix_bytes(&L->up) +
				   model_matrix_bytes(&L->down);
	}
	m->decode_bytes += model_matrix_bytes(&m->lm_head) + (uint64_t)H * 4; /* + one embedding row, roughly */
	m->weight_bytes = m->st.total_bytes;
	return 0;
}

int model_load(model *m, const char *dir, char *err, size_t errlen)
{
	return model_load_ex(m, dir, NULL, err, errlen);
}

int model_load_ex(model *m, const char *dir, model_par_fn par, char *err, size_t errlen)
{
	char path[4096];
	size_t len;
	json_doc doc = { 0 };
	memset(m, 0, sizeof(*m));
	snprintf(path, sizeof(path), "%s/config.json", dir);
	char *cj = NULL;
	/* config.json <= 4 MB: real ones are < 10 KB */
	if (mf_read_file(path, 4u << 20, &cj, &len)) {
		snprintf(err, errlen, "%s: cannot read config.json (missing or larger than 4 MB)", dir);
		return -1;
	}
	if (model_config_parse(&m->cfg, cj, len, err, errlen)) {
		free(cj);
		return -1;
	}
	char jerr[160];
	if (json_parse(cj, len, &doc, jerr, sizeof(jerr))) { /* parsed once already: cannot fail */
		snprintf(err, errlen, "config.json: %s", jerr);
		goto fail;
	}
	qcfg qc = { json_get(doc.root, "quantization"), 0 };
	if (!qc.q)
		qc.q = json_get(doc.root, "quantization_config");
	if (qc.q && qc.q->type != JSON_OBJECT) {
		snprintf(err, errlen, "config.json: quantization is not an object");
		goto fail;
	}
	if (qc.q && !json_get(qc.q, "bits"))
		qc.q = NULL; /* e.g. a foreign quantization_config: shapes will reject it */
	if (st_open_dir(&m->st, dir, err, errlen) || (par && st_make_resident(&m->st, par, err, errlen)))
		goto fail;

	if (model_bind(m, &qc, err, errlen))
		goto fail;
	json_free(&doc);
	free(cj);
	return 0;
fail:
	json_free(&doc);
	free(cj);
	model_free(m);
	return -1;
}

static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

int model_check_memory(const model_config *c, uint64_t weight_bytes, int ctx, int batch, int gpu, char *err,
		       size_t errlen)
{
	uint64_t kv = 2ull * (uint64_t)c->n_layers * (uint64_t)ctx * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim *
		      (model_kv_dtype() == KDT_F32 ? 4 : 2);
	/* host scratch of model_state_init: a GPU session's host state has a
	 * 1-token context (its scores row is 1 wide) */
	uint64_t sctx = gpu ? 1 : (uint64_t)ctx;
	uint64_t scratch = (uint64_t)batch * ((uint64_t)c->vocab + sctx + 8ull * (uint64_t)(c->hidden + c->inter)) * 4;
	/* With a GPU the weights and the cache live in device memory (the
	 * backend checks that); the host keeps the logits scratch only. */
	uint64_t need = gpu ? scratch : weight_bytes + kv + scratch, avail = mem_available();
	if (avail && need > avail) {
		snprintf(err, errlen, "model needs %.2f GiB (weights %.2f GiB + KV cache %.2f GiB at --ctx %d) but only %.2f GiB "
			 "of memory is available; try a smaller --ctx or a smaller model",
			 need / 1073741824.0, weight_bytes / 1073741824.0, kv / 1073741824.0, ctx, avail / 1073741824.0);
		return -1;
	}
	return 0;
}

int model_from_parts(model *m, model_config *cfg, st_set *st, model_par_fn par, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	m->cfg = *cfg;
	m->st = *st;
	memset(cfg, 0, sizeof(*cfg));
	memset(st, 0, sizeof(*st));
	qcfg qc = { NULL, 1 };
	if ((par && st_make_resident(&m->st, par, err, errlen)) || model_bind(m, &qc, err, errlen)) {
		model_free(m);
		return -1;
	}
	return 0;
}

void model_free(model *m)
{
	if (m->layers) {
		for (int i = 0; i < m->cfg.n_layers; i++) {
			layer_weights *L = &m->layers[i];
			free(L->q_bias); free(L->k_bias); free(L->v_bias); free(L->o_bias);
			free(L->attn_norm); free(L->ffn_norm); free(L->post_attn_norm); free(L->post_ffn_norm);
			free(L->q_norm); free(L->k_norm);
		}
	}
	free(m->layers);
	free(m->final_norm);
	st_close(&m->st);
	model_config_free(&m->cfg);
	memset(m, 0, sizeof(*m));
}

