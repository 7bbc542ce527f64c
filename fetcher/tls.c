/* fetcher/tls.c — TCP + TLS client on BearSSL (see fint.h).
 *
 * Trust: the anchors come only from the CA bundle ($SSL_CERT_FILE or the
 * Debian bundle, passed by the broker and readable under Landlock); the
 * server's chain is checked by br_x509_minimal, including the host name
 * (SNI and certificate name are the URL's host). Full client profile
 * (br_ssl_client_init_full): TLS 1.0-1.2 with BearSSL's default suites —
 * BearSSL 0.6 has no TLS 1.3.
 *
 * Name resolution: MLXR_RESOLVE="host:ip[,host:ip...]" (tests: names that
 * map to 127.0.0.1 without touching /etc/hosts) is consulted first, then
 * getaddrinfo (reads /etc/hosts, resolv.conf, nsswitch.conf; UDP 53).
 */
#include "fetcher/fint.h"

#include <arpa/inet.h>
#include <bearssl.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- trust anchors ---- */

static br_x509_trust_anchor *g_ta;
static size_t g_nta;

typedef struct {
	uint8_t *p;
	size_t n, cap;
	int oom;
} vbuf;

static void vbuf_append(void *ctx, const void *p, size_t n)
{
	vbuf *v = ctx;
	if (v->oom)
		return;
	if (v->n + n > v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 1024;
		while (cap < v->n + n)
			cap *= 2;
		uint8_t *q = realloc(v->p, cap);
		if (!q) {
			v->oom = 1;
			return;
		}
		v->p = q;
		v->cap = cap;
	}
	memcpy(v->p + v->n, p, n);
	v->n += n;
}

static void *dup_mem(const void *p, size_t n)
{
	void *q = malloc(n ? n : 1);
	if (q)
		memcpy(q, p, n);
	return q;
}

/* One DER certificate → one trust anchor (name + public key). */
static int add_anchor(const uint8_t *der, size_t len)
{
	br_x509_decoder_context dc;
	vbuf dn = { 0 };
	br_x509_decoder_init(&dc, vbuf_append, &dn);
	br_x509_decoder_push(&dc, der, len);
	br_x509_pkey *pk = br_x509_decoder_get_pkey(&dc);
	if (!pk || dn.oom) {
		free(dn.p);
		return -1; /* skipped, not fatal: bundles carry odd certificates */
	}
	br_x509_trust_anchor *t = realloc(g_ta, (g_nta + 1) * sizeof(*t));
	if (!t) {
		free(dn.p);
		return -1;
	}
	g_ta = t;
	br_x509_trust_anchor *a = &g_ta[g_nta];
	memset(a, 0, sizeof(*a));
	a->dn.data = dn.p;
	a->dn.len = dn.n;
	a->flags = br_x509_decoder_isCA(&dc) ? BR_X509_TA_CA : 0;
	a->pkey.key_type = pk->key_type;
	if (pk->key_type == BR_KEYTYPE_RSA) {
		a->pkey.key.rsa.n = dup_mem(pk->key.rsa.n, pk->key.rsa.nlen);
		a->pkey.key.rsa.nlen = pk->key.rsa.nlen;
		a->pkey.key.rsa.e = dup_mem(pk->key.rsa.e, pk->key.rsa.elen);
		a->pkey.key.rsa.elen = pk->key.rsa.elen;
	} else if (pk->key_type == BR_KEYTYPE_EC) {
		a->pkey.key.ec.curve = pk->key.ec.curve;
		a->pkey.key.ec.q = dup_mem(pk->key.ec.q, pk->key.ec.qlen);
		a->pkey.key.ec.qlen = pk->key.ec.qlen;
	} else {
		free(dn.p);
		return -1;
	}
	g_nta++;
	return 0;
}

int tls_ca_load(int fd, const char *path, char *err, size_t errlen)
{
	/* A system bundle is ~220 KB; 16 MB is far beyond any real one. */
	if (fd < 0) {
		snprintf(err, errlen, "cannot read the CA bundle %s", path);
		return -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) || sb.st_size <= 0 || sb.st_size > (16 << 20)) {
		close(fd);
		snprintf(err, errlen, "CA bundle %s: empty, unreadable or larger than 16 MB", path);
		return -1;
	}
	size_t n = (size_t)sb.st_size;
	uint8_t *buf = malloc(n + 1);
	size_t got = 0;
	while (buf && got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (!buf || got != n) {
		free(buf);
		snprintf(err, errlen, "CA bundle %s: short read", path);
		return -1;
	}
	buf[n++] = '\n'; /* the PEM decoder needs a final line end */
	br_pem_decoder_context pc;
	br_pem_decoder_init(&pc);
	vbuf der = { 0 };
	int in_cert = 0, bad = 0;
	const uint8_t *p = buf;
	size_t left = n;
	while (left > 0 && !bad) {
		size_t k = br_pem_decoder_push(&pc, p, left);
		p += k;
		left -= k;
		switch (br_pem_decoder_event(&pc)) {
		case BR_PEM_BEGIN_OBJ: {
			const char *name = br_pem_decoder_name(&pc);
			in_cert = !strcmp(name, "CERTIFICATE") || !strcmp(name, "X509 CERTIFICATE") ||
				  !strcmp(name, "TRUSTED CERTIFICATE");
			der.n = 0;
			br_pem_decoder_setdest(&pc, in_cert ? vbuf_append : NULL, in_cert ? &der : NULL);
			break;
		}
		case BR_PEM_END_OBJ:
			if (in_cert && !der.oom)
				add_anchor(der.p, der.n);
			in_cert = 0;
			break;
		case BR_PEM_ERROR:
			bad = 1;
			break;
		default:
			break;
		}
	}
	free(der.p);
	free(buf);
	if (bad) {
		snprintf(err, errlen, "CA bundle %s: malformed PEM", path);
		return -1;
	}
	if (!g_nta) {
		snprintf(err, errlen, "CA bundle %s: no certificates", path);
		return -1;
	}
	return 0;
}

