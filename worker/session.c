/* worker/session.c — see session.h. */
#include "worker/session.h"
#include "common/trace.h"
#include "common/json.h"
#include "common/modelfiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double session_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void add_stop_id(session *s, int id)
{
	if (id < 0 || id >= s->m.cfg.vocab)
		return;
	for (int i = 0; i < s->n_stop_ids; i++)
		if (s->stop_ids[i] == id)
			return;
	if (s->n_stop_ids < (int)(sizeof(s->stop_ids) / sizeof(s->stop_ids[0])))
		s->stop_ids[s->n_stop_ids++] = id;
}

static void add_stop_piece(session *s, const char *piece)
{
	if (piece && *piece)
		add_stop_id(s, tok_id(s->tok, piece, strlen(piece)));
}

/* Parses a JSON file's bytes, for the few fields read here. */
static int parse_opt(const mf_buf *b, json_doc *d)
{
	char jerr[128];
	return b->p && json_parse(b->p, b->n, d, jerr, sizeof(jerr)) == 0 ? 0 : -1;
}

int session_init(session *s, const mf_files *f, int ctx, char *err, size_t errlen)
{
	const model_config *c = &s->m.cfg;
	char terr[400];
	if (kpool_threads() <= 1)
		kpool_init(0); /* all online CPUs, or MLXR_THREADS */
	if (!f->tokenizer.p || tok_load(&s->tok, f->tokenizer.p, f->tokenizer.n, terr, sizeof(terr))) {
		snprintf(err, errlen, "%s", f->tokenizer.p ? terr : "tokenizer.json: missing"); /* terr names the file */
		goto fail;
	}
	trace_mark("session: tokenizer parsed");
	if (tok_vocab_size(s->tok) > c->vocab) {
		snprintf(err, errlen, "tokenizer.json: %d token ids but the embedding table has %d rows",
			 tok_vocab_size(s->tok), c->vocab);
		goto fail;
	}
	/* Chat template and BOS policy. */
	int r = CHAT_ERR_NO_TEMPLATE;
	memset(&s->chat, 0, sizeof(s->chat));
	s->chat.format = CHAT_FMT_COUNT;
	if (f->tok_config.p) {
		char cerr[256] = "";
		r = chat_config_load(&s->chat, f->tok_config.p, f->tok_config.n, cerr, sizeof(cerr));
		if (r == CHAT_ERR_INVALID) {
			snprintf(err, errlen, "tokenizer_config.json: %s", cerr);
			goto fail;
		}
		if (r == CHAT_ERR_UNKNOWN)
			snprintf(s->chat_note, sizeof(s->chat_note), "%s", cerr);
		json_doc d;
		if (parse_opt(&f->tok_config, &d) == 0) {
			int b;
			if (json_get_bool(d.root, "add_bos_token", &b) == 0)
				s->add_bos = b;
			json_free(&d);
		}
	}
	if (r == CHAT_ERR_NO_TEMPLATE) {
		if (f->chat_template.p) {
			char cerr[256] = "";
			r = chat_config_set_template(&s->chat, f->chat_template.p, f->chat_template.n, cerr, sizeof(cerr));
			if (r)
				snprintf(s->chat_note, sizeof(s->chat_note), "%s", cerr);
		} else {
			snprintf(s->chat_note, sizeof(s->chat_note), "the model has no chat template");
		}
	}
	s->chat_ok = r == 0;
	if (!s->chat_ok)
		chat_config_fallback_chatml(&s->chat);
	/* End of sequence: config, generation_config, the tokenizer's eos
	 * text, and the end-of-turn token of the chat family. */
	for (int i = 0; i < c->n_eos; i++)
		add_stop_id(s, c->eos_ids[i]);
	json_doc d;
	if (parse_opt(&f->gen_config, &d) == 0) {
		const json_value *e = json_get(d.root, "eos_token_id");
		if (e && e->type == JSON_NUMBER && e->is_int)
			add_stop_id(s, (int)e->i);
		for (uint32_t i = 0; e && e->type == JSON_ARRAY && i < e->n; i++)
			if (e->items[i].type == JSON_NUMBER && e->items[i].is_int)
				add_stop_id(s, (int)e->items[i].i);
		json_free(&d);
	}
	add_stop_piece(s, s->chat.eos);
	static const char *turn_ends[] = { "<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>" };
	for (size_t i = 0; i < sizeof(turn_ends) / sizeof(turn_ends[0]); i++) {
		int id = tok_id(s->tok, turn_ends[i], strlen(turn_ends[i]));
		if (id >= 0 && tok_is_special(s->tok, id))
			add_stop_id(s, id);
	}
	/* Context and memory: refuse before allocating what does not fit. */
	if (ctx <= 0)
		ctx = 4096;
	if (ctx > c->max_pos)
		ctx = c->max_pos;
	/* batch: the host state's rows; on a GPU only logits rows, and the
	 * GPU's calls and scratch no larger than the context */
	int batch = SESSION_PREFILL_BATCH;
	s->prefill_batch = SESSION_PREFILL_BATCH;
	if (s->gpu) {
		batch = ctx < SESSION_LOGITS_BATCH_GPU ? ctx : SESSION_LOGITS_BATCH_GPU;
		s->prefill_batch = ctx < SESSION_PREFILL_BATCH_GPU ? ctx : SESSION_PREFILL_BATCH_GPU;
	}
	if (model_check_memory(c, s->m.weight_bytes, ctx, batch, s->gpu != NULL, err, errlen))
		goto fail;
	if (model_state_init(&s->st, &s->m, s->gpu ? 1 : ctx, batch)) {
		snprintf(err, errlen, "out of memory for a %d-token context", ctx);
		goto fail;
	}
	if (s->gpu) {
		/* st.k/v hold one token and are never used: the cache is on the
		 * device; st.ctx is the device cache's size. */
		s->st.ctx = ctx;
		if (s->gpu->open(s, ctx, err, errlen))
			goto fail;
	} else {
		snprintf(s->device, sizeof(s->device), "cpu (%s, %d threads)", kernels_best()->name, kpool_threads());
	}
	s->cache_cap = (size_t)ctx;
	s->cache_ids = malloc(sizeof(int) * s->cache_cap);
	if (!s->cache_ids) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	return 0;
fail:
	session_close(s);
	return -1;
}

