/* worker/serve.c — see serve.h. One request at a time; a generation polls
 * the socket between decode steps for IPC_CANCEL. */
#include "worker/serve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/trace.h"
#include "common/modelfiles.h"
#include "common/safetensors.h"
#include "common/wcapi.h"
#include "worker/exec.h"
#include "worker/import.h"
#include "worker/session.h"

#define MANIFEST_MAGIC 0x4d4c584du /* "MLXM" */
#define MANIFEST_MAX ((size_t)512 << 20)

typedef struct {
	int sock;
	session s;
	int loaded;
	uint64_t id;      /* request being served */
	int cancelled;
	int broken;       /* protocol error seen while polling */
	ipc_msg *poll_msg;
} server;

static int send_error(server *sv, wc_error_kind kind, const char *msg, size_t prompt_tokens, int ctx)
{
	wc_error e;
	memset(&e, 0, sizeof(e));
	e.kind = kind;
	e.prompt_tokens = prompt_tokens;
	e.ctx = ctx;
	snprintf(e.msg, sizeof(e.msg), "%s", msg);
	uint8_t buf[1024];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	wc_error_pack(&e, &w);
	return ipc_send(sv->sock, IPC_ERROR, sv->id, buf, w.len, NULL, 0);
}

static int send_wc_error(server *sv, const wc_error *e)
{
	return send_error(sv, e->kind ? e->kind : WC_ERR_INVALID, e->msg, e->prompt_tokens, e->ctx);
}

/* Bulk results: IPC_DATA packets, then IPC_DONE. */
static int send_bulk(server *sv, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t off = 0; off < n; off += IPC_MAX_PAYLOAD) {
		size_t k = n - off < IPC_MAX_PAYLOAD ? n - off : IPC_MAX_PAYLOAD;
		if (ipc_send(sv->sock, IPC_DATA, sv->id, b + off, k, NULL, 0))
			return -1;
	}
	return ipc_send(sv->sock, IPC_DONE, sv->id, NULL, 0, NULL, 0);
}

static int send_ids(server *sv, const int *ids, size_t n)
{
	uint32_t *u = malloc(sizeof(uint32_t) * (n ? n : 1));
	if (!u)
		return send_error(sv, WC_ERR_INVALID, "out of memory", 0, 0);
	for (size_t i = 0; i < n; i++) {
		uint8_t *b = (uint8_t *)&u[i];
		uint32_t v = (uint32_t)ids[i];
		b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); b[2] = (uint8_t)(v >> 16); b[3] = (uint8_t)(v >> 24);
	}
	int r = send_bulk(sv, u, n * 4);
	free(u);
	return r;
}

/* Reads "u32 n, n x u32" ids from a payload (bounded by the packet). */
static int read_ids(ipc_rd *rd, int **ids, size_t *n)
{
	uint32_t k = ipc_get_u32(rd);
	if (rd->bad || k == 0 || k > rd->left / 4)
		return -1;
	*ids = malloc(sizeof(int) * k);
	if (!*ids)
		return -1;
	for (uint32_t i = 0; i < k; i++) {
		uint32_t v = ipc_get_u32(rd);
		if (v > (1u << 30)) {
			free(*ids);
			return -1;
		}
		(*ids)[i] = (int)v;
	}
	*n = k;
	return rd->bad ? (free(*ids), -1) : 0;
}

/* ---- LOAD ---- */

static int get_file(ipc_rd *rd, mf_buf *b, size_t max)
{
	uint32_t present = ipc_get_u32(rd);
	size_t n;
	const uint8_t *p = ipc_get_bytes(rd, max, &n);
	if (rd->bad || present > 1)
		return -1;
	b->p = present ? (const char *)p : NULL;
	b->n = present ? n : 0;
	return 0;
}

