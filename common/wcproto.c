/* common/wcproto.c — wire forms of the generation API (common/wcapi.h).
 * Every unpack is bounded (ipc_rd), checks enums against their *_COUNT
 * and strings against their limits, and fails as a whole. */
#include "common/wcapi.h"
#include "common/utf8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* Limits (reasons): a message or prompt <= 64 MiB (far beyond any context
 * window of the models mlxr runs); <= 1M messages; stop strings <= 1 KiB. */
#define WC_MAX_TEXT ((size_t)64 << 20)
#define WC_MAX_MSGS (1u << 20)
#define WC_MAX_STOP 1024

void wc_request_defaults(wc_request *r)
{
	memset(r, 0, sizeof(*r));
	/* Ollama's defaults, so `mlxr run` behaves as its users expect. */
	r->temperature = 0.8f;
	r->top_k = 40;
	r->top_p = 0.9f;
	r->repeat_penalty = 1.1f;
	r->repeat_last_n = 64;
	if (getrandom(&r->seed, sizeof(r->seed), 0) != sizeof(r->seed))
		r->seed = 0x5eed;
}

static void blob_f32(ipc_blob *b, float f)
{
	ipc_blob_f64(b, (double)f);
}

int wc_request_pack(const wc_request *r, ipc_blob *b)
{
	ipc_blob_u32(b, r->msgs ? (uint32_t)r->n_msgs : UINT32_MAX);
	if (r->msgs) {
		for (size_t i = 0; i < r->n_msgs; i++) {
			ipc_blob_u32(b, (uint32_t)r->msgs[i].role);
			ipc_blob_bytes(b, r->msgs[i].text, r->msgs[i].len);
		}
	} else {
		ipc_blob_bytes(b, r->prompt, r->prompt_len);
	}
	ipc_blob_u32(b, (uint32_t)r->no_think);
	ipc_blob_u32(b, (uint32_t)r->continue_final);
	ipc_blob_u32(b, (uint32_t)r->trim);
	ipc_blob_u32(b, (uint32_t)r->parse_special);
	blob_f32(b, r->temperature);
	blob_f32(b, r->top_p);
	blob_f32(b, r->min_p);
	blob_f32(b, r->repeat_penalty);
	blob_f32(b, r->presence_penalty);
	blob_f32(b, r->frequency_penalty);
	ipc_blob_u32(b, (uint32_t)r->top_k);
	ipc_blob_u32(b, (uint32_t)r->repeat_last_n);
	ipc_blob_u64(b, r->seed);
	ipc_blob_u32(b, (uint32_t)r->max_tokens);
	ipc_blob_u32(b, (uint32_t)r->n_stops);
	for (int i = 0; i < r->n_stops && i < WC_MAX_STOPS; i++)
		ipc_blob_bytes(b, r->stops[i], strlen(r->stops[i]));
	return b->bad ? -1 : 0;
}

/* A float field: finite and within [lo, hi]. */
static int get_f(ipc_rd *rd, float lo, float hi, float *out)
{
	double d = ipc_get_f64(rd);
	if (!(d >= lo && d <= hi))
		return -1;
	*out = (float)d;
	return 0;
}

