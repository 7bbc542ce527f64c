/* broker/fclient.c — the broker's handle on mlxr-fetcher (see fclient.h).
 *
 * One fetcher per process, started on first use the same way wclient.c
 * starts a worker (fork + exec of the sibling binary, socketpair on fd 3),
 * with the FETCHER policy's options on its command line: the CA bundle it
 * may read and the one extra TCP port HF_ENDPOINT needs. Everything it sends
 * is decoded strictly (common/ipc.c, fetcher/fproto.c): a malformed or
 * unexpected message, a descriptor, a wrong request id or an EOF ends it
 * (SIGKILL, reaped) and fails the request; the next request starts a new
 * one. Its output is untrusted until fclient_verify has checked size and
 * SHA-256 of the file itself.
 */
#include "broker/fclient.h"
#include "broker/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/ipc.h"
#include "fetcher/fetch.h"

static pid_t g_pid;
static int g_sock = -1;
static uint64_t g_id;
static ipc_msg g_msg;

const char *fclient_endpoint(void)
{
	static char ep[FETCH_URL_MAX];
	const char *e = getenv("HF_ENDPOINT");
	snprintf(ep, sizeof(ep), "%s", e && *e ? e : "https://huggingface.co");
	size_t n = strlen(ep);
	while (n > 8 && ep[n - 1] == '/')
		ep[--n] = 0;
	return ep;
}

/* $HF_TOKEN, else $HF_TOKEN_PATH, else $HF_HOME/token, else
 * ~/.cache/huggingface/token (huggingface_hub's order). */
const char *fclient_token(void)
{
	static char tok[512];
	const char *e = getenv("HF_TOKEN");
	if (e && *e) {
		snprintf(tok, sizeof(tok), "%s", e);
		return tok;
	}
	char path[PATH_MAX];
	const char *tp = getenv("HF_TOKEN_PATH"), *hh = getenv("HF_HOME"), *home = getenv("HOME");
	if (tp && *tp)
		snprintf(path, sizeof(path), "%s", tp);
	else if (hh && *hh)
		snprintf(path, sizeof(path), "%s/token", hh);
	else
		snprintf(path, sizeof(path), "%s/.cache/huggingface/token", home && *home ? home : "/");
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	size_t n = fread(tok, 1, sizeof(tok) - 1, f);
	fclose(f);
	tok[n] = 0;
	while (n && (tok[n - 1] == '\n' || tok[n - 1] == '\r' || tok[n - 1] == ' '))
		tok[--n] = 0;
	return n ? tok : NULL;
}


static void reap(char *how, size_t len)
{
	spawn_reap(g_pid, 100, how, len);
	if (g_sock >= 0)
		close(g_sock);
	g_sock = -1;
	g_pid = 0;
}

void fclient_stop(void)
{
	char how[64];
	if (g_sock >= 0) {
		shutdown(g_sock, SHUT_RDWR);
		reap(how, sizeof(how));
	}
}

static void kill_fetcher(const char *why, char *err, size_t errlen)
{
	char how[128];
	reap(how, sizeof(how));
	snprintf(err, errlen, "the fetcher failed (%s; %s)", why, how);
}

static int start(char *err, size_t errlen)
{
	if (g_sock >= 0)
		return 0;
	fetch_url ep;
	char uerr[256];
	if (fetch_url_parse(fclient_endpoint(), &ep, uerr, sizeof(uerr))) {
		snprintf(err, errlen, "HF_ENDPOINT: %s", uerr);
		return -1;
	}
	const char *ca = getenv("SSL_CERT_FILE");
	if (!ca || !*ca)
		ca = "/etc/ssl/certs/ca-certificates.crt";
	char port[8];
	snprintf(port, sizeof(port), "%u", (unsigned)ep.port);
	char *argv[8] = { "mlxr-fetcher", "--serve", "--ca-bundle", (char *)ca, NULL, NULL, NULL, NULL };
	int ac = 4;
	if (ep.port != 443 && ep.port != 80) {
		argv[ac++] = "--allow-port";
		argv[ac++] = port;
	}
	const char *ns = getenv("MLXR_FETCHER_NO_SANDBOX"); /* debugging only; the fetcher warns */
	if (ns && !strcmp(ns, "1"))
		argv[ac++] = "--no-sandbox";
	pid_t p;
	int sock;
	if (spawn_child("mlxr-fetcher", argv, &p, &sock, err, errlen))
		return -1;
	g_pid = p;
	g_sock = sock;
	return 0;
}