static int do_load(server *sv, ipc_msg *m)
{
	char err[512];
	const uint8_t *man = NULL;
	size_t manlen = 0;
	ipc_rd rd;
	ipc_rd_init(&rd, m->payload, m->len);
	uint32_t version = ipc_get_u32(&rd), ctx = ipc_get_u32(&rd), nshards = ipc_get_u32(&rd);
	if (sv->loaded || rd.bad || rd.left || version != IPC_VERSION || ctx == 0 || ctx > (1u << 24) ||
	    nshards == 0 || (int)nshards + 1 != m->nfds) {
		ipc_close_fds(m);
		fprintf(stderr, "mlxr-worker: malformed LOAD\n");
		return -1;
	}
	trace_mark("worker: LOAD received");
	if (ipc_memfd_map(m->fds[0], MANIFEST_MAX, &man, &manlen, err, sizeof(err))) {
		ipc_close_fds(m);
		return send_error(sv, WC_ERR_MODEL, err, 0, 0);
	}
	close(m->fds[0]);
	int nsh = m->nfds - 1;
	m->nfds = 0; /* the shard descriptors are owned below (closed on every path) */
	ipc_rd mr;
	ipc_rd_init(&mr, man, manlen);
	model_config cfg;
	st_set st;
	mf_files f;
	memset(&f, 0, sizeof(f));
	int ok = ipc_get_u32(&mr) == MANIFEST_MAGIC && model_config_unpack(&cfg, &mr, err, sizeof(err)) == 0;
	if (!ok) {
		for (int i = 1; i <= nsh; i++)
			close(m->fds[i]);
		munmap((void *)man, manlen);
		return send_error(sv, WC_ERR_MODEL, "malformed model manifest", 0, 0);
	}
	if (st_table_load(&st, &mr, m->fds + 1, nsh, err, sizeof(err))) {
		model_config_free(&cfg);
		munmap((void *)man, manlen);
		return send_error(sv, WC_ERR_MODEL, err, 0, 0);
	}
	if (get_file(&mr, &f.tokenizer, MF_TOKENIZER_MAX) || get_file(&mr, &f.tok_config, MF_TOKCONFIG_MAX) ||
	    get_file(&mr, &f.gen_config, MF_GENCONFIG_MAX) || get_file(&mr, &f.chat_template, MF_TEMPLATE_MAX) ||
	    mr.left) {
		model_config_free(&cfg);
		st_close(&st);
		munmap((void *)man, manlen);
		return send_error(sv, WC_ERR_MODEL, "malformed model manifest", 0, 0);
	}
	memset(&sv->s, 0, sizeof(sv->s));
	sv->s.gpu = worker_gpu;
	if (model_from_parts(&sv->s.m, &cfg, &st, worker_gpu ? NULL : session_weights_par(), err, sizeof(err)) ||
	    session_init(&sv->s, &f, (int)ctx, err, sizeof(err))) {
		munmap((void *)man, manlen);
		return send_error(sv, WC_ERR_MODEL, err, 0, 0);
	}
	trace_mark("worker: session ready");
	munmap((void *)man, manlen); /* the small files are parsed; nothing points into it */
	sv->loaded = 1;
	const model_config *c = &sv->s.m.cfg;
	wc_info info;
	memset(&info, 0, sizeof(info));
	snprintf(info.model_type, sizeof(info.model_type), "%s", c->model_type);
	snprintf(info.chat_format, sizeof(info.chat_format), "%s", chat_format_name(sv->s.chat.format));
	info.chat_ok = sv->s.chat_ok;
	snprintf(info.chat_note, sizeof(info.chat_note), "%s", sv->s.chat_note);
	info.vocab = c->vocab;
	info.ctx = sv->s.st.ctx;
	info.max_pos = c->max_pos;
	info.n_layers = c->n_layers;
	info.hidden = c->hidden;
	info.n_heads = c->n_heads;
	info.n_kv_heads = c->n_kv_heads;
	info.weight_bytes = sv->s.m.weight_bytes;
	info.decode_bytes = sv->s.m.decode_bytes;
	snprintf(info.device, sizeof(info.device), "%s", sv->s.device);
	uint8_t buf[1024];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	wc_info_pack(&info, &w);
	return ipc_send(sv->sock, IPC_READY, sv->id, buf, w.len, NULL, 0);
}

