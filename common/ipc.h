/* common/ipc.h — the one IPC codec of mlxr's three processes.
 *
 * Transport: a socketpair(AF_UNIX, SOCK_SEQPACKET): one message per packet,
 * never split or merged. A packet is a 16-byte header (type u32, length
 * u32, request id u64; little-endian) followed by exactly `length` payload
 * bytes, with at most IPC_MAX_FDS descriptors attached (SCM_RIGHTS).
 *
 * Receiver rules (ipc_recv): the packet size must equal 16 + length,
 * length <= IPC_MAX_PAYLOAD, the type inside [1, IPC_TYPE_COUNT), no
 * truncated data or control message; received descriptors arrive
 * close-on-exec and are closed again on any error. A violation returns -1
 * with the reason: the broker then ends that child (a malformed message
 * from a child is never the broker's problem).
 *
 * Payloads are read through ipc_rd, a bounded cursor whose getters fail
 * (and stay failed) on any read past the end; writers use ipc_wr over a
 * fixed buffer. Anything bigger than a packet travels as a sealed memfd
 * (ipc_memfd_sealed / ipc_memfd_map) or as a run of IPC_DATA packets.
 */
#ifndef MLXR_IPC_H
#define MLXR_IPC_H

#include <stddef.h>
#include <stdint.h>

#define IPC_HDR 16
#define IPC_MAX_PAYLOAD (64 * 1024 - IPC_HDR) /* one packet fits the default socket buffer */
#define IPC_MAX_FDS 250                       /* below the kernel's SCM_MAX_FD (253) */
#define IPC_VERSION 1

typedef enum {
	IPC_NONE,
	/* broker -> worker */
	IPC_LOAD,       /* fds: manifest memfd, shard fds; payload: version, ctx, nshards */
	IPC_GENERATE,   /* fds: request memfd (wc_request) */
	IPC_CANCEL,     /* stop the running request */
	IPC_BENCH,      /* payload: wc_bench_req */
	IPC_LOGITS,     /* payload: decode flag, ids */
	IPC_GREEDY,     /* payload: gen, ids */
	IPC_CHAT_IDS,   /* fds: request memfd */
	IPC_TOKENIZE,   /* fds: text memfd; payload: special flag */
	IPC_DETOKENIZE, /* payload: ids */
	IPC_IMPORT,     /* fds: GGUF (read-only), 4 output files; payload: bits, group */
	/* worker -> broker */
	IPC_READY,      /* payload: model info (after LOAD) */
	IPC_EVENT,      /* payload: wc_event */
	IPC_DATA,       /* payload: a piece of a bulk result */
	IPC_DONE,       /* the request finished; payload: kind-specific */
	IPC_ERROR,      /* payload: wc_error */
	/* broker -> fetcher (replies: IPC_EVENT, IPC_DONE, IPC_ERROR; fetcher/fetch.h) */
	IPC_FETCH,      /* fds: output file; payload: fetch request */
	/* broker -> `mlxr-worker --tool` (worker/tool.h; no reply: output on stdout, the exit status) */
	IPC_TOOL,       /* fds: sealed argv memfd, the files it names */
	IPC_TYPE_COUNT
} ipc_type;

typedef struct {
	uint32_t type;
	uint64_t id;
	uint32_t len;
	uint8_t payload[IPC_MAX_PAYLOAD];
	int fds[IPC_MAX_FDS];
	int nfds;
} ipc_msg;

/* Sends one packet. 0, or -1 (errno set). */
int ipc_send(int sock, uint32_t type, uint64_t id, const void *payload, size_t len, const int *fds, int nfds);
/* Receives one packet into m. 0; 1 on orderly EOF; -1 with err. */
int ipc_recv(int sock, ipc_msg *m, char *err, size_t errlen);
/* Closes the descriptors a message carried (ownership not taken). */
void ipc_close_fds(ipc_msg *m);

/* ---- payload cursors ---- */
/* A writer over a fixed buffer (ipc_wr_init: overflow sets bad), or over a
 * growing malloc'd one (ipc_blob_init: for what becomes a sealed memfd). */
typedef struct {
	uint8_t *buf;
	size_t len, cap;
	int bad;
	int grow;         /* 1: buf is malloc'd and grows */
	const char *name; /* memfd name (blobs) */
} ipc_wr;

void ipc_wr_init(ipc_wr *w, void *buf, size_t cap);
void ipc_put_u32(ipc_wr *w, uint32_t v);
void ipc_put_u64(ipc_wr *w, uint64_t v);
void ipc_put_f64(ipc_wr *w, double v);
void ipc_put_bytes(ipc_wr *w, const void *p, size_t n); /* u32 length + bytes */
void ipc_put_raw(ipc_wr *w, const void *p, size_t n);

typedef struct {
	const uint8_t *p;
	size_t left;
	int bad;
} ipc_rd;

void ipc_rd_init(ipc_rd *r, const void *buf, size_t len);
uint32_t ipc_get_u32(ipc_rd *r);
uint64_t ipc_get_u64(ipc_rd *r);
double ipc_get_f64(ipc_rd *r);
/* A length-prefixed byte string of at most max bytes; points into the
 * buffer (not NUL-terminated). NULL and bad on failure. */
const uint8_t *ipc_get_bytes(ipc_rd *r, size_t max, size_t *n);
const uint8_t *ipc_get_raw(ipc_rd *r, size_t n);

/* ---- sealed memfds ---- */
/* A memfd holding a copy of p[0..n), sealed against every change
 * (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_WRITE|F_SEAL_SEAL). -1 on error. */
int ipc_memfd_sealed(const char *name, const void *p, size_t n);
/* The same in steps, for a writer that fills the memfd itself (from
 * several buffers, or from files with sendfile): ipc_memfd_new, writes,
 * then ipc_memfd_seal, which fails while any writable mapping of it exists.
 * -1 (errno set) on error. */
int ipc_memfd_new(const char *name);
int ipc_write_all(int fd, const void *p, size_t n);
int ipc_memfd_seal(int fd);
/* A growable writer that ends as a sealed memfd (for big payloads); the
 * ipc_put_* functions write to it. */
typedef ipc_wr ipc_blob;
void ipc_blob_init(ipc_blob *b, const char *name);
#define ipc_blob_put ipc_put_raw
#define ipc_blob_u32 ipc_put_u32
#define ipc_blob_u64 ipc_put_u64
#define ipc_blob_f64 ipc_put_f64
#define ipc_blob_bytes ipc_put_bytes
/* Seals it and returns the fd (caller closes), or -1. */
int ipc_blob_seal(ipc_blob *b);
void ipc_blob_free(ipc_blob *b);
/* Receiver side: checks every seal is set and the size is at most max,
 * then maps it read-only. 0, or -1 with err. */
int ipc_memfd_map(int fd, size_t max, const uint8_t **p, size_t *n, char *err, size_t errlen);

#endif
