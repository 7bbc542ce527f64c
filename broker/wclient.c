/* broker/wclient.c — the broker's handle on a sandboxed mlxr-worker (see
 * wclient.h).
 *
 * Start: the worker is started first (it locks itself down meanwhile); the
 * broker validates the model directory itself (config.json, every
 * safetensors header, every tensor against the config), and writes the
 * validated configuration, the tensor table and the small files into one
 * sealed memfd (the manifest), whose JSON parts it validates after sealing,
 * while the worker loads it (first_start). The worker receives the
 * manifest and read-only shard descriptors (or, with --sealed, sealed
 * memfd copies of the shards, re-validated after sealing) and never parses
 * a safetensors header or config.json.
 *
 * Supervision: everything the worker sends is decoded strictly
 * (common/ipc.c, common/wcproto.c); a malformed message, an EOF or a
 * failed send ends the worker (SIGKILL, reaped) and fails the running
 * request with WC_ERR_WORKER naming the reason; the next request starts a
 * fresh worker from the same manifest and descriptors.
 */
#include "broker/wclient.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker/spawn.h"
#include "common/ipc.h"
#include "common/trace.h"
#include "common/json.h"
#include "common/modelfiles.h"
#include "common/safetensors.h"
#include "worker/model.h"

#define MANIFEST_MAGIC 0x4d4c584du /* "MLXM" */
#define BULK_MAX ((size_t)4 << 30) /* logits of a long prompt x a big vocabulary */