/* ---- GENERATE ---- */

/* Between decode steps: a pending IPC_CANCEL for this request cancels;
 * anything else is a protocol error (the broker sends one request at a
 * time). */
static int poll_cancel(void *arg)
{
	server *sv = arg;
	if (sv->cancelled || sv->broken)
		return 1;
	char err[200];
	for (;;) {
		ipc_msg *m = sv->poll_msg;
		int r;
		/* MSG_DONTWAIT through a non-blocking peek first. */
		uint8_t b;
		ssize_t k = recv(sv->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		r = ipc_recv(sv->sock, m, err, sizeof(err));
		if (r != 0 || m->type != IPC_CANCEL) {
			ipc_close_fds(m);
			sv->broken = 1;
			return 1;
		}
		ipc_close_fds(m);
		if (m->id == sv->id) {
			sv->cancelled = 1;
			return 1;
		}
	}
}

static int send_event(void *arg, const wc_event *ev)
{
	server *sv = arg;
	uint8_t buf[IPC_MAX_PAYLOAD];
	wc_event e = *ev;
	/* Text longer than a packet goes in pieces (complete UTF-8 each:
	 * cut before a continuation byte). */
	if ((e.type == WC_EV_TEXT || e.type == WC_EV_REASONING) && e.len > IPC_MAX_PAYLOAD - 64) {
		size_t off = 0;
		while (off < ev->len) {
			size_t k = ev->len - off;
			if (k > IPC_MAX_PAYLOAD - 64) {
				k = IPC_MAX_PAYLOAD - 64;
				while (k > 0 && ((unsigned char)ev->text[off + k] & 0xC0) == 0x80)
					k--;
			}
			e.text = ev->text + off;
			e.len = k;
			if (send_event(arg, &e))
				return 1;
			off += k;
		}
		return 0;
	}
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	wc_event_pack(&e, &w);
	if (w.bad || ipc_send(sv->sock, IPC_EVENT, sv->id, buf, w.len, NULL, 0)) {
		sv->broken = 1;
		return 1;
	}
	return poll_cancel(sv);
}

static int map_request(server *sv, ipc_msg *m, const uint8_t **p, size_t *n)
{
	char err[200];
	if (m->nfds != 1) {
		ipc_close_fds(m);
		sv->broken = 1;
		return -1;
	}
	int r = ipc_memfd_map(m->fds[0], (size_t)256 << 20, p, n, err, sizeof(err));
	close(m->fds[0]);
	m->nfds = 0;
	if (r)
		sv->broken = 1;
	return r;
}

static int do_generate(server *sv, ipc_msg *m, int ids_only)
{
	const uint8_t *p;
	size_t n;
	char err[200];
	if (map_request(sv, m, &p, &n))
		return -1;
	wc_request r;
	wc_msg *msgs;
	int rc;
	if (wc_request_unpack(p, n, &r, &msgs, err, sizeof(err))) {
		munmap((void *)p, n);
		return send_error(sv, WC_ERR_INVALID, err, 0, 0);
	}
	wc_error e;
	if (ids_only) {
		int *ids;
		size_t ni;
		if (exec_chat_ids(&sv->s, &r, &ids, &ni, &e)) {
			rc = send_wc_error(sv, &e);
		} else {
			rc = send_ids(sv, ids, ni);
			free(ids);
		}
	} else {
		sv->cancelled = 0;
		if (exec_generate(&sv->s, &r, send_event, poll_cancel, sv, &e))
			rc = send_wc_error(sv, &e);
		else
			rc = sv->broken ? -1 : ipc_send(sv->sock, IPC_DONE, sv->id, NULL, 0, NULL, 0);
	}
	wc_request_unpacked_free(&r, msgs);
	if (n)
		munmap((void *)p, n);
	return sv->broken ? -1 : rc;
}

/* ---- the rest ---- */

static int do_bench(server *sv, ipc_msg *m)
{
	ipc_rd rd;
	ipc_rd_init(&rd, m->payload, m->len);
	wc_bench_req br;
	br.prefill = (int)ipc_get_u32(&rd);
	br.decode = (int)ipc_get_u32(&rd);
	br.long_ctx = (int)ipc_get_u32(&rd);
	if (rd.bad || rd.left || br.prefill < 1 || br.decode < 1 || br.long_ctx < 1 || br.prefill > (1 << 24) ||
	    br.decode > (1 << 24) || br.long_ctx > (1 << 24))
		return -1;
	wc_bench_res res;
	wc_error e;
	if (exec_bench(&sv->s, &br, &res, &e))
		return send_wc_error(sv, &e);
	uint8_t buf[512];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	wc_bench_res_pack(&res, &w);
	return ipc_send(sv->sock, IPC_DONE, sv->id, buf, w.len, NULL, 0);
}

static int do_logits_or_greedy(server *sv, ipc_msg *m)
{
	ipc_rd rd;
	ipc_rd_init(&rd, m->payload, m->len);
	uint32_t arg = ipc_get_u32(&rd); /* LOGITS: decode flag; GREEDY: tokens to generate */
	int *ids;
	size_t n;
	wc_error e;
	if (read_ids(&rd, &ids, &n) || rd.left)
		return -1;
	int rc;
	if (m->type == IPC_LOGITS) {
		size_t V = (size_t)sv->s.m.cfg.vocab;
		float *lg = n <= ((size_t)1 << 34) / V ? malloc(sizeof(float) * n * V) : NULL;
		if (!lg)
			rc = send_error(sv, WC_ERR_INVALID, "out of memory for the logits", 0, 0);
		else if (exec_logits(&sv->s, ids, n, arg != 0, lg, &e))
			rc = send_wc_error(sv, &e);
		else
			rc = send_bulk(sv, lg, sizeof(float) * n * V);
		free(lg);
	} else {
		int *out = arg >= 1 && arg <= (1u << 20) ? malloc(sizeof(int) * arg) : NULL;
		if (!out)
			rc = send_error(sv, WC_ERR_INVALID, "bad generation length", 0, 0);
		else if (exec_greedy(&sv->s, ids, n, (int)arg, out, &e))
			rc = send_wc_error(sv, &e);
		else
			rc = send_ids(sv, out, arg);
		free(out);
	}
	free(ids);
	return rc;
}

static int do_tokenize(server *sv, ipc_msg *m)
{
	ipc_rd rd;
	ipc_rd_init(&rd, m->payload, m->len);
	uint32_t special = ipc_get_u32(&rd);
	const uint8_t *p;
	size_t n;
	if (rd.bad || rd.left || special > 1 || map_request(sv, m, &p, &n))
		return -1;
	int *ids = NULL;
	size_t ni = 0;
	char err[256];
	int rc;
	if (session_encode_raw(&sv->s, (const char *)p, n, (int)special, &ids, &ni, err, sizeof(err)))
		rc = send_error(sv, WC_ERR_INVALID, err, 0, 0);
	else
		rc = send_ids(sv, ids, ni);
	free(ids);
	if (n)
		munmap((void *)p, n);
	return rc;
}

static int do_detokenize(server *sv, ipc_msg *m)
{
	ipc_rd rd;
	ipc_rd_init(&rd, m->payload, m->len);
	int *ids;
	size_t n;
	if (read_ids(&rd, &ids, &n) || rd.left)
		return -1;
	int rc;
	char *out = NULL;
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= tok_vocab_size(sv->s.tok)) {
			free(ids);
			return send_error(sv, WC_ERR_INVALID, "token id outside the vocabulary", 0, 0);
		}
	if (tok_decode(sv->s.tok, ids, n, 0, &out, &len))
		rc = send_error(sv, WC_ERR_INVALID, "out of memory", 0, 0);
	else
		rc = send_bulk(sv, out, len);
	free(out);
	free(ids);
	return rc;
}