int wc_request_unpack(const uint8_t *p, size_t n, wc_request *r, wc_msg **msgs, char *err, size_t errlen)
{
	ipc_rd rd;
	ipc_rd_init(&rd, p, n);
	memset(r, 0, sizeof(*r));
	*msgs = NULL;
	size_t l;
	/* what: the field being read, named in the error (the worker sends
	 * it back to the broker as the WC_ERR_INVALID message). */
	const char *what = "message count";
	uint32_t nm = ipc_get_u32(&rd);
	if (nm != UINT32_MAX) {
		if (nm > WC_MAX_MSGS || nm > rd.left / 8) /* each message takes >= 8 bytes */
			goto bad;
		what = "out of memory";
		*msgs = calloc(nm + 1, sizeof(wc_msg));
		if (!*msgs)
			goto bad;
		for (uint32_t i = 0; i < nm; i++) {
			uint32_t role = ipc_get_u32(&rd);
			what = "message role";
			if (rd.bad || role >= WC_ROLE_COUNT)
				goto bad;
			what = "message text";
			const uint8_t *t = ipc_get_bytes(&rd, WC_MAX_TEXT, &l);
			if (!t)
				goto bad;
			(*msgs)[i].role = (wc_role)role;
			(*msgs)[i].text = (const char *)t;
			(*msgs)[i].len = l;
		}
		r->msgs = *msgs;
		r->n_msgs = nm;
	} else {
		what = "prompt";
		const uint8_t *t = ipc_get_bytes(&rd, WC_MAX_TEXT, &l);
		if (!t)
			goto bad;
		r->prompt = (const char *)t;
		r->prompt_len = l;
	}
	what = "flags";
	r->no_think = ipc_get_u32(&rd) != 0;
	r->continue_final = ipc_get_u32(&rd) != 0;
	r->trim = ipc_get_u32(&rd) != 0;
	r->parse_special = ipc_get_u32(&rd) != 0;
	if (rd.bad)
		goto bad;
	/* A truncated float reads as 0, inside every range: rd.bad below
	 * still rejects it (named "truncated"). */
	static const struct {
		const char *name;
		float lo, hi;
	} fl[] = { { "temperature", 0, 100 },     { "top_p", 0, 1 },
		   { "min_p", 0, 1 },             { "repeat_penalty", 0, 100 },
		   { "presence_penalty", -100, 100 }, { "frequency_penalty", -100, 100 } };
	float *fv[] = { &r->temperature, &r->top_p, &r->min_p, &r->repeat_penalty, &r->presence_penalty,
			&r->frequency_penalty };
	for (size_t k = 0; k < sizeof(fl) / sizeof(fl[0]); k++) {
		what = fl[k].name;
		if (get_f(&rd, fl[k].lo, fl[k].hi, fv[k]))
			goto bad;
	}
	r->top_k = (int)ipc_get_u32(&rd);
	r->repeat_last_n = (int)ipc_get_u32(&rd);
	r->seed = ipc_get_u64(&rd);
	r->max_tokens = (int)ipc_get_u32(&rd);
	uint32_t ns = ipc_get_u32(&rd);
	what = rd.bad ? "truncated" : r->top_k < 0 ? "top_k" : r->repeat_last_n < 0 ? "repeat_last_n" : "stop count";
	if (rd.bad || r->top_k < 0 || r->repeat_last_n < 0 || ns > WC_MAX_STOPS)
		goto bad;
	r->n_stops = (int)ns;
	/* Stop strings must be NUL-free; they are copied into a buffer the
	 * msgs allocation owns, so they end with NUL. */
	what = "stop string";
	for (uint32_t i = 0; i < ns; i++) {
		const uint8_t *t = ipc_get_bytes(&rd, WC_MAX_STOP, &l);
		if (!t || l == 0 || memchr(t, 0, l))
			goto bad;
		char *c = malloc(l + 1);
		if (!c)
			goto bad;
		memcpy(c, t, l);
		c[l] = 0;
		r->stops[i] = c;
	}
	what = "trailing bytes";
	if (rd.bad || rd.left)
		goto bad;
	return 0;
bad:
	for (int i = 0; i < WC_MAX_STOPS; i++)
		free((char *)r->stops[i]);
	free(*msgs);
	*msgs = NULL;
	memset(r, 0, sizeof(*r));
	snprintf(err, errlen, "malformed generation request: %s", what);
	return -1;
}

void wc_request_unpacked_free(wc_request *r, wc_msg *msgs)
{
	for (int i = 0; i < r->n_stops && i < WC_MAX_STOPS; i++)
		free((char *)r->stops[i]);
	free(msgs);
	memset(r, 0, sizeof(*r));
}

void wc_event_pack(const wc_event *ev, ipc_wr *w)
{
	ipc_put_u32(w, (uint32_t)ev->type);
	if (ev->type == WC_EV_TEXT || ev->type == WC_EV_REASONING) {
		ipc_put_bytes(w, ev->text, ev->len);
		return;
	}
	ipc_put_u32(w, (uint32_t)ev->finish);
	ipc_put_u64(w, ev->prompt_tokens);
	ipc_put_u64(w, ev->prefilled);
	ipc_put_u64(w, ev->completion_tokens);
	ipc_put_f64(w, ev->prefill_s);
	ipc_put_f64(w, ev->decode_s);
	ipc_put_f64(w, ev->ttft_s);
}

/* A duration, rate or size from the worker: finite and >= 0. */
static int finite_nonneg(double d)
{
	return isfinite(d) && d >= 0;
}