struct wclient {
	wclient_opts o;
	int manifest;        /* sealed memfd */
	size_t json_off[3], json_len[3]; /* its JSON files, checked after sealing */
	int *shards;         /* read-only fds or sealed memfds */
	int nshards;
	pid_t pid;           /* 0: no worker running */
	int sock;
	uint64_t next_id;
	wclient_info info;
	ipc_msg msg;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void set_err(wc_error *e, wc_error_kind k, const char *fmt, const char *a)
{
	memset(e, 0, sizeof(*e));
	e->kind = k;
	snprintf(e->msg, sizeof(e->msg), fmt, a);
}

static const char *g_device; /* wclient_set_device; NULL: $MLXR_DEVICE or auto */

static int device_ok(const char *d)
{
	return d && (!strcmp(d, "auto") || !strcmp(d, "cpu") || !strcmp(d, "cuda"));
}

int wclient_set_device(const char *device)
{
	if (!device_ok(device))
		return -1;
	g_device = device;
	return 0;
}

static int g_fast_prefill; /* wclient_set_fast_prefill; 0: $MLXR_FAST_PREFILL or off */

void wclient_set_fast_prefill(void)
{
	g_fast_prefill = 1;
}

/* fork + exec of mlxr-worker (broker/spawn.c) with its role and flags. */
static int spawn(const char *role, int no_sandbox, pid_t *pid, int *sock, char *err, size_t errlen)
{
	const char *dev = g_device ? g_device : getenv("MLXR_DEVICE");
	if (dev && *dev && !device_ok(dev)) {
		snprintf(err, errlen, "MLXR_DEVICE=%s: expected auto, cpu or cuda", dev);
		return -1;
	}
	const char *fast = g_fast_prefill ? "1" : getenv("MLXR_FAST_PREFILL");
	if (fast && *fast && strcmp(fast, "0") && strcmp(fast, "1")) {
		snprintf(err, errlen, "MLXR_FAST_PREFILL=%s: expected 1 (fast prefill on CUDA) or 0", fast);
		return -1;
	}
	/* MLXR_WORKER_FAULT_AFTER=N (tests): the worker answers request N+1
	 * with a malformed packet, proving the broker survives it. */
	const char *fault = getenv("MLXR_WORKER_FAULT_AFTER");
	/* at most 3 + 2 (device) + 1 (fast prefill) + 1 (no sandbox) + 2 (fault)
	 * + NULL = 10; room to spare, and a new flag must keep the sum under 16 */
	char *argv[16] = { "mlxr-worker", "--role", (char *)role, NULL };
	_Static_assert(3 + 2 + 1 + 1 + 2 + 1 <= sizeof(argv) / sizeof(argv[0]), "spawn argv");
	int ac = 3;
	if (dev && *dev && strcmp(dev, "auto") && !strcmp(role, "worker")) {
		argv[ac++] = "--device";
		argv[ac++] = (char *)dev;
	}
	if (fast && !strcmp(fast, "1") && !strcmp(role, "worker"))
		argv[ac++] = "--fast-prefill";
	if (no_sandbox)
		argv[ac++] = "--no-sandbox";
	if (fault && *fault) {
		argv[ac++] = "--ipc-fault-after";
		argv[ac++] = (char *)fault;
	}
	argv[ac] = NULL;
	return spawn_child("mlxr-worker", argv, pid, sock, err, errlen);
}

/* Ends the worker (if any) and reports why in e. */
static void kill_worker(wclient *c, wc_error *e, const char *why)
{
	char how[128];
	/* A worker exiting on its own gets a moment to be reaped with its real
	 * status; then it is made sure of. */
	spawn_reap(c->pid, 100, how, sizeof(how));
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	c->pid = 0;
	if (e) {
		memset(e, 0, sizeof(*e));
		e->kind = WC_ERR_WORKER;
		snprintf(e->msg, sizeof(e->msg), "the model worker failed (%s; %s); it restarts for the next request",
			 why, how);
	}
}

/* ---- manifest ---- */

/* The JSON files are checked again in the sealed copy the worker reads,
 * except tokenizer.json: the broker never reads it, and the worker's
 * tokenizer parses it with the same strict parser (json_parse, then the
 * tokenizer's own checks) inside the sandbox, refusing it with
 * "tokenizer.json: not valid JSON (...)" before READY. Parsing it here too
 * cost 18-23 ms of the load (the largest part of privsep's load-time cost,
 * README) and ran the broker's parser on 3-10 MB of untrusted bytes for
 * nothing. The two small files are checked here because the worker
 * tolerates them being broken (no chat template, no extra eos ids), and a
 * model that ships a broken one is refused instead. Index = mf_specs
 * order; json_off/json_len are kept for all three. */
static const char *const json_names[3] = { "tokenizer.json", "tokenizer_config.json", "generation_config.json" };

static int check_sealed_json(const wclient *c, char *err, size_t errlen)
{
	const uint8_t *p;
	size_t total;
	if (ipc_memfd_map(c->manifest, SIZE_MAX, &p, &total, err, errlen))
		return -1;
	int rc = 0;
	for (int i = 1; i < 3 && !rc; i++) { /* not 0: tokenizer.json, see above */
		size_t off = c->json_off[i], len = c->json_len[i];
		if (!len || off > total || len > total - off)
			continue;
		json_doc d;
		char jerr[160];
		if (json_parse((const char *)p + off, len, &d, jerr, sizeof(jerr))) {
			snprintf(err, errlen, "%s: not valid JSON (%s)", json_names[i], jerr);
			rc = -1;
		} else {
			json_free(&d);
		}
	}
	if (total)
		munmap((void *)p, total);
	return rc;
}

/* A sealed memfd copy of a shard, validated again after sealing: its
 * tensor table must equal the one validated from the file. */
static int seal_shard(const st_set *st, int shard, int *out, char *err, size_t errlen)
{
	const st_shard *s = &st->shards[shard];
	const char *base = strrchr(s->path, '/') ? strrchr(s->path, '/') + 1 : s->path;
	int fd = ipc_memfd_sealed(base, s->map, s->size);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot make a sealed copy: %s", base, strerror(errno));
		return -1;
	}
	const uint8_t *p;
	size_t n;
	if (ipc_memfd_map(fd, SIZE_MAX, &p, &n, err, errlen)) {
		close(fd);
		return -1;
	}
	st_set chk;
	memset(&chk, 0, sizeof(chk));
	int rc = st_parse_file(&chk, 0, base, p, n, err, errlen);
	for (size_t i = 0; rc == 0 && i < chk.ntensors; i++) {
		const st_tensor *a = &chk.tensors[i], *b = st_find(st, a->name);
		if (!b || b->shard != shard || b->dtype != a->dtype || b->nbytes != a->nbytes ||
		    (size_t)(b->data - s->map) != (size_t)(a->data - p) || b->ndim != a->ndim ||
		    memcmp(b->shape, a->shape, sizeof(a->shape))) {
			snprintf(err, errlen, "%s: tensor %s changed while it was being sealed", base, a->name);
			rc = -1;
		}
	}
	chk.shards = NULL;
	st_close(&chk);
	if (n)
		munmap((void *)p, n);
	if (rc) {
		close(fd);
		return -1;
	}
	*out = fd;
	return 0;
}

