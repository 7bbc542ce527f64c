/* common/ipc.c — see ipc.h. */
#include "common/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

int ipc_send(int sock, uint32_t type, uint64_t id, const void *payload, size_t len, const int *fds, int nfds)
{
	uint8_t hdr[IPC_HDR];
	if (len > IPC_MAX_PAYLOAD || nfds < 0 || nfds > IPC_MAX_FDS) {
		errno = EMSGSIZE;
		return -1;
	}
	put_le(hdr, type, 4);
	put_le(hdr + 4, len, 4);
	put_le(hdr + 8, id, 8);
	struct iovec iov[2] = { { hdr, IPC_HDR }, { (void *)payload, len } };
	struct msghdr mh = { 0 };
	mh.msg_iov = iov;
	mh.msg_iovlen = len ? 2 : 1;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
	} cm;
	if (nfds) {
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.b;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (r >= 0)
			return (size_t)r == IPC_HDR + len ? 0 : (errno = EIO, -1);
		if (errno != EINTR)
			return -1;
	}
}

void ipc_close_fds(ipc_msg *m)
{
	for (int i = 0; i < m->nfds; i++)
		if (m->fds[i] >= 0)
			close(m->fds[i]);
	m->nfds = 0;
}

int ipc_recv(int sock, ipc_msg *m, char *err, size_t errlen)
{
	uint8_t hdr[IPC_HDR];
	struct iovec iov[2] = { { hdr, IPC_HDR }, { m->payload, IPC_MAX_PAYLOAD } };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
	} cm;
	struct msghdr mh = { 0 };
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	mh.msg_control = cm.b;
	mh.msg_controllen = sizeof(cm.b);
	m->nfds = 0;
	ssize_t r;
	do
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		snprintf(err, errlen, "ipc: receive failed: %s", strerror(errno));
		return -1;
	}
	/* Collect descriptors first, so every error path can close them:
	 * all of them, also those in an SCM_RIGHTS message that follows an
	 * unexpected one (the kernel puts SCM_CREDENTIALS ahead of the
	 * descriptors once SO_PASSCRED is set; returning at the first one
	 * leaked them). tests/unit/test_ipc.c counts them. */
	int unexpected = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			unexpected = 1;
			continue;
		}
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (m->nfds < IPC_MAX_FDS)
				m->fds[m->nfds++] = fd;
			else
				close(fd);
		}
	}
	if (unexpected) {
		ipc_close_fds(m);
		snprintf(err, errlen, "ipc: unexpected control message");
		return -1;
	}
	if (r == 0 && m->nfds == 0)
		return 1; /* orderly shutdown */
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		ipc_close_fds(m);
		snprintf(err, errlen, "ipc: truncated packet or descriptors");
		return -1;
	}
	if ((size_t)r < IPC_HDR) {
		ipc_close_fds(m);
		snprintf(err, errlen, "ipc: packet of %zd bytes is shorter than the header", r);
		return -1;
	}
	m->type = (uint32_t)get_le(hdr, 4);
	m->len = (uint32_t)get_le(hdr + 4, 4);
	m->id = get_le(hdr + 8, 8);
	if (m->len > IPC_MAX_PAYLOAD || (size_t)r != IPC_HDR + m->len) {
		ipc_close_fds(m);
		snprintf(err, errlen, "ipc: header says %u payload bytes, packet has %zd", m->len, r - IPC_HDR);
		return -1;
	}
	if (m->type == IPC_NONE || m->type >= IPC_TYPE_COUNT) {
		ipc_close_fds(m);
		snprintf(err, errlen, "ipc: unknown message type %u", m->type);
		return -1;
	}
	return 0;
}

/* ---- cursors ---- */

void ipc_wr_init(ipc_wr *w, void *buf, size_t cap)
{
	memset(w, 0, sizeof(*w));
	w->buf = buf;
	w->cap = cap;
}

/* Makes room for n more bytes: a growing writer doubles its buffer. */
static int wr_room(ipc_wr *w, size_t n)
{
	if (w->bad)
		return -1;
	if (n <= w->cap - w->len)
		return 0;
	size_t nc = w->cap ? w->cap : 4096;
	while (w->grow && nc - w->len < n) {
		if (nc > SIZE_MAX / 2)
			break;
		nc *= 2;
	}
	uint8_t *nb = w->grow && nc - w->len >= n ? realloc(w->buf, nc) : NULL;
	if (!nb) {
		w->bad = 1;
		return -1;
	}
	w->buf = nb;
	w->cap = nc;
	return 0;
}