/* ---- TCP ---- */

struct tls_conn {
	int fd;
	int eof, timed_out, sys_errno;
	br_ssl_client_context cc;
	br_x509_minimal_context xc;
	br_sslio_context io;
	uint8_t iobuf[BR_SSL_BUFSIZE_BIDI];
};

/* MLXR_RESOLVE "host:ip,host:ip" (tests). 1 found, 0 not listed. */
static int resolve_override(const char *host, struct sockaddr_storage *ss, socklen_t *sl, uint16_t port)
{
	const char *e = getenv("MLXR_RESOLVE");
	if (!e)
		return 0;
	size_t hl = strlen(host);
	while (*e) {
		const char *end = e + strcspn(e, ",");
		const char *colon = memchr(e, ':', (size_t)(end - e));
		if (colon && (size_t)(colon - e) == hl && !strncasecmp(e, host, hl)) {
			char ip[64];
			size_t il = (size_t)(end - colon - 1);
			if (il >= sizeof(ip))
				return 0;
			memcpy(ip, colon + 1, il);
			ip[il] = 0;
			struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
			memset(ss, 0, sizeof(*ss));
			if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
				s4->sin_family = AF_INET;
				s4->sin_port = htons(port);
				*sl = sizeof(*s4);
				return 1;
			}
			if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
				s6->sin6_family = AF_INET6;
				s6->sin6_port = htons(port);
				*sl = sizeof(*s6);
				return 1;
			}
			return 0;
		}
		e = *end ? end + 1 : end;
	}
	return 0;
}

static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { fd, ev, 0 };
	int r;
	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r;
}

static int connect_addr(const struct sockaddr *sa, socklen_t sl, char *err, size_t errlen, const char *host,
			uint16_t port)
{
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "%s:%u: socket: %s", host, port, strerror(errno));
		return -1;
	}
	if (connect(fd, sa, sl) != 0 && errno != EINPROGRESS) {
		int e = errno;
		snprintf(err, errlen, "%s:%u: connect: %s%s", host, port, strerror(e),
			 e == EACCES ? " (the fetcher's sandbox allows only the Hub's ports)" : "");
		close(fd);
		return -1;
	}
	int r = wait_fd(fd, POLLOUT, FETCH_CONNECT_MS);
	int soerr = 0;
	socklen_t el = sizeof(soerr);
	if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &el) || soerr) {
		snprintf(err, errlen, "%s:%u: connect: %s", host, port,
			 r == 0 ? "timed out" : strerror(soerr ? soerr : errno));
		close(fd);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int tcp_open(const char *host, uint16_t port, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	if (resolve_override(host, &ss, &sl, port))
		return connect_addr((struct sockaddr *)&ss, sl, err, errlen, host, port);
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	char ps[8];
	snprintf(ps, sizeof(ps), "%u", port);
	int g = getaddrinfo(host, ps, &hints, &res);
	if (g) {
		snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(g));
		return -1;
	}
	int fd = -1;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next)
		fd = connect_addr(a->ai_addr, a->ai_addrlen, err, errlen, host, port);
	freeaddrinfo(res);
	return fd;
}

/* ---- BearSSL I/O callbacks: nonblocking socket, poll with a timeout ---- */

static int sock_read(void *ctx, unsigned char *buf, size_t len)
{
	tls_conn *c = ctx;
	for (;;) {
		ssize_t r = read(c->fd, buf, len);
		if (r > 0)
			return (int)r;
		if (r == 0) {
			c->eof = 1;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			c->sys_errno = errno;
			return -1;
		}
		if (wait_fd(c->fd, POLLIN, FETCH_IO_MS) <= 0) {
			c->timed_out = 1;
			return -1;
		}
	}
}

static int sock_write(void *ctx, const unsigned char *buf, size_t len)
{
	tls_conn *c = ctx;
	for (;;) {
		ssize_t r = send(c->fd, buf, len, MSG_NOSIGNAL);
		if (r >= 0)
			return (int)r;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			c->sys_errno = errno;
			return -1;
		}
		if (wait_fd(c->fd, POLLOUT, FETCH_IO_MS) <= 0) {
			c->timed_out = 1;
			return -1;
		}
	}
}