/* The small files the worker needs (common/modelfiles.h: mf_specs, the
 * table mf_read uses). They are opened here and copied into
 * the manifest by the kernel (sendfile: page cache to memfd), never
 * through a buffer of the broker's: reading tokenizer.json into memory and
 * writing it into the memfd cost 4-5 ms for 3.5 MB, sendfile 1.5 ms, less
 * than the in-process path's own read. */
typedef struct {
	int fd[MF_COUNT];     /* -1: absent */
	size_t n[MF_COUNT];   /* size at open */
} small_set;

static void small_close(small_set *sm)
{
	for (int i = 0; i < MF_COUNT; i++)
		if (sm->fd[i] >= 0)
			close(sm->fd[i]);
}

static int small_open(const char *dir, small_set *sm, char *err, size_t errlen)
{
	for (int i = 0; i < MF_COUNT; i++) {
		sm->fd[i] = -1;
		sm->n[i] = 0;
	}
	for (int i = 0; i < MF_COUNT; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, mf_specs[i].name);
		/* O_NONBLOCK: a FIFO in its place does not hang the broker
		 * (it is then refused as not a regular file) */
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode))) {
			close(fd);
			fd = -1;
		}
		if (fd < 0) {
			if (!mf_specs[i].required)
				continue;
			snprintf(err, errlen, "%s: missing or unreadable", mf_specs[i].name);
			goto fail;
		}
		sm->fd[i] = fd;
		if ((uint64_t)st.st_size > mf_specs[i].cap) {
			mf_too_large(&mf_specs[i], err, errlen);
			goto fail;
		}
		sm->n[i] = (size_t)st.st_size;
	}
	return 0;
fail:
	small_close(sm);
	return -1;
}

