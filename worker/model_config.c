/* worker/model_config.c — config.json to model_config, following mlx-lm's
 * ModelArgs defaults for each architecture (mlx_lm/models/<arch>.py) and its
 * RoPE variants (mlx_lm/models/rope_utils.py). */
#include "worker/model.h"
#include "common/ipc.h"
#include "common/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *arch_names[ARCH_COUNT] = {
	[ARCH_LLAMA] = "llama", [ARCH_QWEN2] = "qwen2", [ARCH_QWEN3] = "qwen3", [ARCH_PHI3] = "phi3",
	[ARCH_GEMMA] = "gemma", [ARCH_GEMMA2] = "gemma2", [ARCH_GEMMA3] = "gemma3_text",
};

const char *model_arch_name(model_arch a)
{
	return (unsigned)a < ARCH_COUNT ? arch_names[a] : "?";
}

void model_config_free(model_config *cfg)
{
	if (cfg->inv_freq_local != cfg->inv_freq)
		free(cfg->inv_freq_local);
	free(cfg->inv_freq);
	cfg->inv_freq = cfg->inv_freq_local = NULL;
}

/* Reads an integer field: required (fails if absent) or with a default. */
static int get_int(const json_value *o, const char *k, int def, int required, int lo, int hi, int *out,
		   char *err, size_t errlen)
{
	int64_t v;
	int r = json_get_int(o, k, &v);
	if (r == 1 && !required) {
		*out = def;
		return 0;
	}
	if (r != 0) {
		snprintf(err, errlen, "config.json: %s is %s", k, r == 1 ? "missing" : "not an integer");
		return -1;
	}
	if (v < lo || v > hi) {
		snprintf(err, errlen, "config.json: %s = %lld is outside [%d, %d]", k, (long long)v, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int get_float(const json_value *o, const char *k, double def, double lo, double hi, float *out,
		     char *err, size_t errlen)
{
	double v;
	int r = json_get_num(o, k, &v);
	if (r == 1) {
		*out = (float)def;
		return 0;
	}
	if (r != 0 || !(v >= lo && v <= hi)) {
		snprintf(err, errlen, "config.json: %s is not a number in [%g, %g]", k, lo, hi);
		return -1;
	}
	*out = (float)v;
	return 0;
}

/* Standard RoPE periods base^(2i/d), as 1/period. */
static float *rope_plain(int dims, double base)
{
	float *f = malloc(sizeof(float) * (size_t)(dims / 2));
	if (!f)
		return NULL;
	for (int i = 0; i < dims / 2; i++) {
		/* mlx computes the exponent in float32. */
		float e = (float)(2 * i) / (float)dims;
		f[i] = 1.0f / powf((float)base, e);
	}
	return f;
}

static int rope_setup(model_config *c, const json_value *root, double base, char *err, size_t errlen)
{
	const json_value *rs = json_get(root, "rope_scaling");
	int d = c->rot_dim;
	c->rope_mscale = 1.0f;
	c->inv_freq = rope_plain(d, base);
	if (!c->inv_freq)
		goto oom;
	if (!rs || rs->type == JSON_NULL)
		return 0;
	if (rs->type != JSON_OBJECT) {
		snprintf(err, errlen, "config.json: rope_scaling is not an object");
		return -1;
	}
	const char *type = NULL;
	if (json_get_str(rs, "rope_type", &type) != 0 && json_get_str(rs, "type", &type) != 0) {
		snprintf(err, errlen, "config.json: rope_scaling has no type");
		return -1;
	}
	if (!strcmp(type, "default"))
		return 0;
	if (!strcmp(type, "linear")) {
		float factor;
		if (get_float(rs, "factor", 1.0, 1e-6, 1e6, &factor, err, errlen))
			return -1;
		for (int i = 0; i < d / 2; i++)
			c->inv_freq[i] /= factor; /* positions scaled by 1/factor */
		return 0;
	}
	if (!strcmp(type, "llama3")) {
		float factor, lo_f, hi_f, old_ctx;
		if (get_float(rs, "factor", 8.0, 1e-6, 1e6, &factor, err, errlen) ||
		    get_float(rs, "low_freq_factor", 1.0, 1e-6, 1e6, &lo_f, err, errlen) ||
		    get_float(rs, "high_freq_factor", 4.0, 1e-6, 1e6, &hi_f, err, errlen) ||
		    get_float(rs, "original_max_position_embeddings", 8192, 1, 1e9, &old_ctx, err, errlen))
			return -1;
		if (hi_f == lo_f) {
			snprintf(err, errlen, "config.json: rope_scaling high_freq_factor equals low_freq_factor");
			return -1;
		}
		float lo_wl = old_ctx / lo_f, hi_wl = old_ctx / hi_f;
		for (int i = 0; i < d / 2; i++) {
			float period = 1.0f / c->inv_freq[i];
			float wl = 2.0f * (float)M_PI * period;
			float p = wl > lo_wl ? period * factor : period;
			if (wl > hi_wl && wl < lo_wl) {
				float smooth = (old_ctx / wl - lo_f) / (hi_f - lo_f);
				p = p / ((1.0f - smooth) / factor + smooth);
			}
			c->inv_freq[i] = 1.0f / p;
		}
		return 0;
	}
	if (!strcmp(type, "longrope") || !strcmp(type, "su")) {
		/* mlx-lm's SuScaledRoPE applies long_factor at every length and
		 * scales the rotated dims by sqrt(1 + ln(f)/ln(orig)). */
		const json_value *lf = json_get(rs, "long_factor");
		if (!lf || lf->type != JSON_ARRAY || (int)lf->n != d / 2) {
			snprintf(err, errlen, "config.json: rope_scaling.long_factor must list %d numbers", d / 2);
			return -1;
		}
		for (int i = 0; i < d / 2; i++) {
			const json_value *e = &lf->items[i];
			/* the bounds of every other RoPE factor: a positive double
			 * below FLT_MIN became 0 in float and the frequency inf */
			if (e->type != JSON_NUMBER || !(e->num >= 1e-6 && e->num <= 1e6)) {
				snprintf(err, errlen, "config.json: rope_scaling.long_factor[%d] is not a number in [1e-06, 1e+06]",
					 i);
				return -1;
			}
			c->inv_freq[i] = 1.0f / ((float)e->num * (1.0f / c->inv_freq[i]));
		}
		int orig;
		if (get_int(root, "original_max_position_embeddings", 4096, 0, 1, 1 << 30, &orig, err, errlen))
			return -1;
		float lm = 0;
		if (get_float(rs, "long_mscale", 0, 0, 1e6, &lm, err, errlen))
			return -1;
		double factor = (double)c->max_pos / orig;
		c->rope_mscale = lm > 0 ? lm : factor <= 1.0 ? 1.0f : (float)sqrt(1 + log(factor) / log((double)orig));
		return 0;
	}
	snprintf(err, errlen, "config.json: unsupported rope_scaling type '%.32s'", type);
	return -1;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

int model_config_parse(model_config *c, const char *json, size_t len, char *err, size_t errlen)
{
	json_doc doc = { 0 };
	char jerr[160];
	memset(c, 0, sizeof(*c));
	if (json_parse(json, len, &doc, jerr, sizeof(jerr))) {
		snprintf(err, errlen, "config.json: not valid JSON (%s)", jerr);
		return -1;
	}
	const json_value *r = doc.root;
	const char *mt = NULL;
	if (r->type != JSON_OBJECT || json_get_str(r, "model_type", &mt) != 0) {
		snprintf(err, errlen, "config.json: no model_type string");
		goto fail;
	}
	snprintf(c->model_type, sizeof(c->model_type), "%s", mt);
	if (!strcmp(mt, "llama") || !strcmp(mt, "mistral")) c->arch = ARCH_LLAMA;
	else if (!strcmp(mt, "qwen2")) c->arch = ARCH_QWEN2;
	else if (!strcmp(mt, "qwen3")) c->arch = ARCH_QWEN3;
	else if (!strcmp(mt, "phi3")) c->arch = ARCH_PHI3;
	else if (!strcmp(mt, "gemma")) c->arch = ARCH_GEMMA;
	else if (!strcmp(mt, "gemma2")) c->arch = ARCH_GEMMA2;
	else if (!strcmp(mt, "gemma3_text")) c->arch = ARCH_GEMMA3;
	else {
		snprintf(err, errlen, "config.json: unsupported architecture '%.32s' (mlxr runs llama, mistral, qwen2, "
			 "qwen3, phi3, gemma, gemma2, gemma3_text)", mt);
		goto fail;
	}
	/* Dimensions: bounded so every product below fits comfortably
	 * (hidden <= 65536, heads <= 1024, head_dim <= 1024, vocab <= 4M). */
	if (get_int(r, "hidden_size", 0, 1, 1, 65536, &c->hidden, err, errlen) ||
	    get_int(r, "num_hidden_layers", 0, 1, 1, MODEL_MAX_LAYERS, &c->n_layers, err, errlen) ||
	    get_int(r, "intermediate_size", 0, 1, 1, 1 << 20, &c->inter, err, errlen) ||
	    get_int(r, "num_attention_heads", 0, 1, 1, 1024, &c->n_heads, err, errlen) ||
	    get_int(r, "num_key_value_heads", c->n_heads, 0, 1, 1024, &c->n_kv_heads, err, errlen) ||
	    get_int(r, "vocab_size", 0, 1, 1, 1 << 22, &c->vocab, err, errlen) ||
	    get_int(r, "max_position_embeddings", c->arch == ARCH_GEMMA3 ? 32768 : 4096, 0, 1, 1 << 30, &c->max_pos, err, errlen))
		goto fail;
	int hd_default = c->arch == ARCH_GEMMA3 ? 256 : c->hidden / c->n_heads;
	if (c->arch == ARCH_PHI3)
		c->head_dim = c->hidden / c->n_heads; /* mlx-lm phi3 ignores head_dim */
	else if (get_int(r, "head_dim", hd_default, 0, 2, 1024, &c->head_dim, err, errlen))
		goto fail;
	/* The range is checked here, not only by get_int: the default
	 * (hidden / heads) and phi3's derived value bypass get_int's bounds. */
	if (c->head_dim < 2 || c->head_dim > 1024 || c->head_dim % 2 || c->n_heads % c->n_kv_heads) {
		snprintf(err, errlen, "config.json: head_dim %d must be even in [2, 1024] and num_attention_heads %d a "
			 "multiple of num_key_value_heads %d", c->head_dim, c->n_heads, c->n_kv_heads);
		goto fail;
	}
	double eps_def = c->arch >= ARCH_GEMMA ? 1e-6 : 1e-5;
	if (get_float(r, "rms_norm_eps", eps_def, 0, 1, &c->eps, err, errlen))
		goto fail;
	float theta, local_theta;
	double theta_def = c->arch == ARCH_GEMMA3 ? 1e6 : 10000.0;
	if (get_float(r, "rope_theta", theta_def, 1, 1e12, &theta, err, errlen) ||
	    get_float(r, "rope_local_base_freq", 10000.0, 1, 1e12, &local_theta, err, errlen))
		goto fail;
	int b;
	c->qkv_bias = c->arch == ARCH_QWEN2;
	if (c->arch == ARCH_LLAMA && json_get_bool(r, "attention_bias", &b) == 0 && b)
		c->qkv_bias = c->o_bias = 1;
	c->qk_norm = c->arch == ARCH_QWEN3 || c->arch == ARCH_GEMMA3;
	c->norm_add_one = c->arch >= ARCH_GEMMA;
	c->sandwich = c->arch == ARCH_GEMMA2 || c->arch == ARCH_GEMMA3;
	c->act = c->arch == ARCH_GEMMA ? 2 : c->arch >= ARCH_GEMMA2 ? 1 : 0;
	c->fused_qkv = c->arch == ARCH_PHI3;
	c->embed_scale = 1.0f;
	if (c->arch == ARCH_GEMMA || c->arch == ARCH_GEMMA2)
		c->embed_scale = sqrtf((float)c->hidden);
	if (c->arch == ARCH_GEMMA3) /* mlx-lm rounds sqrt(hidden) to bfloat16 */
		c->embed_scale = k_bf16_to_f32(k_f32_to_bf16(sqrtf((float)c->hidden)));
	c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
	if (c->arch == ARCH_GEMMA2 || c->arch == ARCH_GEMMA3) {
		float qs;
		if (get_float(r, "query_pre_attn_scalar", c->arch == ARCH_GEMMA3 ? 256 : c->head_dim, 1e-6, 1e9, &qs,
			      err, errlen))
			goto fail;
		c->attn_scale = 1.0f / sqrtf(qs);
	}
	if (c->arch == ARCH_GEMMA2) {
		if (get_float(r, "attn_logit_softcapping", 50.0, 0, 1e9, &c->attn_softcap, err, errlen) ||
		    get_float(r, "final_logit_softcapping", 30.0, 0, 1e9, &c->final_softcap, err, errlen))
			goto fail;
	}
	/* Sliding windows. gemma3_text: layer i is global when
	 * (i + 1) % sliding_window_pattern == 0. gemma2 (Hugging Face): even
	 * layers slide; mlx-lm 0.32 ignores gemma2's window, so contexts beyond
	 * it differ from mlx-lm there (documented). */
	if (c->arch == ARCH_GEMMA3 || c->arch == ARCH_GEMMA2) {
		int pat = 2;
		if (get_int(r, "sliding_window", c->arch == ARCH_GEMMA3 ? 512 : 4096, 0, 1, 1 << 30, &c->window, err, errlen))
			goto fail;
		if (c->arch == ARCH_GEMMA3 &&
		    get_int(r, "sliding_window_pattern", 6, 0, 1, 1 << 16, &pat, err, errlen))
			goto fail;
		const json_value *lt = json_get(r, "layer_types");
		for (int i = 0; i < c->n_layers; i++) {
			if (c->arch == ARCH_GEMMA3)
				c->sliding[i] = (i + 1) % pat != 0;
			else
				c->sliding[i] = i % 2 == 0;
		}
		if (lt && lt->type == JSON_ARRAY && (int)lt->n == c->n_layers) {
			for (int i = 0; i < c->n_layers; i++)
				if (lt->items[i].type == JSON_STRING)
					c->sliding[i] = !strcmp(lt->items[i].str, "sliding_attention");
		}
	}
	/* RoPE. phi3: partial_rotary_factor. */
	c->rot_dim = c->head_dim;
	if (c->arch == ARCH_PHI3) {
		float prf;
		if (get_float(r, "partial_rotary_factor", 1.0, 0.01, 1.0, &prf, err, errlen))
			goto fail;
		c->rot_dim = (int)(c->head_dim * prf) & ~1;
	}
	if (rope_setup(c, r, theta, err, errlen))
		goto fail;
	c->inv_freq_local = c->inv_freq;
	if (c->arch == ARCH_GEMMA3) {
		c->inv_freq_local = rope_plain(c->rot_dim, local_theta);
		if (!c->inv_freq_local) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	/* Special ids. */
	int64_t v;
	c->bos_id = json_get_int(r, "bos_token_id", &v) == 0 && v >= 0 && v < c->vocab ? (int)v : -1;
	const json_value *eos = json_get(r, "eos_token_id");
	if (eos && eos->type == JSON_NUMBER && eos->is_int && eos->i >= 0 && eos->i < c->vocab)
		c->eos_ids[c->n_eos++] = (int)eos->i;
	else if (eos && eos->type == JSON_ARRAY)
		for (uint32_t i = 0; i < eos->n && c->n_eos < MODEL_MAX_EOS; i++)
			if (eos->items[i].type == JSON_NUMBER && eos->items[i].is_int && eos->items[i].i >= 0 &&
			    eos->items[i].i < c->vocab)
				c->eos_ids[c->n_eos++] = (int)eos->items[i].i;
	c->tied = -1; /* decided from the tensors */
	if (json_get_bool(r, "tie_word_embeddings", &b) == 0)
		c->tied = b;
	json_free(&doc);
	return 0;
fail:
	json_free(&doc);
	model_config_free(c);
	return -1;
}

/* ---- wire form: the broker sends the validated configuration, so the
 * worker never parses config.json. Unpack re-checks every range. ---- */

void model_config_pack(const model_config *c, ipc_blob *b)
{
	int32_t ints[] = { c->arch, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->inter,
			   c->vocab, c->max_pos, c->qkv_bias, c->o_bias, c->qk_norm, c->norm_add_one, c->sandwich,
			   c->act, c->fused_qkv, c->window, c->rot_dim, c->bos_id, c->n_eos, c->tied };
	ipc_blob_bytes(b, c->model_type, strnlen(c->model_type, sizeof(c->model_type) - 1));
	ipc_blob_u32(b, (uint32_t)(sizeof(ints) / sizeof(ints[0])));
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		ipc_blob_u32(b, (uint32_t)ints[i]);
	double fl[] = { c->eps, c->embed_scale, c->attn_scale, c->attn_softcap, c->final_softcap, c->rope_mscale };
	for (size_t i = 0; i < sizeof(fl) / sizeof(fl[0]); i++)
		ipc_blob_f64(b, fl[i]);
	for (int i = 0; i < c->rot_dim / 2; i++)
		ipc_blob_f64(b, c->inv_freq[i]);
	for (int i = 0; i < c->rot_dim / 2; i++)
		ipc_blob_f64(b, c->inv_freq_local[i]);
	for (int i = 0; i < c->n_layers; i++)
		ipc_blob_u32(b, c->sliding[i]);
	for (int i = 0; i < c->n_eos; i++)
		ipc_blob_u32(b, (uint32_t)c->eos_ids[i]);
}

int model_config_unpack(model_config *c, ipc_rd *rd, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	size_t l;
	const uint8_t *mt = ipc_get_bytes(rd, sizeof(c->model_type) - 1, &l);
	uint32_t nint = ipc_get_u32(rd);
	int32_t v[21];
	if (!mt || nint != 21)
		goto bad;
	memcpy(c->model_type, mt, l);
	for (int i = 0; i < 21; i++)
		v[i] = (int32_t)ipc_get_u32(rd);
	c->arch = (model_arch)v[0];
	c->hidden = v[1]; c->n_layers = v[2]; c->n_heads = v[3]; c->n_kv_heads = v[4]; c->head_dim = v[5];
	c->inter = v[6]; c->vocab = v[7]; c->max_pos = v[8]; c->qkv_bias = v[9]; c->o_bias = v[10];
	c->qk_norm = v[11]; c->norm_add_one = v[12]; c->sandwich = v[13]; c->act = v[14]; c->fused_qkv = v[15];
	c->window = v[16]; c->rot_dim = v[17]; c->bos_id = v[18]; c->n_eos = v[19]; c->tied = v[20];
	/* The same bounds model_config_parse enforces. */
	if (v[0] < 0 || v[0] >= ARCH_COUNT || c->hidden < 1 || c->hidden > 65536 || c->n_layers < 1 ||
	    c->n_layers > MODEL_MAX_LAYERS || c->n_heads < 1 || c->n_heads > 1024 || c->n_kv_heads < 1 ||
	    c->n_kv_heads > 1024 || c->n_heads % c->n_kv_heads || c->head_dim < 2 || c->head_dim > 1024 ||
	    c->head_dim % 2 || c->inter < 1 || c->inter > (1 << 20) || c->vocab < 1 || c->vocab > (1 << 22) ||
	    c->max_pos < 1 || c->act < 0 || c->act > 2 || c->window < 0 || c->rot_dim < 2 || c->rot_dim > c->head_dim ||
	    c->rot_dim % 2 || c->bos_id < -1 || c->bos_id >= c->vocab || c->n_eos < 0 || c->n_eos > MODEL_MAX_EOS ||
	    (c->tied != 0 && c->tied != 1))
		goto bad;
	double fl[6];
	for (int i = 0; i < 6; i++) {
		fl[i] = ipc_get_f64(rd);
		if (!(fl[i] >= 0 && fl[i] < 1e12))
			goto bad;
	}
	c->eps = (float)fl[0]; c->embed_scale = (float)fl[1]; c->attn_scale = (float)fl[2];
	c->attn_softcap = (float)fl[3]; c->final_softcap = (float)fl[4]; c->rope_mscale = (float)fl[5];
	c->inv_freq = malloc(sizeof(float) * (size_t)(c->rot_dim / 2));
	c->inv_freq_local = malloc(sizeof(float) * (size_t)(c->rot_dim / 2));
	if (!c->inv_freq || !c->inv_freq_local)
		goto bad;
	for (int i = 0; i < c->rot_dim / 2; i++)
		c->inv_freq[i] = (float)ipc_get_f64(rd);
	for (int i = 0; i < c->rot_dim / 2; i++)
		c->inv_freq_local[i] = (float)ipc_get_f64(rd);
	for (int i = 0; i < c->n_layers; i++)
		c->sliding[i] = ipc_get_u32(rd) != 0;
	for (int i = 0; i < c->n_eos; i++) {
		c->eos_ids[i] = (int)ipc_get_u32(rd);
		if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab)
			goto bad;
	}
	if (rd->bad)
		goto bad;
	return 0;
bad:
	model_config_free(c);
	snprintf(err, errlen, "model configuration from the broker is malformed");
	return -1;
}