model_par_fn session_weights_par(void)
{
	const char *e = getenv("MLXR_WEIGHTS");
	if (!e || strcmp(e, "copy"))
		return NULL;
	if (kpool_threads() <= 1)
		kpool_init(0); /* all online CPUs, or MLXR_THREADS */
	return kpool_for;
}

int session_open(session *s, const char *dir, int ctx, char *err, size_t errlen)
{
	mf_files f;
	memset(s, 0, sizeof(*s));
	trace_mark("inproc: load starts");
	if (mf_read(dir, &f, err, errlen))
		return -1;
	if (model_load_ex(&s->m, dir, session_weights_par(), err, errlen)) {
		mf_free(&f);
		return -1;
	}
	trace_mark("inproc: files read, model validated");
	int r = session_init(s, &f, ctx, err, errlen);
	trace_mark("inproc: session ready");
	mf_free(&f);
	return r;
}

void session_close(session *s)
{
	if (s->gpu && s->gh)
		s->gpu->close(s);
	if (s->tok)
		tok_free(s->tok);
	model_state_free(&s->st);
	model_free(&s->m);
	free(s->cache_ids);
	memset(s, 0, sizeof(*s));
}

void session_reset(session *s)
{
	s->st.pos = 0;
}

int session_forward(session *s, const int *ids, int n, int all_logits)
{
	if (s->gpu)
		return s->gpu->forward(s, ids, n, all_logits, 1);
	return model_forward(&s->m, &s->st, ids, n, all_logits);
}

