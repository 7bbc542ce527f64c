/* fuzz/ipc_fuzzer.c — the broker's view of a hostile child: raw packets
 * through common/ipc.c ipc_recv (framing, header, length, type), and
 * payloads through every wire decoder of common/wcproto.c (events, errors,
 * model info, bench results, requests), the tensor table
 * (common/safetensors.c st_table_load, with no descriptors), and the
 * broker<->fetcher codec (fetcher/fproto.c: the fetcher's replies as the
 * broker reads them, the request as the fetcher reads it).
 *
 * Input: byte 0 picks the decoder (0xf0..0xff: the fetcher's four; below:
 * byte 0 % 7, as the seed corpus was written), the rest is the packet or
 * payload.
 * Checked: no memory error or UB; an accepted packet's length matches what
 * was sent and its type is in range; decoded enums are in range, times
 * finite, and text fields are NUL-terminated within their buffers, valid
 * UTF-8 and free of control characters (C0, DEL, C1) and of bidi
 * embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069);
 * a decoded request re-packs to a request that decodes to the same fields;
 * a fetcher reply decodes only to what fetcher.c can send (status 200 from
 * byte 0 or 206 from later, offsets within a known total, printable-ASCII
 * ETag and error text, an https:// final URL) and re-encodes to the same
 * bytes. */
#include <math.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ipc.h"
#include "common/safetensors.h"
#include "common/utf8.h"
#include "common/wcapi.h"
#include "fetcher/fetch.h"
#include "fuzz/fuzz.h"

static int sv[2] = { -1, -1 };
static ipc_msg m;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		abort();
	return 0;
}

static void check_text(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);
	FUZZ_CHECK(n < cap, "text not terminated");
	for (size_t i = 0, k; i < n; i += k) {
		uint32_t cp;
		k = utf8_decode((const unsigned char *)s + i, n - i, &cp);
		FUZZ_CHECK(k, "invalid UTF-8 in text");
		if (!k)
			break;
		FUZZ_CHECK(cp >= 0x20 && !(cp >= 0x7f && cp <= 0x9f), "control character in text");
		FUZZ_CHECK(!(cp >= 0x202a && cp <= 0x202e) && !(cp >= 0x2066 && cp <= 0x2069), "bidi control in text");
	}
}