void ipc_put_raw(ipc_wr *w, const void *p, size_t n)
{
	if (wr_room(w, n))
		return;
	if (n)
		memcpy(w->buf + w->len, p, n);
	w->len += n;
}

void ipc_put_u32(ipc_wr *w, uint32_t v)
{
	uint8_t b[4];
	put_le(b, v, 4);
	ipc_put_raw(w, b, 4);
}

void ipc_put_u64(ipc_wr *w, uint64_t v)
{
	uint8_t b[8];
	put_le(b, v, 8);
	ipc_put_raw(w, b, 8);
}

void ipc_put_f64(ipc_wr *w, double v)
{
	uint64_t u;
	memcpy(&u, &v, 8);
	ipc_put_u64(w, u);
}

void ipc_put_bytes(ipc_wr *w, const void *p, size_t n)
{
	if (n > UINT32_MAX) {
		w->bad = 1;
		return;
	}
	ipc_put_u32(w, (uint32_t)n);
	ipc_put_raw(w, p, n);
}

void ipc_rd_init(ipc_rd *r, const void *buf, size_t len)
{
	r->p = buf;
	r->left = len;
	r->bad = 0;
}

const uint8_t *ipc_get_raw(ipc_rd *r, size_t n)
{
	if (r->bad || n > r->left) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}

uint32_t ipc_get_u32(ipc_rd *r)
{
	const uint8_t *p = ipc_get_raw(r, 4);
	return p ? (uint32_t)get_le(p, 4) : 0;
}

uint64_t ipc_get_u64(ipc_rd *r)
{
	const uint8_t *p = ipc_get_raw(r, 8);
	return p ? get_le(p, 8) : 0;
}

double ipc_get_f64(ipc_rd *r)
{
	uint64_t u = ipc_get_u64(r);
	double d;
	memcpy(&d, &u, 8);
	return d;
}

const uint8_t *ipc_get_bytes(ipc_rd *r, size_t max, size_t *n)
{
	uint32_t l = ipc_get_u32(r);
	if (r->bad || l > max) {
		r->bad = 1;
		return NULL;
	}
	*n = l;
	return ipc_get_raw(r, l);
}

/* ---- sealed memfds ---- */

#define ALL_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

int ipc_memfd_new(const char *name)
{
	return memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
}

int ipc_write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(fd, b + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

int ipc_memfd_seal(int fd)
{
	/* F_SEAL_WRITE, not F_SEAL_FUTURE_WRITE: the latter would leave any
	 * writable mapping of the writer able to change the bytes. */
	return fcntl(fd, F_ADD_SEALS, ALL_SEALS) ? -1 : 0;
}

int ipc_memfd_sealed(const char *name, const void *p, size_t n)
{
	int fd = ipc_memfd_new(name);
	if (fd < 0)
		return -1;
	if (ipc_write_all(fd, p, n) || ipc_memfd_seal(fd)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

void ipc_blob_init(ipc_blob *b, const char *name)
{
	memset(b, 0, sizeof(*b));
	b->grow = 1;
	b->name = name;
}

int ipc_blob_seal(ipc_blob *b)
{
	if (b->bad)
		return -1;
	return ipc_memfd_sealed(b->name, b->buf, b->len);
}

void ipc_blob_free(ipc_blob *b)
{
	free(b->buf);
	memset(b, 0, sizeof(*b));
}

int ipc_memfd_map(int fd, size_t max, const uint8_t **p, size_t *n, char *err, size_t errlen)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & ALL_SEALS) != ALL_SEALS) {
		snprintf(err, errlen, "ipc: memfd is not sealed against changes (seals 0x%x)", seals < 0 ? 0 : seals);
		return -1;
	}
	if (fstat(fd, &st) || st.st_size < 0 || (uint64_t)st.st_size > max) {
		snprintf(err, errlen, "ipc: memfd of %lld bytes exceeds %zu", (long long)st.st_size, max);
		return -1;
	}
	*n = (size_t)st.st_size;
	if (*n == 0) {
		*p = (const uint8_t *)"";
		return 0;
	}
	void *m = mmap(NULL, *n, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		snprintf(err, errlen, "ipc: cannot map memfd: %s", strerror(errno));
		return -1;
	}
	*p = m;
	return 0;
}