int fclient_verify(int fd, uint64_t expected_size, const uint8_t sha256[32], char *err, size_t errlen)
{
	struct stat sb;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "not a regular file");
		return -1;
	}
	if (expected_size != FCLIENT_SIZE_ANY && (uint64_t)sb.st_size != expected_size) {
		snprintf(err, errlen, "size is %llu bytes, expected %llu", (unsigned long long)sb.st_size,
			 (unsigned long long)expected_size);
		return -1;
	}
	if (!sha256)
		return 0;
	if (sodium_init() < 0) {
		snprintf(err, errlen, "libsodium failed to initialise");
		return -1;
	}
	crypto_hash_sha256_state st;
	crypto_hash_sha256_init(&st);
	static uint8_t buf[1 << 20];
	uint64_t off = 0;
	for (;;) {
		ssize_t r = pread(fd, buf, sizeof(buf), (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "reading: %s", strerror(errno));
			return -1;
		}
		if (r == 0)
			break;
		crypto_hash_sha256_update(&st, buf, (unsigned long long)r);
		off += (uint64_t)r;
	}
	uint8_t got[32];
	crypto_hash_sha256_final(&st, got);
	if (sodium_memcmp(got, sha256, 32)) {
		char hg[65], he[65];
		sodium_bin2hex(hg, sizeof(hg), got, 32);
		sodium_bin2hex(he, sizeof(he), sha256, 32);
		snprintf(err, errlen, "SHA-256 mismatch: got %s, expected %s", hg, he);
		return -1;
	}
	return 0;
}

static const char *kind_word(uint32_t k)
{
	switch (k) {
	case FETCH_ERR_URL: return "refused URL";
	case FETCH_ERR_NET: return "network error";
	case FETCH_ERR_TLS: return "TLS error";
	case FETCH_ERR_HTTP: return "malformed response";
	case FETCH_ERR_STATUS: return "HTTP error";
	case FETCH_ERR_REDIRECT: return "redirect refused";
	case FETCH_ERR_RANGE: return "resume refused";
	case FETCH_ERR_IO: return "write error";
	case FETCH_ERR_LIMIT: return "too large";
	default: return "error";
	}
}