int wc_event_unpack(const uint8_t *p, size_t n, wc_event *ev)
{
	ipc_rd rd;
	ipc_rd_init(&rd, p, n);
	memset(ev, 0, sizeof(*ev));
	uint32_t t = ipc_get_u32(&rd);
	if (t >= WC_EV_COUNT)
		return -1;
	ev->type = (wc_event_type)t;
	if (t == WC_EV_TEXT || t == WC_EV_REASONING) {
		size_t l;
		const uint8_t *s = ipc_get_bytes(&rd, IPC_MAX_PAYLOAD, &l);
		ev->text = (const char *)s;
		ev->len = l;
	} else {
		uint32_t f = ipc_get_u32(&rd);
		if (f >= WC_FINISH_COUNT)
			return -1;
		ev->finish = (wc_finish)f;
		ev->prompt_tokens = ipc_get_u64(&rd);
		ev->prefilled = ipc_get_u64(&rd);
		ev->completion_tokens = ipc_get_u64(&rd);
		ev->prefill_s = ipc_get_f64(&rd);
		ev->decode_s = ipc_get_f64(&rd);
		ev->ttft_s = ipc_get_f64(&rd);
		/* Times: finite and >= 0 (0 in progress events and before a
		 * first token); NaN fails every comparison, isfinite stops inf. */
		if (ev->prefilled > ev->prompt_tokens || !finite_nonneg(ev->prefill_s) || !finite_nonneg(ev->decode_s) ||
		    !finite_nonneg(ev->ttft_s))
			return -1;
	}
	return rd.bad || rd.left ? -1 : 0;
}

void wc_error_pack(const wc_error *e, ipc_wr *w)
{
	ipc_put_u32(w, (uint32_t)e->kind);
	ipc_put_u64(w, e->prompt_tokens);
	ipc_put_u32(w, (uint32_t)e->ctx);
	ipc_put_bytes(w, e->msg, strnlen(e->msg, sizeof(e->msg) - 1));
}

/* Text from the worker is shown to people, on one line: keep well-formed
 * UTF-8 but no control character (C0, DEL, C1: U+009B is CSI, which a
 * terminal reads like ESC '['); each control character and each byte of
 * invalid UTF-8 (overlong, surrogate, > U+10FFFF, truncated at the end)
 * becomes '?', so the copy is never longer than the field. */
static void copy_text(char *dst, size_t cap, const uint8_t *s, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	dst[utf8_clean(NULL, s, n, 1, 0, dst)] = 0;
}

/* A length-prefixed text field into dst (cleaned by copy_text); sets
 * rd->bad when it is missing or longer than dst holds. */
static void get_text(ipc_rd *rd, char *dst, size_t cap)
{
	size_t l;
	const uint8_t *s = ipc_get_bytes(rd, cap - 1, &l);
	if (s)
		copy_text(dst, cap, s, l);
}

int wc_error_unpack(const uint8_t *p, size_t n, wc_error *e)
{
	ipc_rd rd;
	ipc_rd_init(&rd, p, n);
	memset(e, 0, sizeof(*e));
	uint32_t k = ipc_get_u32(&rd);
	e->prompt_tokens = ipc_get_u64(&rd);
	e->ctx = (int)ipc_get_u32(&rd);
	get_text(&rd, e->msg, sizeof(e->msg));
	if (rd.bad || rd.left || k == WC_ERR_NONE || k >= WC_ERR_COUNT || e->ctx < 0)
		return -1;
	e->kind = (wc_error_kind)k;
	return 0;
}

void wc_info_pack(const wc_info *i, ipc_wr *w)
{
	ipc_put_bytes(w, i->model_type, strnlen(i->model_type, sizeof(i->model_type) - 1));
	ipc_put_bytes(w, i->chat_format, strnlen(i->chat_format, sizeof(i->chat_format) - 1));
	ipc_put_u32(w, (uint32_t)i->chat_ok);
	ipc_put_bytes(w, i->chat_note, strnlen(i->chat_note, sizeof(i->chat_note) - 1));
	ipc_put_u32(w, (uint32_t)i->vocab);
	ipc_put_u32(w, (uint32_t)i->ctx);
	ipc_put_u32(w, (uint32_t)i->max_pos);
	ipc_put_u32(w, (uint32_t)i->n_layers);
	ipc_put_u32(w, (uint32_t)i->hidden);
	ipc_put_u32(w, (uint32_t)i->n_heads);
	ipc_put_u32(w, (uint32_t)i->n_kv_heads);
	ipc_put_u64(w, i->weight_bytes);
	ipc_put_u64(w, i->decode_bytes);
	ipc_put_bytes(w, i->device, strnlen(i->device, sizeof(i->device) - 1));
}