/* Appends exactly n bytes of the file at fd to the memfd. */
static int copy_in(int out, int fd, size_t n, const char *name, char *err, size_t errlen)
{
	off_t off = 0;
	while ((size_t)off < n) {
		ssize_t k = sendfile(out, fd, &off, n - (size_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			snprintf(err, errlen, "%s: %s", name, k < 0 ? strerror(errno) : "it shrank while it was read");
			return -1;
		}
	}
	return 0;
}

static int build_manifest(wclient *c, const char *dir, wc_error *e)
{
	model m;
	small_set sm;
	char err[512];
	if (small_open(dir, &sm, err, sizeof(err))) {
		set_err(e, WC_ERR_MODEL, "%s", err);
		return -1;
	}
	if (model_load(&m, dir, err, sizeof(err))) {
		small_close(&sm);
		set_err(e, WC_ERR_MODEL, "%s", err);
		return -1;
	}
	/* Refuse what cannot fit before a worker loads anything (the sandboxed
	 * worker cannot read /proc/meminfo). The worker uses the same context. */
	int ctx = c->o.ctx > 0 ? c->o.ctx : 4096;
	if (ctx > m.cfg.max_pos)
		ctx = m.cfg.max_pos;
	const char *dev = g_device ? g_device : getenv("MLXR_DEVICE");
	int rc = -1;
	if (model_check_memory(&m.cfg, m.weight_bytes, ctx, 256, dev && !strcmp(dev, "cuda"), err, sizeof(err))) {
		set_err(e, WC_ERR_MODEL, "%s", err);
		goto out;
	}
	/* The manifest: the packed configuration and tensor table, then each
	 * small file as (present flag, u32 length, bytes). */
	ipc_blob b;
	ipc_blob_init(&b, "mlxr-manifest");
	ipc_blob_u32(&b, MANIFEST_MAGIC);
	model_config_pack(&m.cfg, &b);
	st_table_pack(&m.st, &b);
	c->manifest = b.bad ? -1 : ipc_memfd_new("mlxr-manifest");
	int wr = c->manifest < 0 || ipc_write_all(c->manifest, b.buf, b.len);
	size_t at = b.len;
	ipc_blob_free(&b);
	for (int i = 0; !wr && i < MF_COUNT; i++) {
		uint8_t hdr[8];
		ipc_wr w;
		ipc_wr_init(&w, hdr, sizeof(hdr));
		ipc_put_u32(&w, sm.fd[i] >= 0);
		ipc_put_u32(&w, (uint32_t)sm.n[i]); /* 0 when absent; n <= MF_TOKENIZER_MAX */
		wr = ipc_write_all(c->manifest, hdr, w.len);
		at += w.len;
		if (i < 3) {
			c->json_off[i] = at;
			c->json_len[i] = sm.n[i];
		}
		if (!wr && sm.fd[i] >= 0 && copy_in(c->manifest, sm.fd[i], sm.n[i], mf_specs[i].name, err, sizeof(err))) {
			set_err(e, WC_ERR_MODEL, "%s", err);
			goto out;
		}
		at += sm.n[i];
	}
	if (wr || ipc_memfd_seal(c->manifest)) {
		set_err(e, WC_ERR_MODEL, "cannot seal the model manifest: %s", strerror(errno));
		goto out;
	}
	c->nshards = m.st.nshards;
	c->shards = malloc(sizeof(int) * (size_t)c->nshards);
	if (!c->shards) {
		set_err(e, WC_ERR_MODEL, "%s", "out of memory");
		goto out;
	}
	for (int i = 0; i < c->nshards; i++)
		c->shards[i] = -1;
	for (int i = 0; i < c->nshards; i++) {
		if (c->o.sealed) {
			if (seal_shard(&m.st, i, &c->shards[i], err, sizeof(err))) {
				set_err(e, WC_ERR_MODEL, "%s", err);
				goto out;
			}
		} else if ((c->shards[i] = fcntl(m.st.shards[i].fd, F_DUPFD_CLOEXEC, 0)) < 0) {
			set_err(e, WC_ERR_MODEL, "dup: %s", strerror(errno));
			goto out;
		}
	}
	rc = 0;
out:
	model_free(&m); /* the broker keeps descriptors, never the mapped weights */
	small_close(&sm);
	return rc;
}

/* ---- transactions ---- */

typedef struct {
	wc_event_fn fn;   /* IPC_EVENT handler (generation) */
	void *arg;
	uint8_t *bulk;    /* IPC_DATA accumulated */
	size_t nbulk, capbulk;
	uint8_t done[IPC_MAX_PAYLOAD]; /* IPC_DONE payload */
	size_t ndone;
	int cancel_sent;
} reply;

static int start_worker(wclient *c, wc_error *e);

/* Sends one request and reads until DONE or ERROR. */
static int transact(wclient *c, uint32_t type, const void *payload, size_t len, const int *fds, int nfds, reply *rp,
		    wc_error *e)
{
	char err[256];
	if (!c->pid && start_worker(c, e))
		return -1;
	uint64_t id = ++c->next_id;
	if (ipc_send(c->sock, type, id, payload, len, fds, nfds)) {
		kill_worker(c, e, "it stopped reading requests");
		return -1;
	}
	for (;;) {
		ipc_msg *m = &c->msg;
		int r = ipc_recv(c->sock, m, err, sizeof(err));
		if (r) {
			kill_worker(c, e, r == 1 ? "it closed its socket" : err);
			return -1;
		}
		if (m->nfds) { /* the worker never sends descriptors */
			ipc_close_fds(m);
			kill_worker(c, e, "it sent file descriptors");
			return -1;
		}
		if (m->id != id) {
			kill_worker(c, e, "it answered another request");
			return -1;
		}
		if (m->type == IPC_EVENT && rp->fn) {
			wc_event ev;
			if (wc_event_unpack(m->payload, m->len, &ev)) {
				kill_worker(c, e, "it sent a malformed event");
				return -1;
			}
			if (rp->fn(rp->arg, &ev) && !rp->cancel_sent) {
				rp->cancel_sent = 1;
				if (ipc_send(c->sock, IPC_CANCEL, id, NULL, 0, NULL, 0)) {
					kill_worker(c, e, "it stopped reading requests");
					return -1;
				}
			}
		} else if (m->type == IPC_DATA) {
			if (m->len > BULK_MAX - rp->nbulk) {
				kill_worker(c, e, "its answer exceeded the size limit");
				return -1;
			}
			if (rp->nbulk + m->len > rp->capbulk) {
				size_t nc = rp->capbulk ? rp->capbulk : 65536;
				while (nc < rp->nbulk + m->len)
					nc *= 2;
				uint8_t *nb = realloc(rp->bulk, nc);
				if (!nb) {
					kill_worker(c, e, "the broker ran out of memory");
					return -1;
				}
				rp->bulk = nb;
				rp->capbulk = nc;
			}
			memcpy(rp->bulk + rp->nbulk, m->payload, m->len);
			rp->nbulk += m->len;
		} else if (m->type == IPC_DONE) {
			memcpy(rp->done, m->payload, m->len);
			rp->ndone = m->len;
			return 0;
		} else if (m->type == IPC_ERROR) {
			if (wc_error_unpack(m->payload, m->len, e)) {
				kill_worker(c, e, "it sent a malformed error");
				return -1;
			}
			return -1;
		} else {
			kill_worker(c, e, "it sent an unexpected message");
			return -1;
		}
	}
}

/* Sends LOAD (the manifest and the shard descriptors). */
static int send_load(wclient *c, uint64_t *id, wc_error *e)
{
	int *fds = malloc(sizeof(int) * (size_t)(c->nshards + 1));
	if (!fds) {
		kill_worker(c, NULL, "");
		set_err(e, WC_ERR_WORKER, "%s", "out of memory");
		return -1;
	}
	fds[0] = c->manifest;
	memcpy(fds + 1, c->shards, sizeof(int) * (size_t)c->nshards);
	uint8_t buf[64];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	ipc_put_u32(&w, IPC_VERSION);
	ipc_put_u32(&w, (uint32_t)(c->o.ctx > 0 ? c->o.ctx : 4096));
	ipc_put_u32(&w, (uint32_t)c->nshards);
	*id = ++c->next_id;
	int r = ipc_send(c->sock, IPC_LOAD, *id, buf, w.len, fds, c->nshards + 1);
	free(fds);
	if (r) {
		kill_worker(c, e, "it did not accept the model");
		return -1;
	}
	return 0;
}

/* Reads the worker's answer to LOAD: READY with the model's info. */
static int recv_ready(wclient *c, uint64_t id, wc_error *e)
{
	char err[256];
	ipc_msg *m = &c->msg;
	int r = ipc_recv(c->sock, m, err, sizeof(err));
	if (r) {
		kill_worker(c, e, r == 1 ? "it exited while loading the model" : err);
		return -1;
	}
	if (m->nfds || m->id != id) {
		ipc_close_fds(m);
		kill_worker(c, e, "it broke the protocol while loading");
		return -1;
	}
	if (m->type == IPC_ERROR) {
		if (wc_error_unpack(m->payload, m->len, e))
			kill_worker(c, e, "it sent a malformed error");
		else
			kill_worker(c, NULL, "");
		return -1;
	}
	if (m->type != IPC_READY || wc_info_unpack(m->payload, m->len, &c->info)) {
		kill_worker(c, e, "it sent a malformed READY");
		return -1;
	}
	return 0;
}

/* A fresh worker for a validated manifest (after a failure). */
static int start_worker(wclient *c, wc_error *e)
{
	char err[256];
	uint64_t id;
	if (spawn("worker", c->o.no_sandbox, &c->pid, &c->sock, err, sizeof(err))) {
		set_err(e, WC_ERR_WORKER, "%s", err);
		return -1;
	}
	return send_load(c, &id, e) || recv_ready(c, id, e) ? -1 : 0;
}

/* The first start, arranged so that the steps run side by side where they
 * can (load time through the worker was 57% above the in-process load;
 * README, "Processes and sandbox"):
 *   1. the worker starts first: exec, dynamic loading and its sandbox
 *      (namespaces, the empty root, Landlock, seccomp; ~10 ms measured)
 *      need nothing of the model, and overlap the broker's validation;
 *   2. the broker validates the model and seals the manifest;
 *   3. LOAD goes out, and the broker checks the small JSON files of the
 *      sealed manifest (not tokenizer.json: check_sealed_json) while the
 *      worker parses them in its sandbox (the worker's
 *      parsers take hostile input by design; its READY is not accepted,
 *      and no request is sent, before the check passed).
 * A model error is reported before a failure to start the worker, as when
 * the worker started last. */
static int first_start(wclient *c, const char *dir, wc_error *e)
{
	char err[512];
	wc_error se;
	memset(&se, 0, sizeof(se));
	trace_mark("broker: load starts");
	if (spawn("worker", c->o.no_sandbox, &c->pid, &c->sock, err, sizeof(err)))
		set_err(&se, WC_ERR_WORKER, "%s", err);
	trace_mark("broker: worker forked");
	if (build_manifest(c, dir, e))
		return -1;
	trace_mark("broker: model validated, manifest sealed");
	if (se.kind) {
		*e = se;
		return -1;
	}
	uint64_t id;
	if (send_load(c, &id, e))
		return -1;
	if (check_sealed_json(c, err, sizeof(err))) {
		set_err(e, WC_ERR_MODEL, "%s", err);
		return -1;
	}
	int r = recv_ready(c, id, e);
	trace_mark("broker: READY received");
	return r;
}

int wclient_start(wclient **out, const char *dir, const wclient_opts *o, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	signal(SIGPIPE, SIG_IGN);
	wclient *c = calloc(1, sizeof(*c));
	if (!c) {
		set_err(e, WC_ERR_MODEL, "%s", "out of memory");
		return -1;
	}
	c->manifest = -1;
	c->sock = -1;
	if (o)
		c->o = *o;
	double t0 = now_s();
	if (first_start(c, dir, e)) {
		if (c->pid) /* a worker still starting or loading: no grace needed */
			kill(c->pid, SIGKILL);
		wclient_stop(c);
		return -1;
	}
	c->info.load_s = now_s() - t0;
	*out = c;
	return 0;
}

const wclient_info *wclient_info_get(const wclient *c)
{
	return &c->info;
}

/* A request in a sealed memfd (conversations can be large). */
static int request_fd(const wc_request *r, wc_error *e)
{
	ipc_blob b;
	ipc_blob_init(&b, "mlxr-request");
	int fd = wc_request_pack(r, &b) ? -1 : ipc_blob_seal(&b);
	ipc_blob_free(&b);
	if (fd < 0)
		set_err(e, WC_ERR_INVALID, "%s", "cannot pack the request");
	return fd;
}

int wclient_generate(wclient *c, const wc_request *r, wc_event_fn fn, void *arg, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	int fd = request_fd(r, e);
	if (fd < 0)
		return -1;
	reply rp;
	memset(&rp, 0, sizeof(rp));
	rp.fn = fn;
	rp.arg = arg;
	int rc = transact(c, IPC_GENERATE, NULL, 0, &fd, 1, &rp, e);
	close(fd);
	free(rp.bulk);
	return rc;
}

/* Ids from an IPC_DATA run of little-endian u32. */
static int bulk_ids(reply *rp, int **ids, size_t *n, int limit, wc_error *e)
{
	if (rp->nbulk % 4) {
		set_err(e, WC_ERR_WORKER, "%s", "malformed id list from the worker");
		return -1;
	}
	*n = rp->nbulk / 4;
	*ids = malloc(sizeof(int) * (*n ? *n : 1));
	if (!*ids) {
		set_err(e, WC_ERR_INVALID, "%s", "out of memory");
		return -1;
	}
	for (size_t i = 0; i < *n; i++) {
		const uint8_t *b = rp->bulk + 4 * i;
		uint32_t v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
		if (v >= (uint32_t)limit) {
			free(*ids);
			set_err(e, WC_ERR_WORKER, "%s", "the worker sent a token id outside the vocabulary");
			return -1;
		}
		(*ids)[i] = (int)v;
	}
	return 0;
}

/* "u32 arg, u32 n, n x u32 ids" in one packet. */
static int ids_payload(uint32_t arg, const int *ids, size_t n, uint8_t *buf, size_t cap, size_t *len, wc_error *e)
{
	ipc_wr w;
	ipc_wr_init(&w, buf, cap);
	ipc_put_u32(&w, arg);
	ipc_put_u32(&w, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		ipc_put_u32(&w, (uint32_t)ids[i]);
	if (w.bad || n == 0) {
		set_err(e, WC_ERR_INVALID, "%s", n ? "too many ids for one request" : "no ids");
		return -1;
	}
	*len = w.len;
	return 0;
}

int wclient_tokenize(wclient *c, const char *text, size_t len, int special, int **ids, size_t *n, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	int fd = ipc_memfd_sealed("mlxr-text", text, len);
	if (fd < 0) {
		set_err(e, WC_ERR_INVALID, "%s", "cannot pass the text");
		return -1;
	}
	uint8_t buf[8];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	ipc_put_u32(&w, special ? 1 : 0);
	reply rp;
	memset(&rp, 0, sizeof(rp));
	int rc = transact(c, IPC_TOKENIZE, buf, w.len, &fd, 1, &rp, e);
	close(fd);
	if (rc == 0)
		rc = bulk_ids(&rp, ids, n, c->info.vocab, e);
	free(rp.bulk);
	return rc;
}

int wclient_detokenize(wclient *c, const int *ids, size_t n, char **out, size_t *len, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	uint8_t *buf = malloc(IPC_MAX_PAYLOAD);
	size_t pl;
	if (!buf || ids_payload(0, ids, n, buf, IPC_MAX_PAYLOAD, &pl, e)) {
		free(buf);
		if (!e->kind)
			set_err(e, WC_ERR_INVALID, "%s", "out of memory");
		return -1;
	}
	/* The payload starts with the unused arg word; the worker reads
	 * "n, ids": skip it. */
	reply rp;
	memset(&rp, 0, sizeof(rp));
	int rc = transact(c, IPC_DETOKENIZE, buf + 4, pl - 4, NULL, 0, &rp, e);
	free(buf);
	if (rc == 0) {
		*out = malloc(rp.nbulk + 1);
		if (!*out) {
			set_err(e, WC_ERR_INVALID, "%s", "out of memory");
			rc = -1;
		} else {
			memcpy(*out, rp.bulk, rp.nbulk);
			(*out)[rp.nbulk] = 0;
			*len = rp.nbulk;
		}
	}
	free(rp.bulk);
	return rc;
}

int wclient_bench(wclient *c, const wc_bench_req *r, wc_bench_res *out, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	uint8_t buf[16];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	ipc_put_u32(&w, (uint32_t)r->prefill);
	ipc_put_u32(&w, (uint32_t)r->decode);
	ipc_put_u32(&w, (uint32_t)r->long_ctx);
	reply rp;
	memset(&rp, 0, sizeof(rp));
	int rc = transact(c, IPC_BENCH, buf, w.len, NULL, 0, &rp, e);
	if (rc == 0 && wc_bench_res_unpack(rp.done, rp.ndone, out)) {
		kill_worker(c, e, "it sent a malformed benchmark result");
		rc = -1;
	}
	if (rc == 0) { /* the worker's peak resident memory, from outside it */
		char path[64], line[128];
		snprintf(path, sizeof(path), "/proc/%d/status", (int)c->pid);
		FILE *f = fopen(path, "r");
		unsigned long kb;
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "VmHWM: %lu kB", &kb) == 1)
				out->peak_rss_mb = kb / 1024.0;
		if (f)
			fclose(f);
	}
	free(rp.bulk);
	return rc;
}