int fclient_download_ex(const char *url, int out_fd, const fclient_opts *o, char *err, size_t errlen)
{
	static const fclient_opts none;
	if (!o)
		o = &none;
	if (o->http_status)
		*o->http_status = 0;
	fetch_req rq;
	memset(&rq, 0, sizeof(rq));
	if (strlen(url) >= sizeof(rq.url)) {
		snprintf(err, errlen, "URL too long");
		return -1;
	}
	snprintf(rq.url, sizeof(rq.url), "%s", url);
	struct stat sb;
	if (fstat(out_fd, &sb) || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "output is not a regular file");
		return -1;
	}
	if (o->resume && sb.st_size > 0) {
		rq.flags |= FETCH_F_RESUME;
		rq.offset = (uint64_t)sb.st_size;
		if (o->if_range)
			snprintf(rq.if_range, sizeof(rq.if_range), "%s", o->if_range);
	} else if (ftruncate(out_fd, 0)) {
		snprintf(err, errlen, "truncating the output file: %s", strerror(errno));
		return -1;
	}
	rq.max_bytes = o->max_bytes;
	/* The token travels with the Hub's host and port; the fetcher sends it
	 * to that host only, never to a host a redirect leads to. */
	const char *tok = fclient_token();
	fetch_url ep;
	char uerr[256];
	if (tok && strlen(tok) < sizeof(rq.token) && !fetch_url_parse(fclient_endpoint(), &ep, uerr, sizeof(uerr))) {
		rq.flags |= FETCH_F_TOKEN;
		snprintf(rq.token, sizeof(rq.token), "%s", tok);
		snprintf(rq.token_host, sizeof(rq.token_host), "%s", ep.host);
		rq.token_port = ep.port;
	}
	uint8_t buf[FETCH_URL_MAX + 2048];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	if (fetch_req_encode(&rq, &w)) {
		sodium_memzero(&rq, sizeof(rq));
		snprintf(err, errlen, "request too large");
		return -1;
	}
	sodium_memzero(&rq, sizeof(rq));
	if (start(err, errlen))
		return -1;
	uint64_t id = ++g_id;
	if (ipc_send(g_sock, IPC_FETCH, id, buf, w.len, &out_fd, 1)) {
		sodium_memzero(buf, sizeof(buf));
		kill_fetcher("send failed", err, errlen);
		return -1;
	}
	sodium_memzero(buf, sizeof(buf));
	uint64_t total = 0;
	for (;;) {
		char ierr[256];
		int r = ipc_recv(g_sock, &g_msg, ierr, sizeof(ierr));
		if (r != 0) {
			kill_fetcher(r > 0 ? "it closed its socket" : ierr, err, errlen);
			return -1;
		}
		if (g_msg.nfds) {
			ipc_close_fds(&g_msg);
			kill_fetcher("it sent a descriptor", err, errlen);
			return -1;
		}
		if (g_msg.id != id) {
			kill_fetcher("reply to another request", err, errlen);
			return -1;
		}
		if (g_msg.type == IPC_EVENT) {
			fetch_event ev;
			if (fetch_event_decode(&ev, g_msg.payload, g_msg.len)) {
				kill_fetcher("malformed event", err, errlen);
				return -1;
			}
			if (ev.kind == FETCH_EV_HEAD) {
				total = ev.total;
				if (o->head)
					o->head(o->arg, ev.etag, ev.start, ev.total);
			} else if (o->progress) {
				o->progress(o->arg, ev.done, total);
			}
		} else if (g_msg.type == IPC_DONE) {
			fetch_done d;
			if (fetch_done_decode(&d, g_msg.payload, g_msg.len)) {
				kill_fetcher("malformed reply", err, errlen);
				return -1;
			}
			if (o->progress)
				o->progress(o->arg, d.size, total ? total : d.size);
			/* The fetcher's account is not trusted: check the file. It
			 * must hold what the fetcher says it wrote and, where the
			 * server announced a length (total > 0), that many bytes. */
			struct stat fs;
			if (fstat(out_fd, &fs)) {
				snprintf(err, errlen, "the downloaded file: %s", strerror(errno));
				return -1;
			}
			if ((uint64_t)fs.st_size != d.size || (total && d.size != total)) {
				snprintf(err, errlen,
					 "the downloaded file has %llu bytes; the fetcher reported %llu and the server "
					 "announced %llu",
					 (unsigned long long)fs.st_size, (unsigned long long)d.size,
					 (unsigned long long)total);
				return -1;
			}
			if (fclient_verify(out_fd, o->expected_size, o->sha256, err, errlen))
				return -1;
			return 0;
		} else if (g_msg.type == IPC_ERROR) {
			uint32_t kind, status;
			char msg[1100];
			if (fetch_error_decode(&kind, &status, msg, sizeof(msg), g_msg.payload, g_msg.len)) {
				kill_fetcher("malformed error", err, errlen);
				return -1;
			}
			if (o->http_status && kind == FETCH_ERR_STATUS)
				*o->http_status = (int)status;
			snprintf(err, errlen, "%s: %s", kind_word(kind), msg);
			return -1;
		} else {
			kill_fetcher("unexpected message type", err, errlen);
			return -1;
		}
	}
}

int fclient_download(const char *url, int out_fd, int resume, uint64_t expected_size, const uint8_t sha256[32],
		     fclient_progress_fn progress, void *arg, char *err, size_t errlen)
{
	fclient_opts o;
	memset(&o, 0, sizeof(o));
	o.resume = resume;
	o.expected_size = expected_size;
	o.sha256 = sha256;
	o.progress = progress;
	o.arg = arg;
	return fclient_download_ex(url, out_fd, &o, err, errlen);
}

int fclient_get(const char *url, size_t max, char **body, size_t *len, char *err, size_t errlen)
{
	*body = NULL;
	*len = 0;
	int fd = memfd_create("mlxr-fetch", MFD_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		return -1;
	}
	int status = 0;
	fclient_opts o;
	memset(&o, 0, sizeof(o));
	o.expected_size = FCLIENT_SIZE_ANY;
	o.max_bytes = max;
	o.http_status = &status;
	int rc = fclient_download_ex(url, fd, &o, err, errlen);
	if (rc && !status) {
		close(fd);
		return -1;
	}
	if (rc) {
		close(fd);
		*body = calloc(1, 1);
		return *body ? status : -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) || (size_t)sb.st_size > max) {
		close(fd);
		snprintf(err, errlen, "response larger than %zu bytes", max);
		return -1;
	}
	char *b = malloc((size_t)sb.st_size + 1);
	size_t got = 0;
	while (b && got < (size_t)sb.st_size) {
		ssize_t r = pread(fd, b + got, (size_t)sb.st_size - got, (off_t)got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (!b || got != (size_t)sb.st_size) {
		free(b);
		snprintf(err, errlen, "reading the response failed");
		return -1;
	}
	b[got] = 0;
	*body = b;
	*len = got;
	return 200;
}