int wc_info_unpack(const uint8_t *p, size_t n, wc_info *i)
{
	ipc_rd rd;
	ipc_rd_init(&rd, p, n);
	memset(i, 0, sizeof(*i));
	get_text(&rd, i->model_type, sizeof(i->model_type));
	get_text(&rd, i->chat_format, sizeof(i->chat_format));
	i->chat_ok = ipc_get_u32(&rd) != 0;
	get_text(&rd, i->chat_note, sizeof(i->chat_note));
	int *f[] = { &i->vocab, &i->ctx, &i->max_pos, &i->n_layers, &i->hidden, &i->n_heads, &i->n_kv_heads };
	for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++) {
		uint32_t v = ipc_get_u32(&rd);
		if (v == 0 || v > (1u << 30))
			return -1;
		*f[k] = (int)v;
	}
	i->weight_bytes = ipc_get_u64(&rd);
	i->decode_bytes = ipc_get_u64(&rd);
	get_text(&rd, i->device, sizeof(i->device));
	return rd.bad || rd.left ? -1 : 0;
}

void wc_bench_res_pack(const wc_bench_res *b, ipc_wr *w)
{
	ipc_put_bytes(w, b->kernels, strnlen(b->kernels, sizeof(b->kernels) - 1));
	ipc_put_u32(w, (uint32_t)b->threads);
	ipc_put_u32(w, (uint32_t)b->prefill_x);
	ipc_put_f64(w, b->prefill_s);
	ipc_put_f64(w, b->decode_short_s);
	ipc_put_f64(w, b->decode_long_s);
	ipc_put_f64(w, b->mem_bw);
	ipc_put_u64(w, b->decode_bytes);
	ipc_put_f64(w, b->peak_rss_mb);
	const wc_prof *ps[2] = { &b->prof_short, &b->prof_long };
	for (int k = 0; k < 2; k++)
		for (int c = 0; c < WC_PROF_COUNT; c++) {
			ipc_put_f64(w, ps[k]->s[c]);
			ipc_put_u64(w, ps[k]->bytes[c]);
		}
}

/* A measured duration that cannot be 0 (a real run takes time): finite
 * and > 0. */
static int finite_pos(double d)
{
	return isfinite(d) && d > 0;
}

int wc_bench_res_unpack(const uint8_t *p, size_t n, wc_bench_res *b)
{
	ipc_rd rd;
	ipc_rd_init(&rd, p, n);
	memset(b, 0, sizeof(*b));
	get_text(&rd, b->kernels, sizeof(b->kernels));
	b->threads = (int)ipc_get_u32(&rd);
	uint32_t px = ipc_get_u32(&rd);
	b->prefill_s = ipc_get_f64(&rd);
	b->decode_short_s = ipc_get_f64(&rd);
	b->decode_long_s = ipc_get_f64(&rd);
	b->mem_bw = ipc_get_f64(&rd);
	b->decode_bytes = ipc_get_u64(&rd);
	b->peak_rss_mb = ipc_get_f64(&rd);
	/* Breakdowns: every time finite and >= 0, and no category longer than
	 * its whole measurement (they are parts of it; the wholes are checked
	 * finite below, so the parts are too). */
	wc_prof *ps[2] = { &b->prof_short, &b->prof_long };
	double whole[2] = { b->decode_short_s, b->decode_long_s };
	int bad = 0;
	for (int k = 0; k < 2; k++)
		for (int c = 0; c < WC_PROF_COUNT; c++) {
			ps[k]->s[c] = ipc_get_f64(&rd);
			ps[k]->bytes[c] = ipc_get_u64(&rd);
			bad |= !(ps[k]->s[c] >= 0 && ps[k]->s[c] <= whole[k]);
		}
	if (rd.bad || rd.left || bad || px >= WC_PREFILL_X_COUNT || b->threads < 1 || !finite_pos(b->prefill_s) ||
	    !finite_pos(b->decode_short_s) || !finite_pos(b->decode_long_s) || !finite_nonneg(b->mem_bw) ||
	    b->decode_bytes == 0 || !finite_nonneg(b->peak_rss_mb))
		return -1;
	b->prefill_x = (wc_prefill_x)px;
	return 0;
}