static int do_import(server *sv, ipc_msg *m)
{
	ipc_rd rd;
	ipc_rd_init(&rd, m->payload, m->len);
	gguf_import_opts o;
	o.bits = (int)ipc_get_u32(&rd);
	o.group_size = (int)ipc_get_u32(&rd);
	if (rd.bad || rd.left || m->nfds != 5) {
		ipc_close_fds(m);
		return -1;
	}
	imp_outs outs = { m->fds[1], m->fds[2], m->fds[3], m->fds[4] };
	gguf_import_stats st;
	char err[512];
	int rc;
	if (gguf_import_fds(m->fds[0], &outs, &o, &st, err, sizeof(err))) {
		rc = send_error(sv, WC_ERR_MODEL, err, 0, 0);
	} else {
		char msg[256];
		int l = snprintf(msg, sizeof(msg), "%s\t%llu\t%llu\t%llu\t%llu", st.arch, (unsigned long long)st.tensors,
				 (unsigned long long)st.exact, (unsigned long long)st.requantized,
				 (unsigned long long)st.dense);
		rc = send_bulk(sv, msg, (size_t)l);
	}
	ipc_close_fds(m);
	return rc;
}

int worker_fault_after = -1;
const session_gpu *worker_gpu;
int (*worker_after_load)(void);