static void describe(tls_conn *c, const char *what, char *err, size_t errlen, int *kind)
{
	int e = br_ssl_engine_last_error(&c->cc.eng);
	const char *why = NULL;
	*kind = FETCH_ERR_TLS;
	switch (e) {
	case BR_ERR_X509_NOT_TRUSTED: why = "certificate not signed by a trusted CA (see SSL_CERT_FILE)"; break;
	case BR_ERR_X509_BAD_SERVER_NAME: why = "certificate is for another host name"; break;
	case BR_ERR_X509_EXPIRED: why = "certificate expired or not yet valid"; break;
	case BR_ERR_IO:
		*kind = FETCH_ERR_NET;
		why = c->timed_out ? "timed out" : c->eof ? "connection closed by the server" : NULL;
		if (!why) {
			snprintf(err, errlen, "%s: %s", what, strerror(c->sys_errno ? c->sys_errno : EIO));
			return;
		}
		break;
	default: break;
	}
	if (why)
		snprintf(err, errlen, "%s: %s", what, why);
	else
		snprintf(err, errlen, "%s: TLS error %d", what, e);
}

int tls_open(tls_conn **out, const char *host, uint16_t port, char *err, size_t errlen, int *kind)
{
	*out = NULL;
	*kind = FETCH_ERR_NET;
	if (!g_nta) {
		snprintf(err, errlen, "no trusted CA certificates loaded");
		*kind = FETCH_ERR_TLS;
		return -1;
	}
	tls_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	c->fd = tcp_open(host, port, err, errlen);
	if (c->fd < 0) {
		free(c);
		return -1;
	}
	br_ssl_client_init_full(&c->cc, &c->xc, g_ta, g_nta);
	time_t now = time(NULL);
	br_x509_minimal_set_time(&c->xc, (uint32_t)(now / 86400 + 719528), (uint32_t)(now % 86400));
	br_ssl_engine_set_buffer(&c->cc.eng, c->iobuf, sizeof(c->iobuf), 1);
	if (!br_ssl_client_reset(&c->cc, host, 0)) {
		snprintf(err, errlen, "TLS reset failed");
		*kind = FETCH_ERR_TLS;
		tls_close(c);
		return -1;
	}
	br_sslio_init(&c->io, &c->cc.eng, sock_read, c, sock_write, c);
	/* Drive the handshake now, so certificate errors surface here. */
	unsigned st;
	while (!((st = br_ssl_engine_current_state(&c->cc.eng)) & (BR_SSL_SENDAPP | BR_SSL_CLOSED))) {
		if (st & BR_SSL_SENDREC) {
			size_t len;
			unsigned char *b = br_ssl_engine_sendrec_buf(&c->cc.eng, &len);
			int w = sock_write(c, b, len);
			if (w < 0)
				break;
			br_ssl_engine_sendrec_ack(&c->cc.eng, (size_t)w);
		} else if (st & BR_SSL_RECVREC) {
			size_t len;
			unsigned char *b = br_ssl_engine_recvrec_buf(&c->cc.eng, &len);
			int r = sock_read(c, b, len);
			if (r < 0)
				break;
			br_ssl_engine_recvrec_ack(&c->cc.eng, (size_t)r);
		} else {
			break;
		}
	}
	if (!(br_ssl_engine_current_state(&c->cc.eng) & BR_SSL_SENDAPP)) {
		char what[FETCH_HOST_MAX + 32];
		snprintf(what, sizeof(what), "TLS handshake with %s", host);
		describe(c, what, err, errlen, kind);
		if (*kind == FETCH_ERR_NET && br_ssl_engine_last_error(&c->cc.eng) == BR_ERR_OK)
			snprintf(err, errlen, "TLS handshake with %s: connection closed", host);
		if (br_ssl_engine_last_error(&c->cc.eng) != BR_ERR_IO)
			*kind = FETCH_ERR_TLS;
		tls_close(c);
		return -1;
	}
	*out = c;
	return 0;
}

int tls_write_all(tls_conn *c, const void *p, size_t n, char *err, size_t errlen)
{
	int kind;
	if (br_sslio_write_all(&c->io, p, n) || br_sslio_flush(&c->io)) {
		describe(c, "sending the request", err, errlen, &kind);
		return -1;
	}
	return 0;
}

long tls_read(tls_conn *c, void *p, size_t n, char *err, size_t errlen)
{
	int r = br_sslio_read(&c->io, p, n);
	if (r > 0)
		return r;
	int e = br_ssl_engine_last_error(&c->cc.eng);
	if (e == BR_ERR_OK && (br_ssl_engine_current_state(&c->cc.eng) & BR_SSL_CLOSED))
		return 0;
	int kind;
	describe(c, "reading the response", err, errlen, &kind);
	return -1;
}

void tls_close(tls_conn *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}