int wclient_logits(wclient *c, const int *ids, size_t n, int decode, float **logits, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	uint8_t *buf = malloc(IPC_MAX_PAYLOAD);
	size_t pl;
	reply rp;
	memset(&rp, 0, sizeof(rp));
	int rc = -1;
	if (!buf) {
		set_err(e, WC_ERR_INVALID, "%s", "out of memory");
		return -1;
	}
	if (ids_payload(decode ? 1 : 0, ids, n, buf, IPC_MAX_PAYLOAD, &pl, e) == 0 &&
	    transact(c, IPC_LOGITS, buf, pl, NULL, 0, &rp, e) == 0) {
		if (rp.nbulk != n * (size_t)c->info.vocab * sizeof(float)) {
			kill_worker(c, e, "it sent logits of the wrong size");
		} else {
			*logits = (float *)rp.bulk; /* little-endian float32, as the host */
			rp.bulk = NULL;
			rc = 0;
		}
	}
	free(rp.bulk);
	free(buf);
	return rc;
}

int wclient_greedy(wclient *c, const int *ids, size_t n, int gen, int **out, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	uint8_t *buf = malloc(IPC_MAX_PAYLOAD);
	size_t pl, got;
	reply rp;
	memset(&rp, 0, sizeof(rp));
	int rc = -1;
	if (!buf) {
		set_err(e, WC_ERR_INVALID, "%s", "out of memory");
		return -1;
	}
	if (gen > 0 && ids_payload((uint32_t)gen, ids, n, buf, IPC_MAX_PAYLOAD, &pl, e) == 0 &&
	    transact(c, IPC_GREEDY, buf, pl, NULL, 0, &rp, e) == 0 && bulk_ids(&rp, out, &got, c->info.vocab, e) == 0) {
		if (got != (size_t)gen) {
			free(*out);
			kill_worker(c, e, "it sent the wrong number of ids");
		} else {
			rc = 0;
		}
	}
	free(rp.bulk);
	free(buf);
	return rc;
}

