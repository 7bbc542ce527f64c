/* broker/fclient.h — the broker's handle on the fetcher (mlxr-fetcher).
 *
 * The fetcher is the only mlxr process that touches the network. The broker
 * starts it (fork + exec, socketpair on fd 3, policy FETCHER), sends it one
 * request at a time and reads typed replies; every reply is hostile until
 * checked. The broker itself never opens a network socket.
 *
 * Files: the broker opens every output file itself (in a staging directory)
 * and passes the descriptor; the fetcher has no filesystem writes of its own.
 * What arrives is untrusted until the broker re-checks size and SHA-256
 * (libsodium, streaming over the staged file).
 *
 * Policy (enforced in the fetcher, re-checked where the broker can):
 *  - https only, on every hop; redirects followed at most
 *    FETCH_MAX_REDIRECTS times (fetcher/fetch.h); a redirect to http://
 *    or a loop is an error;
 *  - the token ($HF_TOKEN, else $HF_HOME/token, else
 *    ~/.cache/huggingface/token) is sent only to the host of HF_ENDPOINT,
 *    never to a host a redirect leads to;
 *  - CA bundle: $SSL_CERT_FILE, else /etc/ssl/certs/ca-certificates.crt;
 *  - resume: Range + If-Range (ETag); only a 206 whose Content-Range starts
 *    at the partial file's size is appended; a 200 restarts the file.
 *
 * Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN,
 * HF_HOME, SSL_CERT_FILE, MLXR_RESOLVE ("host:ip[,host:ip]", tests only: the
 * fetcher maps these names itself instead of asking the resolver).
 *
 * Threads: one fetcher per process at a time; calls serialise.
 */
#ifndef MLXR_FCLIENT_H
#define MLXR_FCLIENT_H

#include <stddef.h>
#include <stdint.h>

/* Progress callback: done bytes of total (0 when unknown). */
typedef void (*fclient_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Downloads url (https only; redirects followed per the policy above) into
 * out_fd (a regular file the broker opened read-write in a staging
 * directory; the caller keeps ownership). resume != 0: continue from the
 * file's current size using Range/If-Range; otherwise the file is truncated
 * first. expected_size (FCLIENT_SIZE_ANY: unknown; 0 is an empty file)
 * and sha256 (NULL: not checked) are
 * verified by the broker over the file after the download; a mismatch
 * truncates nothing but returns -1. progress may be NULL. The token is sent
 * only when url's host is HF_ENDPOINT's host. Returns 0, or -1 with err. */
int fclient_download(const char *url, int out_fd, int resume, uint64_t expected_size, const uint8_t sha256[32],
		     fclient_progress_fn progress, void *arg, char *err, size_t errlen);

#define FCLIENT_SIZE_ANY UINT64_MAX /* expected_size: no size to check */

/* The same with every option (fclient_download is this with the defaults).
 * Fields left 0/NULL are off, except expected_size (0 is a size). */
typedef struct {
	int resume;                 /* continue from the file's size */
	const char *if_range;       /* resume: the ETag the partial file came
	                               with (If-Range); NULL: none (a changed file
	                               is then caught by the SHA-256 check) */
	uint64_t expected_size;     /* checked after the download;
	                               FCLIENT_SIZE_ANY: unknown */
	const uint8_t *sha256;      /* checked after the download; NULL: none */
	uint64_t max_bytes;         /* refuse a body larger than this; 0: none */
	fclient_progress_fn progress;
	/* Called once the final response's head arrived, before any body byte
	 * is written: the ETag to keep for a later resume (may be ""). */
	void (*head)(void *arg, const char *etag, uint64_t start, uint64_t total);
	void *arg;
	int *http_status;           /* out: the HTTP status of a failed request
	                               (401/403/404...), 0 when none */
} fclient_opts;
int fclient_download_ex(const char *url, int out_fd, const fclient_opts *o, char *err, size_t errlen);

/* Checks the file behind fd: size (unless expected_size is
 * FCLIENT_SIZE_ANY) and SHA-256
 * (when sha256 != NULL), streaming with libsodium. 0 or -1 with err. */
int fclient_verify(int fd, uint64_t expected_size, const uint8_t sha256[32], char *err, size_t errlen);

/* The Hub endpoint ($HF_ENDPOINT without a trailing '/', default
 * https://huggingface.co) and the token (NULL when none). */
const char *fclient_endpoint(void);
const char *fclient_token(void);

/* GET url (https; API calls) into a malloc'd, NUL-terminated buffer of at
 * most max bytes. Returns the HTTP status (200...), or -1 with err. *body
 * is set (caller frees) when the status is >= 0. */
int fclient_get(const char *url, size_t max, char **body, size_t *len, char *err, size_t errlen);

/* `mlxr pull` as a function, for run/serve --pull: downloads org/repo at
 * revision (NULL: "main") into the store. force: download even when the
 * architecture is not supported. quiet: no progress output. 0 or -1 with
 * err. */
int pull_model(const char *name, const char *revision, int force, int quiet, char *err, size_t errlen);

/* For run/serve: removes every "--pull" from argv (argc updated) and
 * returns 1 when there was one. */
int pull_strip_flag(int *argc, char **argv);
/* Called where store_resolve(name) failed (its message in err): when name
 * is an "org/repo" Hub name, pulls it — without asking when auto_pull, else
 * after a yes on the terminal (no terminal: no pull, and err says
 * `--pull`) — then resolves it again into dir. 0 when dir is now set; -1
 * with err (the original message, or why the pull failed). */
int pull_offer(const char *name, int auto_pull, char *dir, size_t dirlen, char *err, size_t errlen);

/* Ends the fetcher, if one is running (also done at exit). */
void fclient_stop(void);

#endif