int session_encode_plain(session *s, const char *text, size_t len, int **ids, size_t *n, char *err, size_t errlen)
{
	int *raw;
	size_t nr;
	if (tok_encode(s->tok, text, len, NULL, &raw, &nr, err, errlen))
		return -1;
	int bos = s->add_bos && s->m.cfg.bos_id >= 0;
	*ids = malloc(sizeof(int) * (nr + 1));
	if (!*ids) {
		free(raw);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (bos)
		(*ids)[0] = s->m.cfg.bos_id;
	memcpy(*ids + bos, raw, sizeof(int) * nr);
	*n = nr + (size_t)bos;
	free(raw);
	return 0;
}

int session_encode_raw(session *s, const char *text, size_t len, int special, int **ids, size_t *n, char *err,
		       size_t errlen)
{
	unsigned char *mask = NULL;
	if (special) {
		mask = malloc(len ? len : 1);
		if (!mask) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		memset(mask, 1, len);
	}
	int r = tok_encode(s->tok, text, len, mask, ids, n, err, errlen);
	free(mask);
	return r;
}

int session_encode_chat(session *s, const chat_msg *msgs, size_t n, const chat_opts *o, int **ids, size_t *nids,
			char *err, size_t errlen)
{
	char *txt;
	unsigned char *mask;
	size_t len;
	if (chat_render(&s->chat, msgs, n, o, &txt, &mask, &len, err, errlen))
		return -1;
	/* The template writes BOS text itself where its family does
	 * (template_bos); the rendered prompt is encoded without adding one. */
	int r = tok_encode(s->tok, txt, len, mask, ids, nids, err, errlen);
	free(txt);
	free(mask);
	return r;
}

/* Longest suffix of buf[0..n) that is a proper prefix of some stop string. */
static size_t stop_holdback(const gen_params *p, const char *buf, size_t n)
{
	size_t hold = 0;
	for (int i = 0; i < p->n_stops; i++) {
		size_t sl = strlen(p->stops[i]);
		for (size_t k = sl > n ? n : sl - 1; k > hold; k--)
			if (!memcmp(buf + n - k, p->stops[i], k)) {
				hold = k;
				break;
			}
	}
	return hold;
}

typedef struct {
	char *buf;
	size_t n, cap;
} textbuf;

/* Appends decoded text and emits what can no longer be part of a stop
 * string (all of it when final). Returns 0, 1 when a stop string ended the
 * answer, 2 when emit asked to stop, -1 out of memory. */
static int feed_text(textbuf *b, const gen_params *p, const char *txt, size_t tl, int final, session_emit emit,
		     void *arg)
{
	if (b->n + tl + 1 > b->cap) {
		size_t nc = (b->n + tl + 1) * 2;
		char *t = realloc(b->buf, nc);
		if (!t)
			return -1;
		b->buf = t;
		b->cap = nc;
	}
	memcpy(b->buf + b->n, txt, tl);
	b->n += tl;
	for (int i = 0; i < p->n_stops; i++) {
		char *hit = memmem(b->buf, b->n, p->stops[i], strlen(p->stops[i]));
		if (hit) {
			if (hit > b->buf)
				emit(arg, b->buf, (size_t)(hit - b->buf));
			b->n = 0;
			return 1;
		}
	}
	size_t hold = final ? 0 : stop_holdback(p, b->buf, b->n);
	if (b->n > hold) {
		int stop = emit(arg, b->buf, b->n - hold);
		memmove(b->buf, b->buf + b->n - hold, hold);
		b->n = hold;
		if (stop)
			return 2;
	}
	return 0;
}

int session_generate(session *s, const int *ids, size_t n, const gen_params *p, session_emit emit, void *arg,
		     gen_stats *stats, char *err, size_t errlen)
{
	const model_config *c = &s->m.cfg;
	size_t V = (size_t)c->vocab;
	sampler smp;
	tok_stream ts;
	int rc = -1;
	textbuf tb = { 0 };
	int *hist = NULL;
	memset(stats, 0, sizeof(*stats));
	if (n == 0) {
		snprintf(err, errlen, "empty prompt");
		return -1;
	}
	if (n >= (size_t)s->st.ctx) {
		snprintf(err, errlen, "context full: the prompt is %zu tokens and the context holds %d (--ctx)", n, s->st.ctx);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (size_t)ids[i] >= V) {
			snprintf(err, errlen, "token id %d outside the vocabulary", ids[i]);
			return -1;
		}
	if (sampler_init(&smp, (int)V, &p->sp)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	tok_stream_init(&ts, s->tok, 1);
	size_t hcap = n + (size_t)s->st.ctx + 1;
	hist = malloc(sizeof(int) * hcap);
	if (!hist) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	memcpy(hist, ids, sizeof(int) * n);
	size_t nh = n;

	double t0 = session_now();
	/* Reuse the cached prefix; at least the last prompt token is run to
	 * get fresh logits. */
	size_t keep = 0, have = (size_t)s->st.pos;
	while (keep < have && keep < n - 1 && s->cache_ids[keep] == ids[keep])
		keep++;
	s->st.pos = (int)keep;
	stats->prompt_tokens = n;
	stats->prefilled = n - keep;
	/* On a GPU the token is chosen on the device and the next step is
	 * queued before it is read back (two steps in flight); the logits
	 * never leave the device. Greedy (sampler_path: temperature <= 0 or
	 * top_p 0) without penalties: the argmax inside the captured step
	 * (dev_greedy). Every other setting the device
	 * sampler covers (sample_begin; the same token as sampler_pick):
	 * dev_sample, the sampler kernel captured with the forward pass of its
	 * token (queued the same way). The rest copies the last logits row
	 * back and uses sampler_pick, as on the CPU. MLXR_GPU_SAMPLE=0 turns
	 * the device sampler off (comparisons). */
	const sampler_params *sp = &p->sp;
	int dev_greedy = s->gpu && sampler_path(sp, (int)V) == SAMPLER_GREEDY && !sampler_penalized(sp);
	int dev_sample = 0;
	const char *gs = getenv("MLXR_GPU_SAMPLE");
	if (s->gpu && !dev_greedy && s->gpu->sample_begin && !(gs && gs[0] == '0')) {
		dev_sample = s->gpu->sample_begin(s, sp, smp.rng, ids, n);
		if (dev_sample < 0) {
			snprintf(err, errlen, "forward pass failed (GPU sampler)");
			goto out;
		}
	}
	const int dev = dev_greedy || dev_sample;
	for (size_t done = keep; done < n;) {
		size_t step = n - done < (size_t)s->prefill_batch ? n - done : (size_t)s->prefill_batch;
		int copy = !dev || done + step < n;
		if (s->gpu ? s->gpu->forward(s, ids + done, (int)step, 0, copy)
			   : model_forward(&s->m, &s->st, ids + done, (int)step, 0)) {
			snprintf(err, errlen, "forward pass failed");
			s->st.pos = 0;
			goto out;
		}
		memcpy(s->cache_ids + done, ids + done, sizeof(int) * step);
		done += step;
		if ((p->cancel && *p->cancel) || (p->progress && done < n && p->progress(arg, done, n))) {
			stats->stop_reason = 4;
			rc = 0;
			goto out;
		}
	}
	double t1 = session_now();
	stats->prefill_s = t1 - t0;
	float *logits = s->st.logits;
	const int base = s->st.pos; /* dev: position of the first generated token */
	int queued = 0, accepted = 0;
	for (int k = 0;; k++) {
		int tok;
		if (dev) {
			/* step j picks the token at base + j and runs its forward;
			 * it is queued only where the CPU loop would run it too */
			while (queued < k + 2 && base + queued < s->st.ctx &&
			       (p->max_tokens <= 0 || queued < p->max_tokens)) {
				if (dev_greedy ? s->gpu->greedy_queue(s) : s->gpu->sample_queue(s))
					goto gpu_fail;
				queued++;
			}
			if (k >= queued || s->gpu->greedy_token(s, base + k, &tok))
				goto gpu_fail;
		} else {
			tok = sampler_pick(&smp, logits, hist, nh);
		}
		if (stats->generated == 0)
			stats->ttft_s = session_now() - t0;
		int is_stop = 0;
		for (int i = 0; i < s->n_stop_ids; i++)
			is_stop |= tok == s->stop_ids[i];
		if (is_stop) {
			stats->stop_reason = 0;
			break;
		}
		stats->generated++;
		hist[nh++] = tok;
		const char *txt;
		size_t tl;
		if (tok_stream_push(&ts, tok, &txt, &tl)) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		int r = feed_text(&tb, p, txt, tl, 0, emit, arg);
		if (r < 0) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		if (r > 0) {
			stats->stop_reason = r == 1 ? 1 : 4;
			goto done;
		}
		if (p->max_tokens > 0 && stats->generated >= (size_t)p->max_tokens) {
			stats->stop_reason = 2;
			break;
		}
		if ((p->cancel && *p->cancel) || (p->check && p->check(arg))) {
			stats->stop_reason = 4;
			break;
		}
		int at = dev ? base + k : s->st.pos;
		if (at + 1 >= s->st.ctx) {
			stats->stop_reason = 3;
			break;
		}
		if (dev) { /* its forward already ran on the device */
			s->cache_ids[at] = tok;
			accepted++;
			continue;
		}
		if (session_forward(s, &tok, 1, 0)) {
			snprintf(err, errlen, "forward pass failed");
			goto out;
		}
		s->cache_ids[at] = tok;
		logits = s->st.logits;
	}
	{
		const char *txt;
		size_t tl;
		if (tok_stream_flush(&ts, &txt, &tl) == 0 && feed_text(&tb, p, txt, tl, 1, emit, arg) == 1)
			stats->stop_reason = 1;
	}
done:
	/* The device ran one or two steps ahead: the cache keeps the tokens
	 * the loop accepted (what the CPU path would hold). */
	if (dev && s->gpu->set_pos(s, base + accepted)) {
	gpu_fail:
		snprintf(err, errlen, "forward pass failed (GPU)");
		s->st.pos = 0;
		s->gpu->set_pos(s, 0);
		goto out;
	}
	stats->decode_s = session_now() - t1;
	rc = 0;
out:
	(void)V;
	free(tb.buf);
	free(hist);
	tok_stream_free(&ts);
	sampler_free(&smp);
	return rc;
}
