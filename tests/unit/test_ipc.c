/* tests/unit/test_ipc.c — the IPC codec rejects every malformed input it
 * claims to, deterministically (fuzz/ipc_fuzzer.c explores; this proves each
 * rule once):
 *   1. framing (common/ipc.c ipc_send/ipc_recv over a real SOCK_SEQPACKET
 *      socketpair): a message round-trips with its descriptors; each
 *      malformed packet written as raw bytes is refused with a reason, and
 *      the descriptors it carried are closed (counted in /proc/self/fd);
 *   2. the ipc_rd cursor: reads past the end fail, stay failed and touch no
 *      byte past the buffer; ipc_get_bytes enforces its max; the writer
 *      never writes past its buffer;
 *   3. every wire decoder of common/wcproto.c and fetcher/fproto.c: a
 *      populated value round-trips; every proper prefix of its encoding and
 *      the encoding plus trailing bytes are refused; each range check the
 *      decoder makes is hit once; sanitised text is checked byte for byte;
 *   4. sealed memfds: unsealed, partly sealed, oversized or non-memfd
 *      descriptors are refused by ipc_memfd_map;
 *   5. common/utf8.c utf8_clean, the cleaner behind those decoders' text
 *      and behind `mlxr run`'s printing of generated text (a stream:
 *      characters split across events, controls, invalid UTF-8).
 * Every buffer handed to a decoder is an exact-size heap copy, so under
 * `make asan` a read one byte past the end is a report, not luck.
 * Exit status 0 only if every check passed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/utf8.h"
#include "common/wcapi.h"
#include "fetcher/fetch.h"
#include "tests/test_rng.h"

static int g_checks, g_fail;
static const char *g_case = "";

#define CHECK(cond, ...)                                          \
	do {                                                      \
		g_checks++;                                       \
		if (!(cond)) {                                    \
			g_fail++;                                 \
			printf("FAIL (%s) line %d: ", g_case, __LINE__); \
			printf(__VA_ARGS__);                      \
			putchar('\n');                            \
		}                                                 \
	} while (0)

static ipc_msg g_msg; /* 64 KiB: not on the stack */

/* ---- helpers ---- */

/* Open descriptors of this process (the directory's own fd included, the
 * same on every call). */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Sends p[0..n) as one packet, with fds attached, bypassing ipc_send. */
static int send_raw(int sock, const void *p, size_t n, const int *fds, int nfds)
{
	struct iovec iov = { (void *)p, n };
	struct msghdr mh = { 0 };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * 253)];
	} cm;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
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
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* A decoder under test: 0 accepts, nonzero refuses. */
typedef int (*decode_fn)(const uint8_t *p, size_t n);

/* Runs f on an exact-size heap copy of p[0..n) (ASan sees any overread). */
static int run_copy(decode_fn f, const uint8_t *p, size_t n)
{
	uint8_t *c = malloc(n ? n : 1);
	if (!c)
		abort();
	if (n)
		memcpy(c, p, n);
	int r = f(c, n);
	free(c);
	return r;
}

static void expect_accept(const char *what, decode_fn f, const uint8_t *p, size_t n)
{
	CHECK(run_copy(f, p, n) == 0, "%s: valid encoding of %zu bytes refused", what, n);
}

static void expect_reject(const char *what, decode_fn f, const uint8_t *p, size_t n)
{
	CHECK(run_copy(f, p, n) != 0, "%s: accepted", what);
}

/* The encoding is accepted whole; every proper prefix, and the encoding
 * followed by 1 or 8 more bytes, is refused. */
static void expect_exact(const char *what, decode_fn f, const uint8_t *p, size_t n)
{
	expect_accept(what, f, p, n);
	for (size_t k = 0; k < n; k++)
		CHECK(run_copy(f, p, k) != 0, "%s: prefix of %zu / %zu bytes accepted", what, k, n);
	uint8_t *t = calloc(1, n + 8);
	memcpy(t, p, n);
	CHECK(run_copy(f, t, n + 1) != 0, "%s: 1 trailing byte accepted", what);
	memset(t + n, 0xa5, 8);
	CHECK(run_copy(f, t, n + 8) != 0, "%s: 8 trailing bytes accepted", what);
	free(t);
}

/* Writers over buffers large enough for anything below: wr_new for what
 * the packers write, wr_hand for the hand-built wire forms (a different
 * buffer, so comparing the two compares two encodings). */
static uint8_t g_wbuf[1 << 16], g_hbuf[1 << 16];
static ipc_wr wr_new(void)
{
	ipc_wr w;
	ipc_wr_init(&w, g_wbuf, sizeof(g_wbuf));
	return w;
}

static ipc_wr wr_hand(void)
{
	ipc_wr w;
	ipc_wr_init(&w, g_hbuf, sizeof(g_hbuf));
	return w;
}

/* ---- 1. framing ---- */

static int g_sv[2];

/* Receives one packet that must be refused with needle in the message and
 * none of its descriptors left open. fds_before: count_fds() before it was
 * sent. */
static void expect_recv_reject(const char *what, const char *needle, int fds_before)
{
	char err[256] = "";
	int r = ipc_recv(g_sv[0], &g_msg, err, sizeof(err));
	CHECK(r == -1, "%s: ipc_recv returned %d", what, r);
	CHECK(err[0] && strstr(err, needle), "%s: error '%s' lacks '%s'", what, err, needle);
	CHECK(g_msg.nfds == 0, "%s: %d descriptors left in the message", what, g_msg.nfds);
	int after = count_fds();
	CHECK(after == fds_before, "%s: %d descriptors open before, %d after (leak)", what, fds_before, after);
}

static void test_framing(void)
{
	g_case = "framing";
	char err[256];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, g_sv)) {
		CHECK(0, "socketpair: %s", strerror(errno));
		return;
	}
	/* Two descriptors to pass: the ends of a pipe. */
	int pp[2];
	if (pipe(pp))
		abort();
	struct stat st0, st1, sr0, sr1;
	fstat(pp[0], &st0);
	fstat(pp[1], &st1);

	/* A valid message round-trips: type, id, payload, descriptors. */
	static uint8_t pay[IPC_MAX_PAYLOAD];
	for (size_t i = 0; i < sizeof(pay); i++)
		pay[i] = (uint8_t)(i * 7 + 3);
	int base = count_fds();
	CHECK(ipc_send(g_sv[1], IPC_EVENT, 0x0123456789abcdefull, pay, 1000, pp, 2) == 0, "send: %s", strerror(errno));
	int r = ipc_recv(g_sv[0], &g_msg, err, sizeof(err));
	CHECK(r == 0, "valid message refused: %s", err);
	CHECK(g_msg.type == IPC_EVENT && g_msg.id == 0x0123456789abcdefull && g_msg.len == 1000 &&
		      !memcmp(g_msg.payload, pay, 1000),
	      "round trip: type %u id %llx len %u", g_msg.type, (unsigned long long)g_msg.id, g_msg.len);
	CHECK(g_msg.nfds == 2, "round trip: %d descriptors", g_msg.nfds);
	if (g_msg.nfds == 2) {
		fstat(g_msg.fds[0], &sr0);
		fstat(g_msg.fds[1], &sr1);
		CHECK(sr0.st_ino == st0.st_ino && sr0.st_dev == st0.st_dev && sr1.st_ino == st1.st_ino &&
			      sr1.st_dev == st1.st_dev,
		      "received descriptors are not the pipe's, in order");
		CHECK((fcntl(g_msg.fds[0], F_GETFD) & FD_CLOEXEC) && (fcntl(g_msg.fds[1], F_GETFD) & FD_CLOEXEC),
		      "received descriptors are not close-on-exec");
		CHECK(count_fds() == base + 2, "two descriptors received, %d new", count_fds() - base);
		ipc_close_fds(&g_msg);
		CHECK(g_msg.nfds == 0 && count_fds() == base, "ipc_close_fds left %d open", count_fds() - base);
	}

	/* The edges that are valid: the lowest and highest type, no payload,
	 * a payload of exactly IPC_MAX_PAYLOAD. */
	CHECK(ipc_send(g_sv[1], 1, 0, NULL, 0, NULL, 0) == 0, "send type 1");
	r = ipc_recv(g_sv[0], &g_msg, err, sizeof(err));
	CHECK(r == 0 && g_msg.type == 1 && g_msg.len == 0 && g_msg.id == 0 && g_msg.nfds == 0, "type 1, empty: %d", r);
	CHECK(ipc_send(g_sv[1], IPC_TYPE_COUNT - 1, UINT64_MAX, pay, IPC_MAX_PAYLOAD, NULL, 0) == 0, "send max: %s",
	      strerror(errno));
	r = ipc_recv(g_sv[0], &g_msg, err, sizeof(err));
	CHECK(r == 0 && g_msg.type == IPC_TYPE_COUNT - 1 && g_msg.id == UINT64_MAX && g_msg.len == IPC_MAX_PAYLOAD &&
		      !memcmp(g_msg.payload, pay, IPC_MAX_PAYLOAD),
	      "last type, max payload: %d %s", r, r ? err : "");

	/* ipc_send refuses what ipc_recv would (EMSGSIZE). */
	errno = 0;
	CHECK(ipc_send(g_sv[1], IPC_EVENT, 1, pay, IPC_MAX_PAYLOAD + 1, NULL, 0) == -1 && errno == EMSGSIZE,
	      "ipc_send: oversized payload sent");
	errno = 0;
	CHECK(ipc_send(g_sv[1], IPC_EVENT, 1, NULL, 0, pp, -1) == -1 && errno == EMSGSIZE, "ipc_send: nfds -1 sent");
	errno = 0;
	CHECK(ipc_send(g_sv[1], IPC_EVENT, 1, NULL, 0, pp, IPC_MAX_FDS + 1) == -1 && errno == EMSGSIZE,
	      "ipc_send: %d descriptors sent", IPC_MAX_FDS + 1);

	/* Malformed packets, each with both pipe descriptors attached. */
	uint8_t pk[IPC_HDR + 64];
	memset(pk, 0, sizeof(pk));
	/* shorter than the header: every length 1..15 */
	for (size_t n = 1; n < IPC_HDR; n++) {
		put_le32(pk, IPC_EVENT);
		base = count_fds();
		CHECK(send_raw(g_sv[1], pk, n, pp, 2) == 0, "send %zu bytes", n);
		expect_recv_reject("short packet", "shorter than the header", base);
	}
	/* a packet of 0 bytes carrying descriptors (not an EOF) */
	base = count_fds();
	CHECK(send_raw(g_sv[1], pk, 0, pp, 2) == 0, "send 0 bytes + fds");
	expect_recv_reject("empty packet with descriptors", "shorter than the header", base);
	/* length field disagrees with the packet: one less, one more, and
	 * a header alone claiming a payload */
	static const struct {
		uint32_t len;
		size_t payload;
		const char *what;
	} lens[] = { { 10, 9, "length 10, 9 bytes" },
		     { 10, 11, "length 10, 11 bytes" },
		     { 1, 0, "length 1, header only" },
		     { 0, 1, "length 0, 1 byte" },
		     { IPC_MAX_PAYLOAD + 1, 0, "length over the limit" },
		     { UINT32_MAX, 0, "length 2^32-1" },
		     { UINT32_MAX - IPC_HDR + 1, 0, "length that wraps 32 bits with the header" } };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		put_le32(pk, IPC_EVENT);
		put_le32(pk + 4, lens[i].len);
		put_le64(pk + 8, 42);
		base = count_fds();
		CHECK(send_raw(g_sv[1], pk, IPC_HDR + lens[i].payload, pp, 2) == 0, "send");
		expect_recv_reject(lens[i].what, "payload bytes, packet has", base);
	}
	/* a packet larger than the receive buffer (header + IPC_MAX_PAYLOAD
	 * + 1, length field consistent with it): cut by the kernel, refused */
	{
		size_t big = IPC_HDR + IPC_MAX_PAYLOAD + 1;
		uint8_t *b = calloc(1, big);
		put_le32(b, IPC_EVENT);
		put_le32(b + 4, IPC_MAX_PAYLOAD + 1);
		base = count_fds();
		CHECK(send_raw(g_sv[1], b, big, pp, 2) == 0, "send %zu bytes: %s", big, strerror(errno));
		expect_recv_reject("packet over the limit", "truncated", base);
		free(b);
	}
	/* type out of range: IPC_NONE, IPC_TYPE_COUNT, 2^32-1 */
	static const uint32_t types[] = { IPC_NONE, IPC_TYPE_COUNT, UINT32_MAX };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		put_le32(pk, types[i]);
		put_le32(pk + 4, 4);
		base = count_fds();
		CHECK(send_raw(g_sv[1], pk, IPC_HDR + 4, pp, 2) == 0, "send");
		char needle[48];
		snprintf(needle, sizeof(needle), "unknown message type %u", types[i]);
		expect_recv_reject(needle, needle, base);
	}
	/* more descriptors than IPC_MAX_FDS (the kernel allows 253): the
	 * control data is cut (MSG_CTRUNC), the packet refused, and the 250
	 * descriptors that did arrive are closed */
	{
		int many[253];
		for (int i = 0; i < 253; i++)
			many[i] = pp[i & 1];
		put_le32(pk, IPC_EVENT);
		put_le32(pk + 4, 0);
		base = count_fds();
		CHECK(send_raw(g_sv[1], pk, IPC_HDR, many, 253) == 0, "send 253 fds: %s", strerror(errno));
		expect_recv_reject("253 descriptors", "truncated", base);
		/* exactly IPC_MAX_FDS is valid */
		CHECK(send_raw(g_sv[1], pk, IPC_HDR, many, IPC_MAX_FDS) == 0, "send 250 fds: %s", strerror(errno));
		r = ipc_recv(g_sv[0], &g_msg, err, sizeof(err));
		CHECK(r == 0 && g_msg.nfds == IPC_MAX_FDS && count_fds() == base + IPC_MAX_FDS, "250 descriptors: %d",
		      r);
		ipc_close_fds(&g_msg);
		CHECK(count_fds() == base, "ipc_close_fds of 250 left %d", count_fds() - base);
	}
	/* A control message other than SCM_RIGHTS (here SCM_CREDENTIALS,
	 * which the kernel adds once the receiver sets SO_PASSCRED, ahead of
	 * the SCM_RIGHTS one): refused, and the descriptors in the later
	 * control message closed too. */
	{
		int one = 1, zero = 0;
		setsockopt(g_sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
		put_le32(pk, IPC_EVENT);
		put_le32(pk + 4, 0);
		base = count_fds();
		CHECK(send_raw(g_sv[1], pk, IPC_HDR, pp, 2) == 0, "send");
		expect_recv_reject("SCM_CREDENTIALS", "unexpected control message", base);
		setsockopt(g_sv[0], SOL_SOCKET, SO_PASSCRED, &zero, sizeof(zero));
	}

	/* After all that the stream is still in step: the next valid packet
	 * is received whole. */
	CHECK(ipc_send(g_sv[1], IPC_DONE, 7, "ok", 2, NULL, 0) == 0, "send");
	r = ipc_recv(g_sv[0], &g_msg, err, sizeof(err));
	CHECK(r == 0 && g_msg.type == IPC_DONE && g_msg.id == 7 && g_msg.len == 2 && !memcmp(g_msg.payload, "ok", 2),
	      "packet after the rejections: %d %s", r, r ? err : "");

	/* A 0-byte packet without descriptors reads as an orderly EOF (1):
	 * SOCK_SEQPACKET cannot tell the two apart; the caller ends the peer
	 * either way. Then a real EOF. */
	CHECK(send_raw(g_sv[1], pk, 0, NULL, 0) == 0, "send 0 bytes");
	CHECK(ipc_recv(g_sv[0], &g_msg, err, sizeof(err)) == 1, "0-byte packet is not EOF");
	close(g_sv[1]);
	CHECK(ipc_recv(g_sv[0], &g_msg, err, sizeof(err)) == 1, "EOF is not 1");
	close(g_sv[0]);
	/* recvmsg itself failing (not a socket) is an error with a reason,
	 * not an EOF. */
	err[0] = 0;
	r = ipc_recv(pp[0], &g_msg, err, sizeof(err));
	CHECK(r == -1 && strstr(err, "receive failed"), "ipc_recv on a pipe: %d '%s'", r, err);
	close(pp[0]);
	close(pp[1]);
}