/* Every byte of the NUL-terminated s (within cap) in [lo, 0x7e]. */
static int ascii_in(const char *s, size_t cap, unsigned char lo)
{
	size_t n = strnlen(s, cap);
	if (n == cap)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < lo || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

/* the re-encodings' writer: the fetcher's messages fit the IPC payload */
static uint8_t g_wbuf[IPC_MAX_PAYLOAD];
static ipc_wr g_w;

/* g_w holds exactly p[0..n): a decoded message re-encoded to its bytes */
static int wrote(const uint8_t *p, size_t n)
{
	return !g_w.bad && g_w.len == n && !memcmp(g_w.buf, p, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ipc_wr_init(&g_w, g_wbuf, sizeof g_wbuf);
	if (size < 1)
		return 0;
	uint8_t which = data[0] >= 0xf0 ? 7 + (data[0] & 3) : data[0] % 7;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	char err[256];
	switch (which) {
	case 0: { /* a raw packet from the child */
		if (n > IPC_HDR + IPC_MAX_PAYLOAD)
			n = IPC_HDR + IPC_MAX_PAYLOAD;
		if (send(sv[1], p, n, 0) < 0)
			return 0;
		int r = ipc_recv(sv[0], &m, err, sizeof err);
		if (r == 0) {
			FUZZ_CHECK(m.len == n - IPC_HDR && m.type > IPC_NONE && m.type < IPC_TYPE_COUNT, "accepted");
			FUZZ_CHECK(m.nfds == 0, "descriptors from nowhere");
		} else {
			FUZZ_CHECK(r == 1 ? n == 0 : err[0] != 0, "rejected without a reason");
		}
		break;
	}
	case 1: {
		wc_event ev;
		if (wc_event_unpack(p, n, &ev) == 0) {
			FUZZ_CHECK(ev.type < WC_EV_COUNT && ev.finish < WC_FINISH_COUNT, "enum");
			if (ev.type == WC_EV_TEXT || ev.type == WC_EV_REASONING)
				FUZZ_CHECK(ev.text >= (const char *)p && ev.text + ev.len <= (const char *)p + n, "text span");
			else
				FUZZ_CHECK(ev.prefilled <= ev.prompt_tokens && isfinite(ev.prefill_s) && isfinite(ev.decode_s) &&
						   isfinite(ev.ttft_s),
					   "prefilled, finite times");
		}
		break;
	}
	case 2: {
		wc_error e;
		if (wc_error_unpack(p, n, &e) == 0) {
			FUZZ_CHECK(e.kind > WC_ERR_NONE && e.kind < WC_ERR_COUNT && e.ctx >= 0, "error fields");
			check_text(e.msg, sizeof e.msg);
		}
		break;
	}
	case 3: {
		wc_info i;
		if (wc_info_unpack(p, n, &i) == 0) {
			check_text(i.model_type, sizeof i.model_type);
			check_text(i.chat_format, sizeof i.chat_format);
			check_text(i.chat_note, sizeof i.chat_note);
			FUZZ_CHECK(i.vocab > 0 && i.ctx > 0 && i.n_layers > 0, "info ranges");
		}
		break;
	}
	case 4: {
		wc_bench_res b;
		if (wc_bench_res_unpack(p, n, &b) == 0) {
			check_text(b.kernels, sizeof b.kernels);
			FUZZ_CHECK(b.threads >= 1 && b.prefill_s > 0 && b.decode_bytes > 0 && b.prefill_x < WC_PREFILL_X_COUNT &&
					   isfinite(b.prefill_s) && isfinite(b.decode_short_s) && isfinite(b.decode_long_s) &&
					   isfinite(b.mem_bw) && isfinite(b.peak_rss_mb),
				   "bench ranges");
		}
		break;
	}
	case 5: { /* a request, as a worker would read it from its memfd */
		wc_request r, r2;
		wc_msg *msgs, *msgs2;
		if (wc_request_unpack(p, n, &r, &msgs, err, sizeof err) == 0) {
			FUZZ_CHECK(r.n_stops >= 0 && r.n_stops <= WC_MAX_STOPS && r.top_k >= 0, "request ranges");
			for (size_t i = 0; r.msgs && i < r.n_msgs; i++)
				FUZZ_CHECK(r.msgs[i].role < WC_ROLE_COUNT, "role");
			ipc_blob b;
			ipc_blob_init(&b, "fuzz");
			FUZZ_CHECK(wc_request_pack(&r, &b) == 0, "re-pack");
			FUZZ_CHECK(wc_request_unpack(b.buf, b.len, &r2, &msgs2, err, sizeof err) == 0, "re-unpack");
			FUZZ_CHECK(r2.n_msgs == r.n_msgs && r2.prompt_len == r.prompt_len && r2.n_stops == r.n_stops &&
				   r2.max_tokens == r.max_tokens && r2.seed == r.seed, "round trip");
			wc_request_unpacked_free(&r2, msgs2);
			ipc_blob_free(&b);
			wc_request_unpacked_free(&r, msgs);
		}
		break;
	}
	case 6: { /* a tensor table without its shard descriptors */
		st_set set;
		ipc_rd rd;
		ipc_rd_init(&rd, p, n);
		FUZZ_CHECK(st_table_load(&set, &rd, NULL, 0, err, sizeof err) == -1, "a table needs its shards");
		break;
	}
	case 7: { /* the fetcher's request (what the fetcher reads from the broker) */
		fetch_req r;
		if (fetch_req_decode(&r, p, n) == 0) {
			FUZZ_CHECK(memchr(r.url, 0, sizeof r.url) && memchr(r.if_range, 0, sizeof r.if_range) &&
					   memchr(r.token, 0, sizeof r.token) && memchr(r.token_host, 0, sizeof r.token_host),
				   "request strings terminated");
			fetch_req_encode(&r, &g_w);
			FUZZ_CHECK(wrote(p, n), "request re-encodes");
		}
		break;
	}
	case 8: { /* a progress or head event */
		fetch_event e;
		if (fetch_event_decode(&e, p, n) == 0) {
			FUZZ_CHECK((e.status == 200 && e.start == 0) || (e.status == 206 && e.start > 0), "event status");
			FUZZ_CHECK(!e.total || (e.start <= e.total && e.done <= e.total), "event offsets");
			FUZZ_CHECK(e.kind != FETCH_EV_PROGRESS || e.done >= e.start, "progress from start");
			FUZZ_CHECK(ascii_in(e.etag, sizeof e.etag, 0x20), "event etag");
			fetch_event_encode(&e, &g_w);
			FUZZ_CHECK(wrote(p, n), "event re-encodes");
		}
		break;
	}
	case 9: { /* the end of a download */
		fetch_done d;
		if (fetch_done_decode(&d, p, n) == 0) {
			FUZZ_CHECK((d.status == 200 || d.status == 206) && d.redirects <= FETCH_MAX_REDIRECTS, "done ranges");
			FUZZ_CHECK(!strncmp(d.final_url, "https://", 8) && ascii_in(d.final_url, sizeof d.final_url, 0x21),
				   "done url");
			FUZZ_CHECK(ascii_in(d.etag, sizeof d.etag, 0x20), "done etag");
			fetch_done_encode(&d, &g_w);
			FUZZ_CHECK(wrote(p, n), "done re-encodes");
		}
		break;
	}
	case 10: { /* an error report */
		uint32_t kind, status;
		char msg[256];
		if (fetch_error_decode(&kind, &status, msg, sizeof msg, p, n) == 0)
			FUZZ_CHECK(kind < FETCH_ERR_COUNT && memchr(msg, 0, sizeof msg), "error ranges");
		break;
	}
	}
	return 0;
}
