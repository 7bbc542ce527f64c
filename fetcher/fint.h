/* fetcher/fint.h — what the fetcher's own files share (mlxr-fetcher only;
 * these link BearSSL). */
#ifndef MLXR_FINT_H
#define MLXR_FINT_H

#include <stddef.h>
#include <stdint.h>

#include "fetcher/fetch.h"

#define FETCH_CONNECT_MS 15000 /* TCP connect */
#define FETCH_IO_MS 60000      /* no byte for this long: the peer is gone */

/* Loads the PEM CA bundle open on fd (path: for messages; fd closed) as
 * the trust anchors of every later connection. 0 (at least one anchor), or
 * -1 with err. The fetcher opens it before lockdown (so a bundle under a
 * directory only the user can enter still works after a root-started
 * fetcher became nobody) and parses it after. */
int tls_ca_load(int fd, const char *path, char *err, size_t errlen);

typedef struct tls_conn tls_conn;
/* Resolves host (MLXR_RESOLVE "host:ip,..." first, then getaddrinfo),
 * connects with a timeout, and runs the TLS handshake (SNI and certificate
 * name = host). 0 or -1 with err and *kind (FETCH_ERR_NET / FETCH_ERR_TLS). */
int tls_open(tls_conn **out, const char *host, uint16_t port, char *err, size_t errlen, int *kind);
int tls_write_all(tls_conn *c, const void *p, size_t n, char *err, size_t errlen);
/* Up to n bytes: > 0 read, 0 a clean close (close_notify), -1 error (EOF
 * without close_notify is an error: it could be a truncation). */
long tls_read(tls_conn *c, void *p, size_t n, char *err, size_t errlen);
void tls_close(tls_conn *c);

/* Serves IPC_FETCH requests on sock until EOF. Returns the exit status. */
int fetcher_serve(int sock, int ca_fd, const char *ca_path);

#endif