/* ---- 2. cursors ---- */

static void test_cursors(void)
{
	g_case = "cursors";
	ipc_rd r;
	/* Little-endian values. */
	static const uint8_t le[12] = { 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88 };
	ipc_rd_init(&r, le, sizeof(le));
	uint32_t a = ipc_get_u32(&r);
	uint64_t b = ipc_get_u64(&r);
	CHECK(a == 0x04030201u && b == 0x8877665544332211ull && !r.bad && r.left == 0, "LE: %x %llx", a,
	      (unsigned long long)b);
	/* Then any read fails with 0 / NULL, the cursor staying put. */
	const uint8_t *end = r.p;
	CHECK(ipc_get_u32(&r) == 0 && r.bad && r.p == end && r.left == 0, "u32 past the end");

	/* Each getter on one byte too few, from an exact-size heap buffer:
	 * fails, sets bad, consumes nothing. */
	uint8_t *h = malloc(7);
	memset(h, 0xff, 7);
	ipc_rd_init(&r, h, 3);
	CHECK(ipc_get_u32(&r) == 0 && r.bad && r.left == 3 && r.p == h, "u32 on 3 bytes");
	ipc_rd_init(&r, h, 7);
	CHECK(ipc_get_u64(&r) == 0 && r.bad && r.left == 7 && r.p == h, "u64 on 7 bytes");
	ipc_rd_init(&r, h, 7);
	double d = ipc_get_f64(&r);
	CHECK(d == 0 && !signbit(d) && r.bad && r.left == 7, "f64 on 7 bytes: %g", d);
	ipc_rd_init(&r, h, 7);
	CHECK(ipc_get_raw(&r, 8) == NULL && r.bad && r.left == 7, "raw 8 of 7");
	ipc_rd_init(&r, h, 7);
	CHECK(ipc_get_raw(&r, SIZE_MAX) == NULL && r.bad, "raw SIZE_MAX");
	ipc_rd_init(&r, h, 7);
	CHECK(ipc_get_raw(&r, 7) == h && !r.bad && r.left == 0, "raw of exactly what is left");
	CHECK(ipc_get_raw(&r, 0) != NULL && !r.bad, "raw 0 at the end");
	/* Sticky: after a failure, even a read that fits fails. */
	ipc_rd_init(&r, h, 7);
	(void)ipc_get_u64(&r);
	CHECK(ipc_get_u32(&r) == 0 && ipc_get_raw(&r, 1) == NULL && ipc_get_raw(&r, 0) == NULL && r.bad && r.left == 7,
	      "a failed cursor read again");
	free(h);

	/* ipc_get_bytes: the max, the length against what is left. */
	uint8_t bb[4 + 5] = { 5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o' };
	size_t n = 99;
	ipc_rd_init(&r, bb, sizeof(bb));
	const uint8_t *s = ipc_get_bytes(&r, 5, &n);
	CHECK(s == bb + 4 && n == 5 && !r.bad && r.left == 0, "bytes at max");
	ipc_rd_init(&r, bb, sizeof(bb));
	n = 99;
	CHECK(ipc_get_bytes(&r, 4, &n) == NULL && r.bad && n == 99, "bytes over max: n=%zu", n);
	ipc_rd_init(&r, bb, sizeof(bb) - 1);
	CHECK(ipc_get_bytes(&r, SIZE_MAX, &n) == NULL && r.bad, "bytes longer than the buffer");
	uint8_t huge[4 + 1] = { 0xff, 0xff, 0xff, 0xff, 'x' };
	ipc_rd_init(&r, huge, sizeof(huge));
	CHECK(ipc_get_bytes(&r, SIZE_MAX, &n) == NULL && r.bad, "bytes of length 2^32-1");
	ipc_rd_init(&r, bb, 3);
	CHECK(ipc_get_bytes(&r, 100, &n) == NULL && r.bad, "bytes with a cut length");
	uint8_t empty[4] = { 0 };
	ipc_rd_init(&r, empty, 4);
	CHECK(ipc_get_bytes(&r, 0, &n) != NULL && n == 0 && !r.bad, "empty bytes under max 0");

	/* The fixed writer: overflow sets bad, writes nothing past cap,
	 * stays bad. */
	uint8_t wb[8 + 1];
	memset(wb, 0xcc, sizeof(wb));
	ipc_wr w;
	ipc_wr_init(&w, wb, 8);
	ipc_put_u32(&w, 0xa1b2c3d4u);
	CHECK(!w.bad && w.len == 4 && wb[0] == 0xd4 && wb[3] == 0xa1, "put_u32");
	ipc_put_raw(&w, "12345", 5); /* one byte more than is left */
	CHECK(w.bad && w.len == 4 && wb[4] == 0xcc && wb[8] == 0xcc, "5 bytes into 4 left: wrote or grew");
	ipc_put_u32(&w, 0x01020304u); /* fits, but the writer is bad */
	CHECK(w.bad && w.len == 4 && wb[4] == 0xcc, "a bad writer with room wrote");
	ipc_wr_init(&w, wb, 8);
	ipc_put_u32(&w, 0);
	ipc_put_raw(&w, "1234", 4); /* exactly what is left */
	CHECK(!w.bad && w.len == 8 && wb[7] == '4' && wb[8] == 0xcc, "4 bytes into 4 left");
	ipc_put_u64(&w, 1);
	CHECK(w.bad && w.len == 8 && wb[8] == 0xcc, "put_u64 into a full writer wrote or grew");
	ipc_put_raw(&w, "", 0);
	ipc_put_u32(&w, 0);
	CHECK(w.bad && w.len == 8, "a bad writer wrote");
	/* f64 bit patterns survive: -0.0, NaN payload, infinity. */
	w = wr_new();
	double vals[3] = { -0.0, 0, INFINITY };
	uint64_t nanbits = 0x7ff8000000abcdefull;
	memcpy(&vals[1], &nanbits, 8);
	for (int i = 0; i < 3; i++)
		ipc_put_f64(&w, vals[i]);
	ipc_rd_init(&r, w.buf, w.len);
	for (int i = 0; i < 3; i++) {
		double v = ipc_get_f64(&r);
		CHECK(!memcmp(&v, &vals[i], 8), "f64 %d bits changed", i);
	}
	/* The growing writer (blob) grows past its first 4096 bytes. */
	ipc_blob bl;
	ipc_blob_init(&bl, "t");
	for (uint32_t i = 0; i < 5000; i++)
		ipc_blob_u32(&bl, i);
	int ok = !bl.bad && bl.len == 20000;
	ipc_rd_init(&r, bl.buf, bl.len);
	for (uint32_t i = 0; ok && i < 5000; i++)
		ok = ipc_get_u32(&r) == i;
	CHECK(ok, "blob of 20000 bytes");
	ipc_blob_free(&bl);
}

/* ---- 3a. wcproto: requests ---- */

static char g_err[256];

static int dec_request(const uint8_t *p, size_t n)
{
	wc_request r;
	wc_msg *m;
	g_err[0] = 0;
	int rc = wc_request_unpack(p, n, &r, &m, g_err, sizeof(g_err));
	if (rc == 0)
		wc_request_unpacked_free(&r, m);
	return rc;
}

/* Packs r into a malloc'd buffer (*n bytes). */
static uint8_t *pack_request(const wc_request *r, size_t *n)
{
	ipc_blob b;
	ipc_blob_init(&b, "t");
	int rc = wc_request_pack(r, &b);
	CHECK(rc == 0, "wc_request_pack failed");
	*n = b.len;
	return b.buf; /* ipc_blob_free would free it: the caller frees */
}

static const wc_msg g_conv[3] = { { WC_ROLE_SYSTEM, "be brief", 8 },
				  { WC_ROLE_USER, "hi\0there", 8 },
				  { WC_ROLE_ASSISTANT, "", 0 } };

static void request_full(wc_request *r)
{
	memset(r, 0, sizeof(*r));
	r->msgs = g_conv;
	r->n_msgs = 3;
	r->no_think = 1;
	r->continue_final = 1;
	r->trim = 1;
	r->parse_special = 0;
	r->temperature = 0.7f;
	r->top_p = 0.95f;
	r->min_p = 0.05f;
	r->repeat_penalty = 1.1f;
	r->presence_penalty = -1.5f;
	r->frequency_penalty = 2.25f;
	r->top_k = 40;
	r->repeat_last_n = 64;
	r->seed = 0xfeedfacecafebeefull;
	r->max_tokens = 123;
	r->stops[0] = "</s>";
	r->stops[1] = "\nUser:";
	r->n_stops = 2;
}

/* The request packed with one field changed by edit must be refused with
 * an error naming field. */
static void request_reject(const char *what, void (*edit)(wc_request *), const char *field)
{
	wc_request r;
	request_full(&r);
	edit(&r);
	size_t n;
	uint8_t *p = pack_request(&r, &n);
	int rc = run_copy(dec_request, p, n);
	CHECK(rc != 0, "request %s: accepted", what);
	CHECK(rc == 0 || strstr(g_err, field), "request %s: error '%s' does not name '%s'", what, g_err, field);
	free(p);
}

#define EDIT(name, stmt) \
	static void name(wc_request *r) { stmt; }
EDIT(e_role, ((wc_msg *)r->msgs)[0].role = WC_ROLE_COUNT)
EDIT(e_temp_lo, r->temperature = -0.001f)
EDIT(e_temp_hi, r->temperature = 100.01f)
EDIT(e_temp_nan, r->temperature = NAN)
EDIT(e_topp_lo, r->top_p = -0.001f)
EDIT(e_topp_hi, r->top_p = 1.001f)
EDIT(e_topp_nan, r->top_p = NAN)
EDIT(e_minp_lo, r->min_p = -0.001f)
EDIT(e_minp_hi, r->min_p = 1.001f)
EDIT(e_minp_inf, r->min_p = INFINITY)
EDIT(e_rep_lo, r->repeat_penalty = -0.001f)
EDIT(e_rep_hi, r->repeat_penalty = 100.01f)
EDIT(e_rep_nan, r->repeat_penalty = NAN)
EDIT(e_pres_lo, r->presence_penalty = -100.01f)
EDIT(e_pres_hi, r->presence_penalty = 100.01f)
EDIT(e_pres_ninf, r->presence_penalty = -INFINITY)
EDIT(e_freq_lo, r->frequency_penalty = -100.01f)
EDIT(e_freq_hi, r->frequency_penalty = 100.01f)
EDIT(e_freq_nan, r->frequency_penalty = NAN)
EDIT(e_topk, r->top_k = -1)
EDIT(e_topk_min, r->top_k = INT32_MIN)
EDIT(e_lastn, r->repeat_last_n = -1)
EDIT(e_nstops, { r->n_stops = WC_MAX_STOPS + 1; for (int i = 0; i < WC_MAX_STOPS; i++) r->stops[i] = "x"; })
EDIT(e_stop_empty, r->stops[1] = "")

static void test_request(void)
{
	g_case = "wc_request";
	/* Round trip of a conversation, every field set; wc_conv is const:
	 * e_role edits a copy. */
	wc_request r, u;
	wc_msg *m = NULL;
	request_full(&r);
	size_t n;
	uint8_t *p = pack_request(&r, &n);
	int rc = wc_request_unpack(p, n, &u, &m, g_err, sizeof(g_err));
	CHECK(rc == 0, "valid request refused: %s", g_err);
	if (rc == 0) {
		int ok = u.n_msgs == 3 && u.msgs == m;
		for (size_t i = 0; ok && i < 3; i++)
			ok = u.msgs[i].role == g_conv[i].role && u.msgs[i].len == g_conv[i].len &&
			     !memcmp(u.msgs[i].text, g_conv[i].text, g_conv[i].len);
		CHECK(ok, "messages differ");
		CHECK(u.prompt == NULL && u.no_think == 1 && u.continue_final == 1 && u.trim == 1 && u.parse_special == 0,
		      "flags differ");
		CHECK(u.temperature == r.temperature && u.top_p == r.top_p && u.min_p == r.min_p &&
			      u.repeat_penalty == r.repeat_penalty && u.presence_penalty == r.presence_penalty &&
			      u.frequency_penalty == r.frequency_penalty,
		      "floats differ");
		CHECK(u.top_k == 40 && u.repeat_last_n == 64 && u.seed == r.seed && u.max_tokens == 123, "ints differ");
		CHECK(u.n_stops == 2 && !strcmp(u.stops[0], "</s>") && !strcmp(u.stops[1], "\nUser:"), "stops differ");
		wc_request_unpacked_free(&u, m);
	}
	expect_exact("request (conversation)", dec_request, p, n);
	free(p);

	/* Raw prompt form (message count 2^32-1), flags other than 0/1 read
	 * as 1, max_tokens < 0 passes (it means no limit), edges of every
	 * float range accepted, 8 stops of 1024 bytes accepted. */
	static char stop1024[WC_MAX_STOPS][1025];
	memset(&r, 0, sizeof(r));
	r.prompt = "raw <|im_start|> prompt";
	r.prompt_len = strlen(r.prompt);
	r.parse_special = 7;
	r.no_think = 2;
	r.temperature = 100;
	r.top_p = 1;
	r.min_p = 0;
	r.repeat_penalty = 0;
	r.presence_penalty = -100;
	r.frequency_penalty = 100;
	r.top_k = INT32_MAX;
	r.max_tokens = -1;
	for (int i = 0; i < WC_MAX_STOPS; i++) {
		memset(stop1024[i], 'a' + i, 1024);
		r.stops[i] = stop1024[i];
	}
	r.n_stops = WC_MAX_STOPS;
	p = pack_request(&r, &n);
	m = NULL;
	rc = wc_request_unpack(p, n, &u, &m, g_err, sizeof(g_err));
	CHECK(rc == 0, "raw prompt at the edges refused: %s", g_err);
	if (rc == 0) {
		CHECK(u.msgs == NULL && m == NULL && u.prompt_len == r.prompt_len &&
			      !memcmp(u.prompt, r.prompt, r.prompt_len),
		      "raw prompt differs");
		CHECK(u.parse_special == 1 && u.no_think == 1 && u.max_tokens == -1 && u.top_k == INT32_MAX &&
			      u.temperature == 100 && u.presence_penalty == -100 && u.frequency_penalty == 100,
		      "raw prompt fields: special %d no_think %d max %d", u.parse_special, u.no_think, u.max_tokens);
		CHECK(u.n_stops == 8 && strlen(u.stops[7]) == 1024 && u.stops[7][0] == 'h', "8 stops of 1024");
		wc_request_unpacked_free(&u, m);
	}
	expect_exact("request (raw prompt, edges)", dec_request, p, n);
	free(p);

	/* Each range check, once, with the error naming the field. The
	 * conversation is copied so e_role can edit its first role. */
	wc_msg conv[3];
	memcpy(conv, g_conv, sizeof(conv));
	{
		request_full(&r);
		r.msgs = conv;
		e_role(&r);
		p = pack_request(&r, &n);
		rc = run_copy(dec_request, p, n);
		CHECK(rc != 0 && strstr(g_err, "message role"), "role %d: rc %d '%s'", WC_ROLE_COUNT, rc, g_err);
		free(p);
	}
	static const struct {
		const char *what;
		void (*edit)(wc_request *);
		const char *field;
	} cases[] = {
		{ "temperature < 0", e_temp_lo, "temperature" },
		{ "temperature > 100", e_temp_hi, "temperature" },
		{ "temperature NaN", e_temp_nan, "temperature" },
		{ "top_p < 0", e_topp_lo, "top_p" },
		{ "top_p > 1", e_topp_hi, "top_p" },
		{ "top_p NaN", e_topp_nan, "top_p" },
		{ "min_p < 0", e_minp_lo, "min_p" },
		{ "min_p > 1", e_minp_hi, "min_p" },
		{ "min_p inf", e_minp_inf, "min_p" },
		{ "repeat_penalty < 0", e_rep_lo, "repeat_penalty" },
		{ "repeat_penalty > 100", e_rep_hi, "repeat_penalty" },
		{ "repeat_penalty NaN", e_rep_nan, "repeat_penalty" },
		{ "presence_penalty < -100", e_pres_lo, "presence_penalty" },
		{ "presence_penalty > 100", e_pres_hi, "presence_penalty" },
		{ "presence_penalty -inf", e_pres_ninf, "presence_penalty" },
		{ "frequency_penalty < -100", e_freq_lo, "frequency_penalty" },
		{ "frequency_penalty > 100", e_freq_hi, "frequency_penalty" },
		{ "frequency_penalty NaN", e_freq_nan, "frequency_penalty" },
		{ "top_k -1", e_topk, "top_k" },
		{ "top_k INT_MIN", e_topk_min, "top_k" },
		{ "repeat_last_n -1", e_lastn, "repeat_last_n" },
		{ "9 stops", e_nstops, "stop count" },
		{ "empty stop", e_stop_empty, "stop string" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		request_reject(cases[i].what, cases[i].edit, cases[i].field);

	/* A stop of 1025 bytes; a stop with a NUL byte (the packer uses
	 * strlen, so the byte is patched in: the last stop's bytes end the
	 * encoding). */
	static char stop1025[1026];
	memset(stop1025, 's', 1025);
	request_full(&r);
	r.stops[1] = stop1025;
	p = pack_request(&r, &n);
	rc = run_copy(dec_request, p, n);
	CHECK(rc != 0 && strstr(g_err, "stop string"), "stop of 1025 bytes: rc %d '%s'", rc, g_err);
	free(p);
	request_full(&r);
	r.stops[1] = "aXb";
	p = pack_request(&r, &n);
	expect_accept("stop aXb", dec_request, p, n);
	p[n - 2] = 0;
	rc = run_copy(dec_request, p, n);
	CHECK(rc != 0 && strstr(g_err, "stop string"), "stop with a NUL: rc %d '%s'", rc, g_err);
	free(p);

	/* Trailing bytes are named. */
	request_full(&r);
	p = pack_request(&r, &n);
	p = realloc(p, n + 1);
	p[n] = 0;
	rc = run_copy(dec_request, p, n + 1);
	CHECK(rc != 0 && strstr(g_err, "trailing"), "trailing byte: rc %d '%s'", rc, g_err);
	/* A cut inside the floats is named "truncated" (a missing float
	 * reads as 0, inside every range): the cut falls in presence_penalty
	 * (u32 count, 3 messages, 4 flags, 4 floats, 3 bytes). */
	size_t cut = 4 + (4 + 4 + 8) + (4 + 4 + 8) + (4 + 4 + 0) + 16 + 32 + 3;
	rc = run_copy(dec_request, p, cut);
	CHECK(rc != 0 && strstr(g_err, "truncated"), "cut in the floats: rc %d '%s'", rc, g_err);
	free(p);

	/* Message counts: more messages than bytes / 8 (cheap to claim, the
	 * allocation it would cost is refused first); over 2^20 with all the
	 * bytes present; exactly 2^20 (each message: role 0, empty text)
	 * accepted. */
	uint8_t few[4 + 8 + 64] = { 3, 0, 0, 0 };
	rc = run_copy(dec_request, few, 4 + 8);
	CHECK(rc != 0 && strstr(g_err, "message count"), "3 messages in 8 bytes: rc %d '%s'", rc, g_err);
	{
		size_t tail = 4 * 4 + 6 * 8 + 4 + 4 + 8 + 4 + 4;
		size_t nm = (size_t)1 << 20;
		size_t big = 4 + (nm + 1) * 8 + tail;
		uint8_t *b = calloc(1, big);
		put_le32(b, (uint32_t)nm + 1);
		CHECK(dec_request(b, big) != 0 && strstr(g_err, "message count"), "2^20+1 messages: '%s'", g_err);
		put_le32(b, (uint32_t)nm);
		CHECK(dec_request(b, big - 8) == 0, "2^20 empty messages refused: '%s'", g_err);
		free(b);
	}
	/* Text lengths over 64 MiB, with every byte present: the prompt and
	 * a message; exactly 64 MiB accepted. */
	{
		size_t tail = 4 * 4 + 6 * 8 + 4 + 4 + 8 + 4 + 4;
		size_t text = (size_t)64 << 20;
		size_t big = 4 + 4 + text + 1 + tail;
		uint8_t *b = calloc(1, big);
		put_le32(b, UINT32_MAX);
		put_le32(b + 4, (uint32_t)text + 1);
		CHECK(dec_request(b, big) != 0 && strstr(g_err, "prompt"), "prompt of 64 MiB + 1: '%s'", g_err);
		put_le32(b + 4, (uint32_t)text);
		CHECK(dec_request(b, big - 1) == 0, "prompt of 64 MiB refused: '%s'", g_err);
		/* one message: count 1, role, length */
		uint8_t *c = calloc(1, big + 4);
		put_le32(c, 1);
		put_le32(c + 4, WC_ROLE_USER);
		put_le32(c + 8, (uint32_t)text + 1);
		CHECK(dec_request(c, big + 4) != 0 && strstr(g_err, "message text"), "message of 64 MiB + 1: '%s'",
		      g_err);
		free(c);
		free(b);
	}
}

/* ---- 3b. wcproto: events, errors, info, bench results ---- */

static wc_event g_ev;
static int dec_event(const uint8_t *p, size_t n)
{
	return wc_event_unpack(p, n, &g_ev);
}

static void event_reject(const char *what, const wc_event *ev)
{
	ipc_wr w = wr_new();
	wc_event_pack(ev, &w);
	expect_reject(what, dec_event, w.buf, w.len);
}

static void test_event(void)
{
	g_case = "wc_event";
	static const char txt[] = "h\xc3\xa9llo\n\x01";
	static const wc_event_type tt[2] = { WC_EV_TEXT, WC_EV_REASONING };
	for (int k = 0; k < 2; k++) {
		wc_event ev = { .type = tt[k], .text = txt, .len = sizeof(txt) - 1 };
		ipc_wr w = wr_new();
		wc_event_pack(&ev, &w);
		/* In place: after run_copy, g_ev.text would point into freed
		 * memory (expect_exact runs the exact-size copies). */
		int rc = wc_event_unpack(w.buf, w.len, &g_ev);
		CHECK(rc == 0 && g_ev.type == tt[k] && g_ev.len == ev.len && !memcmp(g_ev.text, txt, ev.len),
		      "text event %d round trip (text passes unchanged: the broker re-validates it)", k);
		expect_exact(k ? "reasoning event" : "text event", dec_event, w.buf, w.len);
	}
	static const wc_event_type ot[2] = { WC_EV_PROGRESS, WC_EV_END };
	for (int k = 0; k < 2; k++) {
		wc_event ev = { .type = ot[k], .finish = WC_FINISH_CANCELLED, .prompt_tokens = 1000, .prefilled = 1000,
				.completion_tokens = 77, .prefill_s = 0.5, .decode_s = 1.25, .ttft_s = 0.625 };
		ipc_wr w = wr_new();
		wc_event_pack(&ev, &w);
		int rc = run_copy(dec_event, w.buf, w.len);
		CHECK(rc == 0 && g_ev.type == ot[k] && g_ev.finish == WC_FINISH_CANCELLED && g_ev.prompt_tokens == 1000 &&
			      g_ev.prefilled == 1000 && g_ev.completion_tokens == 77 && g_ev.prefill_s == 0.5 &&
			      g_ev.decode_s == 1.25 && g_ev.ttft_s == 0.625,
		      "event %d round trip", ot[k]);
		expect_exact(k ? "end event" : "progress event", dec_event, w.buf, w.len);
	}
	wc_event base = { .type = WC_EV_END, .finish = WC_FINISH_STOP, .prompt_tokens = 10, .prefilled = 10 };
	wc_event e;
	e = base, e.type = WC_EV_COUNT;
	event_reject("type WC_EV_COUNT", &e);
	e = base, e.type = (wc_event_type)0xffffffffu;
	event_reject("type 2^32-1", &e);
	e = base, e.finish = WC_FINISH_COUNT;
	event_reject("finish WC_FINISH_COUNT", &e);
	e = base, e.prefilled = 11;
	event_reject("prefilled > prompt_tokens", &e);
	e = base, e.prefill_s = -1e-9;
	event_reject("prefill_s < 0", &e);
	e = base, e.prefill_s = NAN;
	event_reject("prefill_s NaN", &e);
	e = base, e.decode_s = -1;
	event_reject("decode_s < 0", &e);
	e = base, e.decode_s = NAN;
	event_reject("decode_s NaN", &e);
	e = base, e.ttft_s = -1;
	event_reject("ttft_s < 0", &e);
	e = base, e.ttft_s = NAN;
	event_reject("ttft_s NaN", &e);
	/* Infinity is not a time (it passed ">= 0" before isfinite). */
	e = base, e.prefill_s = INFINITY;
	event_reject("prefill_s inf", &e);
	e = base, e.decode_s = INFINITY;
	event_reject("decode_s inf", &e);
	e = base, e.ttft_s = INFINITY;
	event_reject("ttft_s inf", &e);
	e = base, e.ttft_s = -INFINITY;
	event_reject("ttft_s -inf", &e);
	/* What real workers send is accepted: all times 0 (a progress event,
	 * an end before any token), and the largest finite double. */
	{
		ipc_wr w = wr_new();
		wc_event_pack(&base, &w);
		expect_accept("end event with times 0", dec_event, w.buf, w.len);
		e = base, e.type = WC_EV_PROGRESS, e.prefilled = 3;
		w = wr_new();
		wc_event_pack(&e, &w);
		expect_accept("progress event (times 0)", dec_event, w.buf, w.len);
		e = base, e.decode_s = DBL_MAX;
		w = wr_new();
		wc_event_pack(&e, &w);
		expect_accept("decode_s DBL_MAX", dec_event, w.buf, w.len);
	}
	/* text: at most IPC_MAX_PAYLOAD bytes (checked by the decoder, which
	 * is a function over bytes and does not rely on the packet size) */
	{
		size_t big = 8 + IPC_MAX_PAYLOAD + 1;
		uint8_t *b = calloc(1, big);
		put_le32(b, WC_EV_TEXT);
		put_le32(b + 4, IPC_MAX_PAYLOAD + 1);
		expect_reject("text over IPC_MAX_PAYLOAD", dec_event, b, big);
		put_le32(b + 4, IPC_MAX_PAYLOAD);
		expect_accept("text of IPC_MAX_PAYLOAD", dec_event, b, big - 1);
		free(b);
	}
}

static wc_error g_er;
static int dec_error(const uint8_t *p, size_t n)
{
	return wc_error_unpack(p, n, &g_er);
}

/* kind, prompt_tokens, ctx, msg as given (no strnlen). */
static ipc_wr error_wire(uint32_t kind, int32_t ctx, const void *msg, size_t len)
{
	ipc_wr w = wr_hand();
	ipc_put_u32(&w, kind);
	ipc_put_u64(&w, 4097);
	ipc_put_u32(&w, (uint32_t)ctx);
	ipc_put_bytes(&w, msg, len);
	return w;
}

static void test_error(void)
{
	g_case = "wc_error";
	wc_error e = { .kind = WC_ERR_CONTEXT, .prompt_tokens = 4097, .ctx = 4096 };
	snprintf(e.msg, sizeof(e.msg), "prompt of 4097 tokens does not fit 4096 (\xc3\xa9)");
	ipc_wr w = wr_new();
	wc_error_pack(&e, &w);
	int rc = run_copy(dec_error, w.buf, w.len);
	CHECK(rc == 0 && g_er.kind == WC_ERR_CONTEXT && g_er.prompt_tokens == 4097 && g_er.ctx == 4096 &&
		      !strcmp(g_er.msg, e.msg),
	      "round trip: '%s'", g_er.msg);
	expect_exact("error", dec_error, w.buf, w.len);
	/* The hand-built wire form is what the packer writes. */
	ipc_wr h = error_wire(WC_ERR_CONTEXT, 4096, e.msg, strlen(e.msg));
	CHECK(h.len == w.len && !memcmp(h.buf, w.buf, w.len), "wire layout differs from wc_error_pack");

	w = error_wire(WC_ERR_NONE, 0, "x", 1);
	expect_reject("kind WC_ERR_NONE", dec_error, w.buf, w.len);
	w = error_wire(WC_ERR_COUNT, 0, "x", 1);
	expect_reject("kind WC_ERR_COUNT", dec_error, w.buf, w.len);
	w = error_wire(WC_ERR_WORKER, -1, "x", 1);
	expect_reject("ctx -1", dec_error, w.buf, w.len);
	w = error_wire(WC_ERR_WORKER, INT32_MIN, "x", 1);
	expect_reject("ctx INT_MIN", dec_error, w.buf, w.len);
	/* message: 511 bytes fit msg[512], 512 do not */
	char longm[512];
	memset(longm, 'm', sizeof(longm));
	w = error_wire(WC_ERR_WORKER, 0, longm, 511);
	rc = run_copy(dec_error, w.buf, w.len);
	CHECK(rc == 0 && strlen(g_er.msg) == 511, "message of 511 bytes: rc %d", rc);
	w = error_wire(WC_ERR_WORKER, 0, longm, 512);
	expect_reject("message of 512 bytes", dec_error, w.buf, w.len);
	/* Sanitised, not refused: C0 controls, DEL and NUL become '?'; so does
	 * a lone continuation byte. */
	static const char dirty[] = "a\x1b[31mb\x7f\n\0\xc3\xa9z\x1f ~\x80";
	static const char clean[] = "a?[31mb???\xc3\xa9z? ~?";
	w = error_wire(WC_ERR_MODEL, 0, dirty, sizeof(dirty) - 1);
	rc = run_copy(dec_error, w.buf, w.len);
	CHECK(rc == 0 && !strcmp(g_er.msg, clean), "sanitised message: rc %d '%s'", rc, g_er.msg);
	/* Bytes >= 0x80: well-formed UTF-8 stays unless it encodes a C1
	 * control (U+0080..U+009F: U+009B is CSI, read by a terminal like
	 * ESC '['), one '?' each; every byte that starts no well-formed
	 * character (RFC 3629 §4: overlong, surrogate, > U+10FFFF, truncated
	 * at the end of the field) is one '?'. */
	static const struct {
		const char *in, *out;
	} u8[] = {
		{ "\xc2\x9b" "31mred", "?31mred" },             /* CSI */
		{ "\xc2\x80|\xc2\x85|\xc2\x9f", "?|?|?" },     /* C1: first, NEL, last */
		{ "\xc2\xa0|\xc2\xbf", "\xc2\xa0|\xc2\xbf" },  /* U+00A0, U+00BF: not controls */
		{ "\xc0\xaf|\xc1\xbf", "??|??" },               /* overlong 2-byte */
		{ "\xe0\x80\xaf|\xe0\x9f\xbf", "???|???" },   /* overlong 3-byte */
		{ "\xf0\x80\x80\xaf|\xf0\x8f\xbf\xbf", "????|????" }, /* overlong 4-byte */
		{ "\xed\xa0\x80|\xed\xbf\xbf", "???|???" },   /* surrogates U+D800, U+DFFF */
		{ "\xed\x9f\xbf|\xee\x80\x80", "\xed\x9f\xbf|\xee\x80\x80" }, /* U+D7FF, U+E000 */
		{ "\xf4\x90\x80\x80|\xf5\x80\x80\x80", "????|????" }, /* > U+10FFFF */
		{ "\xf4\x8f\xbf\xbf|\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf|\xf0\x9f\x98\x80" },
		{ "\xfe\xff|\xe2(", "??|?(" },                  /* never UTF-8; a bad lead resyncs */
		{ "\xe2\x80\xa8\xe2\x82\xac", "\xe2\x80\xa8\xe2\x82\xac" }, /* U+2028, euro sign */
		{ "ok\xe2\x82", "ok??" },                       /* truncated at the end */
		{ "ok\xf0\x9f\x98", "ok???" },
		{ "\xc3", "?" },
	};
	for (size_t k = 0; k < sizeof(u8) / sizeof(u8[0]); k++) {
		w = error_wire(WC_ERR_MODEL, 0, u8[k].in, strlen(u8[k].in));
		rc = run_copy(dec_error, w.buf, w.len);
		CHECK(rc == 0 && !strcmp(g_er.msg, u8[k].out), "UTF-8 case %zu: rc %d '%s'", k, rc, g_er.msg);
	}
	/* 511 bytes ending in the first bytes of a character: the field holds
	 * what it is sent, so the cut character is '?' and nothing more. */
	memset(longm, 'm', sizeof(longm));
	memcpy(longm + 508, "\xf0\x9f\x98", 3);
	w = error_wire(WC_ERR_WORKER, 0, longm, 511);
	rc = run_copy(dec_error, w.buf, w.len);
	CHECK(rc == 0 && strlen(g_er.msg) == 511 && !strcmp(g_er.msg + 508, "???"), "cut 4-byte character: rc %d",
	      rc);
}

static wc_info g_in;
static int dec_info(const uint8_t *p, size_t n)
{
	return wc_info_unpack(p, n, &g_in);
}

/* The wire form of an info with explicit text lengths and the seven
 * counts in v[]. */
typedef struct {
	const char *s[4]; /* model_type, chat_format, chat_note, device */
	size_t l[4];
	uint32_t chat_ok;
	uint32_t v[7];
} info_raw;

static ipc_wr info_wire(const info_raw *ir)
{
	ipc_wr w = wr_hand();
	ipc_put_bytes(&w, ir->s[0], ir->l[0]);
	ipc_put_bytes(&w, ir->s[1], ir->l[1]);
	ipc_put_u32(&w, ir->chat_ok);
	ipc_put_bytes(&w, ir->s[2], ir->l[2]);
	for (int k = 0; k < 7; k++)
		ipc_put_u32(&w, ir->v[k]);
	ipc_put_u64(&w, 123456789012ull);
	ipc_put_u64(&w, 98765432ull);
	ipc_put_bytes(&w, ir->s[3], ir->l[3]);
	return w;
}

static void test_info(void)
{
	g_case = "wc_info";
	wc_info i;
	memset(&i, 0, sizeof(i));
	snprintf(i.model_type, sizeof(i.model_type), "qwen3");
	snprintf(i.chat_format, sizeof(i.chat_format), "chatml");
	i.chat_ok = 1;
	snprintf(i.chat_note, sizeof(i.chat_note), "recognised");
	i.vocab = 151936, i.ctx = 4096, i.max_pos = 40960, i.n_layers = 28, i.hidden = 1024, i.n_heads = 16;
	i.n_kv_heads = 8;
	i.weight_bytes = 123456789012ull;
	i.decode_bytes = 98765432ull;
	i.load_s = 1.5;
	snprintf(i.device, sizeof(i.device), "cpu (avx2, 8 threads)");
	ipc_wr w = wr_new();
	wc_info_pack(&i, &w);
	int rc = run_copy(dec_info, w.buf, w.len);
	CHECK(rc == 0 && !strcmp(g_in.model_type, "qwen3") && !strcmp(g_in.chat_format, "chatml") && g_in.chat_ok == 1 &&
		      !strcmp(g_in.chat_note, "recognised") && g_in.vocab == 151936 && g_in.ctx == 4096 &&
		      g_in.max_pos == 40960 && g_in.n_layers == 28 && g_in.hidden == 1024 && g_in.n_heads == 16 &&
		      g_in.n_kv_heads == 8 && g_in.weight_bytes == i.weight_bytes && g_in.decode_bytes == i.decode_bytes &&
		      !strcmp(g_in.device, i.device),
	      "round trip");
	/* load_s is the broker's own measurement: not on the wire. */
	CHECK(g_in.load_s == 0, "load_s travelled: %g", g_in.load_s);
	expect_exact("info", dec_info, w.buf, w.len);
	info_raw ir = { { "qwen3", "chatml", "recognised", "cpu (avx2, 8 threads)" },
			{ 5, 6, 10, 21 },
			1,
			{ 151936, 4096, 40960, 28, 1024, 16, 8 } };
	ipc_wr h = info_wire(&ir);
	CHECK(h.len == w.len && !memcmp(h.buf, w.buf, w.len), "wire layout differs from wc_info_pack");

	/* Each of the seven counts: 0 and 2^30 + 1 refused; 2^30 accepted. */
	static const char *names[7] = { "vocab", "ctx", "max_pos", "n_layers", "hidden", "n_heads", "n_kv_heads" };
	for (int k = 0; k < 7; k++) {
		info_raw e = ir;
		char what[64];
		e.v[k] = 0;
		w = info_wire(&e);
		snprintf(what, sizeof(what), "%s 0", names[k]);
		expect_reject(what, dec_info, w.buf, w.len);
		e.v[k] = (1u << 30) + 1;
		w = info_wire(&e);
		snprintf(what, sizeof(what), "%s 2^30+1", names[k]);
		expect_reject(what, dec_info, w.buf, w.len);
		e.v[k] = 1u << 30;
		w = info_wire(&e);
		snprintf(what, sizeof(what), "%s 2^30", names[k]);
		expect_accept(what, dec_info, w.buf, w.len);
	}
	/* Each text: one byte over its field refused, the most it holds
	 * accepted, control bytes replaced by '?'. */
	static const size_t caps[4] = { sizeof(i.model_type), sizeof(i.chat_format), sizeof(i.chat_note),
					sizeof(i.device) };
	static const char *tnames[4] = { "model_type", "chat_format", "chat_note", "device" };
	char fill[256];
	memset(fill, 'x', sizeof(fill));
	for (int k = 0; k < 4; k++) {
		info_raw e = ir;
		char what[64];
		e.s[k] = fill;
		e.l[k] = caps[k];
		w = info_wire(&e);
		snprintf(what, sizeof(what), "%s of %zu bytes", tnames[k], caps[k]);
		expect_reject(what, dec_info, w.buf, w.len);
		e.l[k] = caps[k] - 1;
		w = info_wire(&e);
		snprintf(what, sizeof(what), "%s of %zu bytes", tnames[k], caps[k] - 1);
		expect_accept(what, dec_info, w.buf, w.len);
		e.s[k] = "a\tb\x1b\x7f\x1f ~";
		e.l[k] = 8;
		w = info_wire(&e);
		rc = run_copy(dec_info, w.buf, w.len);
		const char *got = k == 0 ? g_in.model_type : k == 1 ? g_in.chat_format : k == 2 ? g_in.chat_note : g_in.device;
		CHECK(rc == 0 && !strcmp(got, "a?b??? ~"), "%s sanitised: rc %d '%s'", tnames[k], rc, got);
		/* C1 CSI, a surrogate and a truncated character too (the
		 * cleaner is wc_error's: its cases are above). */
		e.s[k] = "\xc2\x9b" "2J\xed\xa0\x80\xc3\xa9\xe2\x82";
		e.l[k] = strlen(e.s[k]);
		w = info_wire(&e);
		rc = run_copy(dec_info, w.buf, w.len);
		got = k == 0 ? g_in.model_type : k == 1 ? g_in.chat_format : k == 2 ? g_in.chat_note : g_in.device;
		CHECK(rc == 0 && !strcmp(got, "?2J???\xc3\xa9??"), "%s UTF-8 sanitised: rc %d '%s'", tnames[k], rc, got);
	}
	/* chat_ok other than 0/1 reads as 1. */
	info_raw e = ir;
	e.chat_ok = 0x80000000u;
	w = info_wire(&e);
	rc = run_copy(dec_info, w.buf, w.len);
	CHECK(rc == 0 && g_in.chat_ok == 1, "chat_ok 2^31: rc %d, %d", rc, g_in.chat_ok);
}

static wc_bench_res g_br;
static int dec_bench(const uint8_t *p, size_t n)
{
	return wc_bench_res_unpack(p, n, &g_br);
}

static void bench_full(wc_bench_res *b)
{
	memset(b, 0, sizeof(*b));
	snprintf(b->kernels, sizeof(b->kernels), "avx512-vnni");
	b->threads = 16;
	b->prefill_x = WC_PREFILL_X_F16;
	b->prefill_s = 0.25;
	b->decode_short_s = 2.0;
	b->decode_long_s = 3.0;
	b->mem_bw = 1e11;
	b->decode_bytes = 700000000ull;
	b->peak_rss_mb = 812.5;
	for (int c = 0; c < WC_PROF_COUNT; c++) {
		b->prof_short.s[c] = 0.01 * (c + 1);
		b->prof_short.bytes[c] = 1000u * (unsigned)(c + 1);
		b->prof_long.s[c] = 0.02 * (c + 1);
		b->prof_long.bytes[c] = 3000u * (unsigned)(c + 1);
	}
}

static void bench_reject(const char *what, const wc_bench_res *b)
{
	ipc_wr w = wr_new();
	wc_bench_res_pack(b, &w);
	expect_reject(what, dec_bench, w.buf, w.len);
}

static void test_bench(void)
{
	g_case = "wc_bench_res";
	wc_bench_res b;
	bench_full(&b);
	ipc_wr w = wr_new();
	wc_bench_res_pack(&b, &w);
	int rc = run_copy(dec_bench, w.buf, w.len);
	CHECK(rc == 0 && !memcmp(&g_br, &b, sizeof(b)), "round trip (rc %d)", rc);
	expect_exact("bench result", dec_bench, w.buf, w.len);

	wc_bench_res e;
#define BREJ(what, stmt) (bench_full(&e), (stmt), bench_reject(what, &e))
	BREJ("threads 0", e.threads = 0);
	BREJ("threads -1", e.threads = -1);
	BREJ("prefill_x COUNT", e.prefill_x = WC_PREFILL_X_COUNT);
	BREJ("prefill_s 0", e.prefill_s = 0);
	BREJ("prefill_s NaN", e.prefill_s = NAN);
	/* with that breakdown's times all 0, so only the whole's own check
	 * can refuse it */
	BREJ("decode_short_s 0", (memset(e.prof_short.s, 0, sizeof(e.prof_short.s)), e.decode_short_s = 0));
	BREJ("decode_short_s -1", e.decode_short_s = -1);
	BREJ("decode_short_s NaN", (memset(e.prof_short.s, 0, sizeof(e.prof_short.s)), e.decode_short_s = NAN));
	BREJ("decode_long_s 0", (memset(e.prof_long.s, 0, sizeof(e.prof_long.s)), e.decode_long_s = 0));
	BREJ("decode_long_s NaN", (memset(e.prof_long.s, 0, sizeof(e.prof_long.s)), e.decode_long_s = NAN));
	/* and a breakdown of zeros is valid */
	bench_full(&e);
	memset(e.prof_short.s, 0, sizeof(e.prof_short.s));
	w = wr_new();
	wc_bench_res_pack(&e, &w);
	expect_accept("short breakdown all 0", dec_bench, w.buf, w.len);
	BREJ("mem_bw < 0", e.mem_bw = -1);
	BREJ("mem_bw NaN", e.mem_bw = NAN);
	BREJ("decode_bytes 0", e.decode_bytes = 0);
	BREJ("peak_rss_mb < 0", e.peak_rss_mb = -0.5);
	BREJ("peak_rss_mb NaN", e.peak_rss_mb = NAN);
	BREJ("short prof < 0", e.prof_short.s[3] = -1e-6);
	BREJ("short prof NaN", e.prof_short.s[0] = NAN);
	BREJ("short prof > decode_short_s", e.prof_short.s[WC_PROF_COUNT - 1] = 2.0001);
	BREJ("long prof < 0", e.prof_long.s[5] = -1);
	BREJ("long prof NaN", e.prof_long.s[WC_PROF_COUNT - 1] = NAN);
	BREJ("long prof > decode_long_s", e.prof_long.s[0] = 3.5);
	/* Infinity passes "> 0" and ">= 0": refused by isfinite. A whole of
	 * inf would also admit a breakdown of inf. */
	BREJ("prefill_s inf", e.prefill_s = INFINITY);
	BREJ("decode_short_s inf", e.decode_short_s = INFINITY);
	BREJ("decode_long_s inf", e.decode_long_s = INFINITY);
	BREJ("decode_long_s and a long prof inf", (e.decode_long_s = INFINITY, e.prof_long.s[2] = INFINITY));
	BREJ("mem_bw inf", e.mem_bw = INFINITY);
	BREJ("peak_rss_mb inf", e.peak_rss_mb = INFINITY);
	/* a long-context category within decode_long_s but over
	 * decode_short_s passes: each breakdown against its own whole */
	bench_full(&e);
	e.prof_long.s[0] = 2.5;
	w = wr_new();
	wc_bench_res_pack(&e, &w);
	expect_accept("long prof between the two wholes", dec_bench, w.buf, w.len);
	/* mem_bw 0 is allowed (not measured) */
	bench_full(&e);
	e.mem_bw = 0;
	w = wr_new();
	wc_bench_res_pack(&e, &w);
	expect_accept("mem_bw 0", dec_bench, w.buf, w.len);
#undef BREJ
	/* kernels: 15 bytes fit, 16 do not; control bytes replaced. The
	 * packed tail after the kernels field is spliced after a hand-built
	 * one. */
	bench_full(&b);
	w = wr_new();
	wc_bench_res_pack(&b, &w);
	size_t klen = strlen(b.kernels), tail = w.len - 4 - klen;
	static uint8_t tailb[1024];
	memcpy(tailb, w.buf + 4 + klen, tail);
	static const struct {
		const char *s;
		size_t n;
		int ok;
		const char *want;
	} ks[] = { { "0123456789abcdef", 16, 0, NULL },
		   { "0123456789abcde", 15, 1, "0123456789abcde" },
		   { "av\x1bx\n", 5, 1, "av?x?" } };
	for (size_t k = 0; k < sizeof(ks) / sizeof(ks[0]); k++) {
		ipc_wr x = wr_new();
		ipc_put_bytes(&x, ks[k].s, ks[k].n);
		ipc_put_raw(&x, tailb, tail);
		rc = run_copy(dec_bench, x.buf, x.len);
		if (ks[k].ok)
			CHECK(rc == 0 && !strcmp(g_br.kernels, ks[k].want), "kernels %zu: rc %d '%s'", k, rc, g_br.kernels);
		else
			CHECK(rc != 0, "kernels of %zu bytes accepted", ks[k].n);
	}
}

/* ---- 3c. fproto ---- */

static fetch_req g_fr;
static int dec_freq(const uint8_t *p, size_t n)
{
	return fetch_req_decode(&g_fr, p, n);
}

/* The wire form of a request: version, flags, offset, max, four strings
 * (explicit lengths), port. */
typedef struct {
	uint32_t version, flags;
	const char *s[4];
	size_t l[4];
	uint32_t port;
} freq_raw;

static ipc_wr freq_wire(const freq_raw *f)
{
	ipc_wr w = wr_hand();
	ipc_put_u32(&w, f->version);
	ipc_put_u32(&w, f->flags);
	ipc_put_u64(&w, 1234567);
	ipc_put_u64(&w, 1ull << 40);
	for (int k = 0; k < 4; k++)
		ipc_put_bytes(&w, f->s[k], f->l[k]);
	ipc_put_u32(&w, f->port);
	return w;
}

static void test_fetch_req(void)
{
	g_case = "fetch_req";
	static fetch_req r;
	memset(&r, 0, sizeof(r));
	r.flags = FETCH_F_RESUME | FETCH_F_TOKEN;
	r.offset = 1234567;
	r.max_bytes = 1ull << 40;
	snprintf(r.url, sizeof(r.url), "https://huggingface.co/x/y/resolve/main/model.safetensors");
	snprintf(r.if_range, sizeof(r.if_range), "\"abc123\"");
	snprintf(r.token, sizeof(r.token), "hf_secret");
	snprintf(r.token_host, sizeof(r.token_host), "huggingface.co");
	r.token_port = 443;
	ipc_wr w = wr_new();
	CHECK(fetch_req_encode(&r, &w) == 0, "encode");
	int rc = run_copy(dec_freq, w.buf, w.len);
	CHECK(rc == 0 && !memcmp(&g_fr, &r, sizeof(r)), "round trip (rc %d)", rc);
	expect_exact("fetch request", dec_freq, w.buf, w.len);
	freq_raw fr = { FETCH_PROTO_VERSION, r.flags, { r.url, r.if_range, r.token, r.token_host },
			{ strlen(r.url), strlen(r.if_range), strlen(r.token), strlen(r.token_host) }, 443 };
	ipc_wr h = freq_wire(&fr);
	CHECK(h.len == w.len && !memcmp(h.buf, w.buf, w.len), "wire layout differs from fetch_req_encode");

	freq_raw e;
	e = fr, e.version = 0;
	h = freq_wire(&e);
	expect_reject("version 0", dec_freq, h.buf, h.len);
	e = fr, e.version = FETCH_PROTO_VERSION + 1;
	h = freq_wire(&e);
	expect_reject("version 2", dec_freq, h.buf, h.len);
	e = fr, e.flags = 4;
	h = freq_wire(&e);
	expect_reject("unknown flag 4", dec_freq, h.buf, h.len);
	e = fr, e.flags = 0x80000000u | FETCH_F_RESUME;
	h = freq_wire(&e);
	expect_reject("unknown flag 2^31", dec_freq, h.buf, h.len);
	e = fr, e.port = 65536;
	h = freq_wire(&e);
	expect_reject("port 65536", dec_freq, h.buf, h.len);
	e = fr, e.port = 65535;
	h = freq_wire(&e);
	rc = run_copy(dec_freq, h.buf, h.len);
	CHECK(rc == 0 && g_fr.token_port == 65535, "port 65535: rc %d", rc);
	/* Each string: one byte over its field, and one NUL inside. */
	static const size_t caps[4] = { FETCH_URL_MAX, HTTP1_ETAG_MAX, sizeof(r.token), FETCH_HOST_MAX + 1 };
	static const char *names[4] = { "url", "if_range", "token", "token_host" };
	static char fill[FETCH_URL_MAX + 1];
	for (int k = 0; k < 4; k++) {
		char what[64];
		memset(fill, 'u', sizeof(fill));
		e = fr, e.s[k] = fill, e.l[k] = caps[k];
		h = freq_wire(&e);
		snprintf(what, sizeof(what), "%s of %zu bytes", names[k], caps[k]);
		expect_reject(what, dec_freq, h.buf, h.len);
		e.l[k] = caps[k] - 1;
		h = freq_wire(&e);
		snprintf(what, sizeof(what), "%s of %zu bytes", names[k], caps[k] - 1);
		expect_accept(what, dec_freq, h.buf, h.len);
		fill[3] = 0;
		e.l[k] = 8;
		h = freq_wire(&e);
		snprintf(what, sizeof(what), "%s with a NUL", names[k]);
		expect_reject(what, dec_freq, h.buf, h.len);
	}
}

static fetch_event g_fe;
static int dec_fevent(const uint8_t *p, size_t n)
{
	return fetch_event_decode(&g_fe, p, n);
}

static fetch_done g_fd;
static int dec_fdone(const uint8_t *p, size_t n)
{
	return fetch_done_decode(&g_fd, p, n);
}

static uint32_t g_fk, g_fs;
static char g_fmsg[1100];
static size_t g_fmsglen = sizeof(g_fmsg);
static int dec_ferror(const uint8_t *p, size_t n)
{
	return fetch_error_decode(&g_fk, &g_fs, g_fmsg, g_fmsglen, p, n);
}

static ipc_wr fevent_wire(uint32_t kind, uint32_t status, uint64_t start, uint64_t total, uint64_t done,
			  const char *etag)
{
	ipc_wr w = wr_hand();
	ipc_put_u32(&w, kind);
	ipc_put_u32(&w, status);
	ipc_put_u64(&w, start);
	ipc_put_u64(&w, total);
	ipc_put_u64(&w, done);
	ipc_put_bytes(&w, etag, strlen(etag));
	return w;
}

/* The numbers of an event, against what fetcher/fetcher.c get_once sends:
 * HEAD once (done 0), then PROGRESS (done = bytes in the file); status 200
 * (from byte 0) or 206 (a resume, from the partial file's size > 0);
 * total 0 when unknown (chunked 200, Content-Range ".../" "*"), else
 * start <= total and done <= total. The ETag goes back as If-Range:
 * printable ASCII only. */
static void fevent_numbers(void)
{
	enum { H = FETCH_EV_HEAD, P = FETCH_EV_PROGRESS };
	static const struct {
		uint32_t kind, status;
		uint64_t start, total, done;
		const char *etag;
		int ok;
		const char *what;
	} c[] = {
		{ H, 200, 0, 0, 0, "", 1, "200, total unknown, no etag" },
		{ H, 200, 0, 5000, 0, "\"x\"", 1, "200 of 5000" },
		{ H, 200, 0, UINT64_MAX, 0, "\"x\"", 1, "200 of 2^64-1" },
		{ H, 206, 1000, 0, 0, "\"x\"", 1, "206 from 1000, total '*'" },
		{ H, 206, 1000, 5000, 0, "W/\"a b\"", 1, "206 from 1000 of 5000, etag with a space" },
		{ P, 200, 0, 0, 123456789, "", 1, "progress, total unknown" },
		{ P, 206, 1000, 5000, 5000, "", 1, "progress done == total" },
		{ P, 206, 1000, 0, 1000, "", 1, "progress done == start, total unknown" },
		{ H, 0, 0, 0, 0, "", 0, "status 0" },
		{ H, 100, 0, 0, 0, "", 0, "status 100" },
		{ H, 204, 0, 0, 0, "", 0, "status 204" },
		{ H, 302, 0, 0, 0, "", 0, "status 302 (redirects are followed, not reported)" },
		{ H, 404, 0, 0, 0, "", 0, "status 404 (an error, not an event)" },
		{ H, 599, 0, 0, 0, "", 0, "status 599" },
		{ H, UINT32_MAX, 0, 0, 0, "", 0, "status 2^32-1" },
		{ P, 404, 0, 0, 0, "", 0, "progress status 404" },
		{ H, 200, 1, 5000, 0, "", 0, "200 not from byte 0" },
		{ H, 206, 0, 5000, 0, "", 0, "206 from byte 0" },
		{ H, 206, 5001, 5000, 0, "", 0, "start > total" },
		{ H, 206, 1000, 5000, 5001, "", 0, "head done > total" },
		{ P, 200, 0, 5000, 5001, "", 0, "progress done > total" },
		{ P, 206, 1000, 5000, UINT64_MAX, "", 0, "progress done 2^64-1 of 5000" },
		{ P, 206, 1000, 5000, 999, "", 0, "progress done < start" },
		{ H, 200, 0, 0, 0, "\"a\x1b[2J\"", 0, "etag with ESC" },
		{ H, 200, 0, 0, 0, "\"a\tb\"", 0, "etag with a tab" },
		{ H, 200, 0, 0, 0, "\"a\nb\"", 0, "etag with a newline" },
		{ H, 200, 0, 0, 0, "\"a\x7f\"", 0, "etag with DEL" },
		{ P, 200, 0, 0, 0, "\"\xc2\x9b\"", 0, "etag with C1 CSI" },
		{ H, 200, 0, 0, 0, "\"\xc3\xa9\"", 0, "etag with UTF-8 (not printable ASCII)" },
	};
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		ipc_wr w = fevent_wire(c[k].kind, c[k].status, c[k].start, c[k].total, c[k].done, c[k].etag);
		if (c[k].ok) {
			int rc = run_copy(dec_fevent, w.buf, w.len);
			CHECK(rc == 0 && g_fe.status == c[k].status && g_fe.start == c[k].start && g_fe.total == c[k].total &&
				      g_fe.done == c[k].done && !strcmp(g_fe.etag, c[k].etag),
			      "%s: rc %d", c[k].what, rc);
		} else {
			expect_reject(c[k].what, dec_fevent, w.buf, w.len);
		}
	}
}

static ipc_wr fdone_wire(uint32_t status, uint32_t redirects, const char *url, const char *etag)
{
	ipc_wr w = wr_hand();
	ipc_put_u32(&w, status);
	ipc_put_u64(&w, 5000);
	ipc_put_u32(&w, redirects);
	ipc_put_bytes(&w, url, strlen(url));
	ipc_put_bytes(&w, etag, strlen(etag));
	return w;
}

/* The done reply, against fetcher.c: status 200 or 206 (anything else
 * ends as an error), at most FETCH_MAX_REDIRECTS redirects, the final URL
 * as fetch_url_format writes it ("https://", no space or control byte),
 * the ETag printable ASCII. */
static void fdone_rules(void)
{
	static const struct {
		uint32_t status, redirects;
		const char *url, *etag;
		int ok;
		const char *what;
	} c[] = {
		{ 206, FETCH_MAX_REDIRECTS, "https://cdn.example:8443/a?b=%20c~", "W/\"a b\"", 1, "206, 5 redirects" },
		{ 200, 0, "https://h/", "", 1, "200, no etag" },
		{ 0, 0, "https://h/", "", 0, "status 0" },
		{ 201, 0, "https://h/", "", 0, "status 201" },
		{ 404, 0, "https://h/", "", 0, "status 404" },
		{ UINT32_MAX, 0, "https://h/", "", 0, "status 2^32-1" },
		{ 200, FETCH_MAX_REDIRECTS + 1, "https://h/", "", 0, "6 redirects" },
		{ 200, UINT32_MAX, "https://h/", "", 0, "2^32-1 redirects" },
		{ 200, 0, "", "", 0, "empty url" },
		{ 200, 0, "http://h/", "", 0, "http:// url" },
		{ 200, 0, "file:///etc/passwd", "", 0, "file:// url" },
		{ 200, 0, "https://h/a b", "", 0, "url with a space" },
		{ 200, 0, "https://h/\x1b]8;;x\x07", "", 0, "url with ESC and BEL" },
		{ 200, 0, "https://h/\t", "", 0, "url with a tab" },
		{ 200, 0, "https://h/\x7f", "", 0, "url with DEL" },
		{ 200, 0, "https://h/\xc2\x9b", "", 0, "url with C1 CSI" },
		{ 200, 0, "https://h/\xc3\xa9", "", 0, "url with UTF-8" },
		{ 200, 0, "https://h/", "\"\x1b[0m\"", 0, "etag with ESC" },
		{ 200, 0, "https://h/", "\"\xc3\xa9\"", 0, "etag with UTF-8" },
	};
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		ipc_wr w = fdone_wire(c[k].status, c[k].redirects, c[k].url, c[k].etag);
		if (c[k].ok) {
			int rc = run_copy(dec_fdone, w.buf, w.len);
			CHECK(rc == 0 && g_fd.status == c[k].status && g_fd.redirects == c[k].redirects &&
				      !strcmp(g_fd.final_url, c[k].url) && !strcmp(g_fd.etag, c[k].etag),
			      "%s: rc %d", c[k].what, rc);
		} else {
			expect_reject(c[k].what, dec_fdone, w.buf, w.len);
		}
	}
}

static void test_fetch_replies(void)
{
	g_case = "fetch_event";
	fetch_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.kind = FETCH_EV_HEAD, ev.status = 206, ev.start = 1000, ev.total = 5000, ev.done = 1000;
	snprintf(ev.etag, sizeof(ev.etag), "W/\"e\"");
	ipc_wr w = wr_new();
	fetch_event_encode(&ev, &w);
	int rc = run_copy(dec_fevent, w.buf, w.len);
	CHECK(rc == 0 && !memcmp(&g_fe, &ev, sizeof(ev)), "round trip (rc %d)", rc);
	expect_exact("fetch event", dec_fevent, w.buf, w.len);
	ev.kind = FETCH_EV_PROGRESS;
	w = wr_new();
	fetch_event_encode(&ev, &w);
	expect_exact("fetch progress event", dec_fevent, w.buf, w.len);
	static const uint32_t kinds[3] = { 0, 3, UINT32_MAX };
	for (int k = 0; k < 3; k++) {
		ev.kind = kinds[k];
		w = wr_new();
		fetch_event_encode(&ev, &w);
		char what[32];
		snprintf(what, sizeof(what), "event kind %u", kinds[k]);
		expect_reject(what, dec_fevent, w.buf, w.len);
	}
	fevent_numbers();
	/* etag: 255 bytes fit, 256 do not, no NUL. */
	static char tag[HTTP1_ETAG_MAX + 1];
	memset(tag, 'e', sizeof(tag));
	for (int k = 0; k < 3; k++) {
		w = wr_new();
		ipc_put_u32(&w, FETCH_EV_HEAD);
		ipc_put_u32(&w, 200);
		ipc_put_u64(&w, 0);
		ipc_put_u64(&w, 0);
		ipc_put_u64(&w, 0);
		if (k == 2)
			tag[1] = 0;
		ipc_put_bytes(&w, tag, k == 0 ? HTTP1_ETAG_MAX : HTTP1_ETAG_MAX - 1);
		if (k == 1)
			expect_accept("etag of 255 bytes", dec_fevent, w.buf, w.len);
		else
			expect_reject(k ? "etag with a NUL" : "etag of 256 bytes", dec_fevent, w.buf, w.len);
	}

	g_case = "fetch_done";
	static fetch_done d;
	memset(&d, 0, sizeof(d));
	d.status = 200, d.size = 5000, d.redirects = 3;
	snprintf(d.final_url, sizeof(d.final_url), "https://cdn-lfs.hf.co/repos/ab/cd?X-Amz=1");
	snprintf(d.etag, sizeof(d.etag), "\"sha\"");
	w = wr_new();
	fetch_done_encode(&d, &w);
	rc = run_copy(dec_fdone, w.buf, w.len);
	CHECK(rc == 0 && !memcmp(&g_fd, &d, sizeof(d)), "round trip (rc %d)", rc);
	expect_exact("fetch done", dec_fdone, w.buf, w.len);
	fdone_rules();
	static char url[FETCH_URL_MAX + 1];
	memset(url, 'u', sizeof(url));
	memcpy(url, "https://", 8);
	static const struct {
		size_t ul, el;
		int nul_url, nul_tag, ok;
		const char *what;
	} dc[] = { { FETCH_URL_MAX - 1, HTTP1_ETAG_MAX - 1, 0, 0, 1, "url 4095, etag 255" },
		   { FETCH_URL_MAX, 4, 0, 0, 0, "url of 4096 bytes" },
		   { 10, HTTP1_ETAG_MAX, 0, 0, 0, "etag of 256 bytes" },
		   { 10, 4, 1, 0, 0, "url with a NUL" },
		   { 10, 4, 0, 1, 0, "etag with a NUL" } };
	memset(tag, 'e', sizeof(tag));
	for (size_t k = 0; k < sizeof(dc) / sizeof(dc[0]); k++) {
		url[9] = dc[k].nul_url ? 0 : 'u';
		tag[2] = dc[k].nul_tag ? 0 : 'e';
		w = wr_new();
		ipc_put_u32(&w, 200);
		ipc_put_u64(&w, 1);
		ipc_put_u32(&w, 0);
		ipc_put_bytes(&w, url, dc[k].ul);
		ipc_put_bytes(&w, tag, dc[k].el);
		if (dc[k].ok)
			expect_accept(dc[k].what, dec_fdone, w.buf, w.len);
		else
			expect_reject(dc[k].what, dec_fdone, w.buf, w.len);
	}

	g_case = "fetch_error";
	w = wr_new();
	fetch_error_encode(FETCH_ERR_STATUS, 404, "not found: \"x\"", &w);
	rc = run_copy(dec_ferror, w.buf, w.len);
	CHECK(rc == 0 && g_fk == FETCH_ERR_STATUS && g_fs == 404 && !strcmp(g_fmsg, "not found: \"x\""),
	      "round trip: rc %d '%s'", rc, g_fmsg);
	expect_exact("fetch error", dec_ferror, w.buf, w.len);
	static const uint32_t ek[3] = { FETCH_ERR_NONE, FETCH_ERR_COUNT, UINT32_MAX };
	for (int k = 0; k < 3; k++) {
		w = wr_new();
		fetch_error_encode(ek[k], 0, "x", &w);
		char what[32];
		snprintf(what, sizeof(what), "error kind %u", ek[k]);
		expect_reject(what, dec_ferror, w.buf, w.len);
	}
	/* message: 1024 bytes accepted (the encoder cuts there), 1025
	 * refused; a zero-size output buffer refused */
	static char em[1026];
	memset(em, 'q', sizeof(em));
	w = wr_new();
	ipc_put_u32(&w, FETCH_ERR_NET);
	ipc_put_u32(&w, 0);
	ipc_put_bytes(&w, em, 1024);
	rc = run_copy(dec_ferror, w.buf, w.len);
	CHECK(rc == 0 && strlen(g_fmsg) == 1024, "message of 1024: rc %d", rc);
	w = wr_new();
	ipc_put_u32(&w, FETCH_ERR_NET);
	ipc_put_u32(&w, 0);
	ipc_put_bytes(&w, em, 1025);
	expect_reject("message of 1025 bytes", dec_ferror, w.buf, w.len);
	w = wr_new();
	fetch_error_encode(FETCH_ERR_TLS, 0, "x", &w);
	g_fmsglen = 0;
	expect_reject("msglen 0", dec_ferror, w.buf, w.len);
	/* Sanitised to printable ASCII: controls, DEL and every byte >= 0x80
	 * become '?'; cut to msglen - 1. */
	static const char dirty[] = "a\x1b[0m\x7f\xc3\xa9\tb\0c\x1f ~\x80";
	w = wr_new();
	ipc_put_u32(&w, FETCH_ERR_HTTP);
	ipc_put_u32(&w, 0);
	ipc_put_bytes(&w, dirty, sizeof(dirty) - 1);
	g_fmsglen = sizeof(g_fmsg);
	rc = run_copy(dec_ferror, w.buf, w.len);
	CHECK(rc == 0 && !strcmp(g_fmsg, "a?[0m????b?c? ~?"), "sanitised: rc %d '%s'", rc, g_fmsg);
	g_fmsglen = 4;
	rc = run_copy(dec_ferror, w.buf, w.len);
	CHECK(rc == 0 && !strcmp(g_fmsg, "a?["), "cut to 3: rc %d '%s'", rc, g_fmsg);
	g_fmsglen = sizeof(g_fmsg);
}

/* ---- 4. sealed memfds ---- */

static void test_memfd(void)
{
	g_case = "memfd";
	char err[256];
	const uint8_t *p = NULL;
	size_t n = 0;
	uint8_t data[100];
	for (int i = 0; i < 100; i++)
		data[i] = (uint8_t)(i ^ 0x5a);
	int base = count_fds();
	int fd = ipc_memfd_sealed("t", data, sizeof(data));
	CHECK(fd >= 0, "ipc_memfd_sealed: %s", strerror(errno));
	err[0] = 0;
	int rc = ipc_memfd_map(fd, 100, &p, &n, err, sizeof(err));
	CHECK(rc == 0 && n == 100 && !memcmp(p, data, 100), "sealed memfd of 100 at max 100: %s", err);
	if (rc == 0)
		munmap((void *)p, n);
	err[0] = 0;
	CHECK(ipc_memfd_map(fd, 99, &p, &n, err, sizeof(err)) == -1 && strstr(err, "exceeds"),
	      "memfd of 100 at max 99: '%s'", err);
	/* Sealed means sealed: no write, no grow, no shrink. */
	CHECK(write(fd, "x", 1) == -1 && ftruncate(fd, 200) == -1 && ftruncate(fd, 10) == -1,
	      "a sealed memfd changed");
	close(fd);

	/* Not sealed at all. */
	fd = ipc_memfd_new("t");
	CHECK(fd >= 0 && ipc_write_all(fd, data, 10) == 0, "memfd_new");
	err[0] = 0;
	CHECK(ipc_memfd_map(fd, 1000, &p, &n, err, sizeof(err)) == -1 && strstr(err, "not sealed"),
	      "unsealed memfd: '%s'", err);
	/* Every seal but F_SEAL_WRITE: a writer could still change it. */
	CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "add seals");
	err[0] = 0;
	CHECK(ipc_memfd_map(fd, 1000, &p, &n, err, sizeof(err)) == -1 && strstr(err, "not sealed"),
	      "memfd without F_SEAL_WRITE: '%s'", err);
	/* ipc_memfd_seal refuses while a writable mapping exists. */
	void *wm = mmap(NULL, 10, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(wm != MAP_FAILED, "mmap");
	CHECK(ipc_memfd_seal(fd) == -1, "sealed with a writable mapping alive");
	munmap(wm, 10);
	CHECK(ipc_memfd_seal(fd) == 0, "seal after munmap: %s", strerror(errno));
	rc = ipc_memfd_map(fd, 10, &p, &n, err, sizeof(err));
	CHECK(rc == 0 && n == 10 && !memcmp(p, data, 10), "sealed after the fact: %s", err);
	if (rc == 0)
		munmap((void *)p, n);
	close(fd);

	/* Not a memfd (F_GET_SEALS fails), and an empty sealed one (maps to
	 * "" without mmap). */
	int pp[2];
	if (pipe(pp))
		abort();
	err[0] = 0;
	CHECK(ipc_memfd_map(pp[0], 1000, &p, &n, err, sizeof(err)) == -1 && strstr(err, "not sealed"),
	      "pipe: '%s'", err);
	close(pp[0]);
	close(pp[1]);
	fd = ipc_memfd_sealed("t", NULL, 0);
	rc = ipc_memfd_map(fd, 0, &p, &n, err, sizeof(err));
	CHECK(fd >= 0 && rc == 0 && n == 0 && p && !p[0], "empty sealed memfd: %s", err);
	close(fd);
	/* A blob becomes a sealed memfd with its bytes. */
	ipc_blob b;
	ipc_blob_init(&b, "t");
	for (int i = 0; i < 3000; i++)
		ipc_blob_u64(&b, (uint64_t)i * 0x9e3779b97f4a7c15ull);
	fd = ipc_blob_seal(&b);
	rc = ipc_memfd_map(fd, 24000, &p, &n, err, sizeof(err));
	CHECK(fd >= 0 && rc == 0 && n == 24000 && !memcmp(p, b.buf, n), "blob memfd: %s", err);
	if (rc == 0)
		munmap((void *)p, n);
	close(fd);
	ipc_blob_free(&b);
	CHECK(count_fds() == base, "memfd tests leaked %d descriptors", count_fds() - base);
}

/* ---- 5. utf8_clean: the terminal form of generated text ---- */

#define TERM (UTF8_KEEP_NL_TAB | UTF8_REPL_FFFD)
#define FFFD "\xef\xbf\xbd"

/* Cleans the pieces in order (the last with final), as broker/cmd_run.c
 * prints one wc_event after another; returns the concatenated output. */
static const char *term_pieces(const char *const *pc, int np, size_t *outn)
{
	static char out[4096];
	utf8_hold h = { { 0 }, 0 };
	size_t o = 0;
	for (int i = 0; i <= np; i++) {
		const char *p = i < np ? pc[i] : "";
		o += utf8_clean(&h, p, strlen(p), i == np, TERM, out + o);
	}
	out[o] = 0;
	*outn = o;
	return out;
}

/* Is s[0..n) what a terminal may receive: well-formed UTF-8, no control
 * character but '\n' and '\t'? */
static int term_safe(const char *s, size_t n)
{
	for (size_t i = 0, k; i < n; i += k) {
		uint32_t cp;
		k = utf8_decode((const unsigned char *)s + i, n - i, &cp);
		if (!k || ((cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) && cp != '\n' && cp != '\t') ||
		    (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
			return 0;
	}
	return 1;
}

static void test_utf8_clean(void)
{
	g_case = "utf8_clean";
	static const struct {
		const char *pc[4];
		int np;
		const char *want;
		const char *what;
	} c[] = {
		{ { "line\n\tindented \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" }, 1,
		  "line\n\tindented \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "newline, tab and UTF-8 pass" },
		{ { "\x1b[31mred\x1b[0m" }, 1, FFFD "[31mred" FFFD "[0m", "SGR: ESC replaced" },
		{ { "\x1b]8;;https://x\x07link\x1b]8;;\x1b\\" }, 1,
		  FFFD "]8;;https://x" FFFD "link" FFFD "]8;;" FFFD "\\", "OSC 8 hyperlink: ESC and BEL replaced" },
		{ { "a\rb\x08\x01" "c\x7f" }, 1, "a" FFFD "b" FFFD FFFD "c" FFFD, "CR, BS, SOH, DEL replaced" },
		{ { "\xc2\x9b" "2J\xc2\x85" }, 1, FFFD "2J" FFFD, "C1 CSI and NEL replaced" },
		{ { "caf\xc3", "\xa9!" }, 2, "caf\xc3\xa9!", "2-byte character split over two events" },
		{ { "\xf0", "\x9f", "\x98", "\x80" }, 4, "\xf0\x9f\x98\x80", "4-byte character in 4 events" },
		{ { "\xe2\x82", "\xac" }, 2, "\xe2\x82\xac", "3-byte character split 2 + 1" },
		{ { "\xc2", "\x9b" "2J" }, 2, FFFD "2J", "C1 CSI split over two events" },
		{ { "\xc3", "A" }, 2, FFFD "A", "lead byte then ASCII" },
		{ { "\xe0", "\x80\x80" }, 2, FFFD FFFD FFFD, "overlong split" },
		{ { "\xed", "\xa0\x80" }, 2, FFFD FFFD FFFD, "surrogate split" },
		{ { "\xf4", "\x90\x80\x80" }, 2, FFFD FFFD FFFD FFFD, "> U+10FFFF split" },
		{ { "ok\xe2\x82" }, 1, "ok" FFFD FFFD, "truncated at the end of the answer" },
		{ { "\xc3", "\xa9x\x1b" }, 2, "\xc3\xa9x" FFFD, "held character completed, rest cleaned" },
		{ { "if (a \xe2\x80\xae) { \xe2\x81\xa6" "b\xe2\x81\xa9" }, 1, "if (a " FFFD ") { " FFFD "b" FFFD,
		  "bidi override RLO, isolate LRI and PDI replaced" },
		{ { "\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad\xe2\x81\xa7\xe2\x81\xa8" }, 1,
		  FFFD FFFD FFFD FFFD FFFD FFFD, "LRE, RLE, PDF, LRO, RLI, FSI replaced" },
		{ { "\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x8f\xd7\xa9\xd7\x9c" }, 1,
		  "\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x8f\xd7\xa9\xd7\x9c",
		  "neighbours U+2029, U+202F, U+2065, U+206A, RLM and Hebrew kept" },
		{ { "\xe2\x80", "\xae!" }, 2, FFFD "!", "RLO split over two events" },
	};
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		size_t n;
		const char *got = term_pieces(c[k].pc, c[k].np, &n);
		CHECK(n == strlen(c[k].want) && !memcmp(got, c[k].want, n), "%s", c[k].what);
	}
	/* Any bytes cut anywhere: the stream's output is the whole text's
	 * (so a split never changes what is shown), is terminal-safe, and
	 * stays within UTF8_CLEAN_MAX; the '?' form is never longer than its
	 * input (it fills fixed-size fields). */
	static const unsigned char pool[] = { 0, '\t', '\n', '\r', 0x1b, '[', 'a', 0x7f, 0x80, 0x9b, 0x9f,
					      0xa0, 0xbf, 0xc0, 0xc2, 0xc3, 0xdf, 0xe0, 0xe2, 0xed, 0xef,
					      0x81, 0xa9, 0xae, /* with 0xe2, 0x80: the bidi controls */
					      0xf0, 0xf4, 0xf5, 0xff };
	uint64_t rs = 0x9e3779b97f4a7c15ull;
	int diff = 0, unsafe = 0, over = 0;
	for (int it = 0; it < 20000; it++) {
		unsigned char in[16];
		size_t n = test_xorshift(&rs) % sizeof(in);
		for (size_t i = 0; i < n; i++)
			in[i] = test_xorshift(&rs) % 4 ? pool[test_xorshift(&rs) % sizeof(pool)]
							: (unsigned char)test_xorshift(&rs);
		char whole[UTF8_CLEAN_MAX(16)], stream[UTF8_CLEAN_MAX(16) * 2], q[16];
		size_t wn = utf8_clean(NULL, in, n, 1, TERM, whole), sn = 0;
		utf8_hold h = { { 0 }, 0 };
		for (size_t i = 0; i < n;) {
			size_t k = 1 + test_xorshift(&rs) % 4;
			if (k > n - i)
				k = n - i;
			size_t o = utf8_clean(&h, in + i, k, 0, TERM, stream + sn);
			over |= o > UTF8_CLEAN_MAX(k);
			sn += o;
			i += k;
		}
		sn += utf8_clean(&h, "", 0, 1, TERM, stream + sn);
		diff |= sn != wn || memcmp(stream, whole, wn);
		unsafe |= !term_safe(whole, wn) || h.n;
		over |= utf8_clean(NULL, in, n, 1, 0, q) > n;
	}
	CHECK(!diff, "a stream cut at random differs from the whole text");
	CHECK(!unsafe, "cleaned text a terminal must not receive");
	CHECK(!over, "output over its bound");
}

int main(void)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} parts[] = { { "framing", test_framing },         { "cursors", test_cursors },
		      { "wc_request", test_request },       { "wc_event", test_event },
		      { "wc_error", test_error },           { "wc_info", test_info },
		      { "wc_bench_res", test_bench },       { "fetch_req", test_fetch_req },
		      { "fetch replies", test_fetch_replies }, { "memfd", test_memfd },
		      { "utf8_clean", test_utf8_clean } };
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		int c0 = g_checks, f0 = g_fail;
		parts[i].fn();
		printf("%-14s %5d checks: %s\n", parts[i].name, g_checks - c0, g_fail == f0 ? "ok" : "FAILED");
	}
	printf("%d checks, %d failures\n", g_checks, g_fail);
	return g_fail ? 1 : 0;
}