int wclient_chat_ids(wclient *c, const wc_request *r, int **ids, size_t *n, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	int fd = request_fd(r, e);
	if (fd < 0)
		return -1;
	reply rp;
	memset(&rp, 0, sizeof(rp));
	int rc = transact(c, IPC_CHAT_IDS, NULL, 0, &fd, 1, &rp, e);
	close(fd);
	if (rc == 0)
		rc = bulk_ids(&rp, ids, n, c->info.vocab, e);
	free(rp.bulk);
	return rc;
}

int wclient_import(int gguf_fd, const int outs[4], int bits, int group_size, int no_sandbox, char *summary,
		   size_t slen, wc_error *e)
{
	wclient c;
	memset(&c, 0, sizeof(c));
	c.sock = -1;
	memset(e, 0, sizeof(*e));
	signal(SIGPIPE, SIG_IGN);
	char err[256];
	if (spawn("importer", no_sandbox, &c.pid, &c.sock, err, sizeof(err))) {
		set_err(e, WC_ERR_WORKER, "%s", err);
		return -1;
	}
	int fds[5] = { gguf_fd, outs[0], outs[1], outs[2], outs[3] };
	uint8_t buf[16];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	ipc_put_u32(&w, (uint32_t)bits);
	ipc_put_u32(&w, (uint32_t)group_size);
	reply rp;
	memset(&rp, 0, sizeof(rp));
	int rc = transact(&c, IPC_IMPORT, buf, w.len, fds, 5, &rp, e);
	if (rc == 0) {
		size_t k = rp.nbulk < slen - 1 ? rp.nbulk : slen - 1;
		for (size_t i = 0; i < k; i++)
			summary[i] = rp.bulk[i] < 0x20 && rp.bulk[i] != '\t' ? '?' : (char)rp.bulk[i];
		summary[k] = 0;
	}
	free(rp.bulk);
	kill_worker(&c, NULL, "");
	return rc;
}

void wclient_stop(wclient *c)
{
	if (!c)
		return;
	if (c->pid) {
		/* Closing the socket ends the worker's loop; reap it. */
		char how[128];
		close(c->sock);
		c->sock = -1;
		spawn_reap(c->pid, 200, how, sizeof(how));
	}
	if (c->manifest >= 0)
		close(c->manifest);
	for (int i = 0; i < c->nshards; i++)
		if (c->shards && c->shards[i] >= 0)
			close(c->shards[i]);
	free(c->shards);
	free(c);
}