int worker_serve(int sock, int importer)
{
	int served = 0;
	static server sv;
	static ipc_msg m, pm;
	char err[256];
	memset(&sv, 0, sizeof(sv));
	sv.sock = sock;
	sv.poll_msg = &pm;
	for (;;) {
		int r = ipc_recv(sock, &m, err, sizeof(err));
		if (r == 1)
			return 0;
		if (r < 0) {
			fprintf(stderr, "mlxr-worker: %s\n", err);
			return 1;
		}
		sv.id = m.id;
		int bad;
		if (m.type != IPC_LOAD && m.type != IPC_CANCEL && worker_fault_after >= 0 && served++ >= worker_fault_after) {
			/* A header that claims more payload than the packet holds. */
			uint8_t hdr[IPC_HDR] = { IPC_EVENT, 0, 0, 0, 0xff, 0xff, 0, 0 };
			ipc_close_fds(&m);
			if (send(sock, hdr, sizeof(hdr), 0) < 0)
				return 1;
			continue;
		}
		if (importer)
			bad = m.type == IPC_IMPORT ? do_import(&sv, &m) : -1;
		else if (m.type == IPC_LOAD)
			bad = do_load(&sv, &m);
		else if (!sv.loaded)
			bad = -1;
		else {
			switch (m.type) {
			case IPC_GENERATE: bad = do_generate(&sv, &m, 0); break;
			case IPC_CHAT_IDS: bad = do_generate(&sv, &m, 1); break;
			case IPC_CANCEL: bad = 0; ipc_close_fds(&m); break; /* for a request already finished */
			case IPC_BENCH: bad = do_bench(&sv, &m); break;
			case IPC_LOGITS:
			case IPC_GREEDY: bad = do_logits_or_greedy(&sv, &m); break;
			case IPC_TOKENIZE: bad = do_tokenize(&sv, &m); break;
			case IPC_DETOKENIZE: bad = do_detokenize(&sv, &m); break;
			default: bad = -1;
			}
		}
		ipc_close_fds(&m);
		if (bad) {
			fprintf(stderr, "mlxr-worker: protocol error on message type %u\n", m.type);
			return 1;
		}
		/* The GPU worker's last lockdown step, once LOAD is answered
		 * (weights on the device), whatever its outcome. */
		if (m.type == IPC_LOAD && worker_after_load) {
			int (*f)(void) = worker_after_load;
			worker_after_load = NULL;
			if (f())
				return 1;
		}
	}
}
