/* fetcher/fetcher_main.c — mlxr-fetcher: the only mlxr process with network
 * access. It is started by `mlxr` (fork + exec, one end of a socketpair on
 * fd 3, argv[1] == "--serve") and locks itself down (policy FETCHER: TCP
 * connect to the Hub's ports only, no bind, read access to the CA bundle and
 * resolver files only, writes only through descriptors it receives, no
 * exec) before reading a byte from it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fetcher/fint.h"
#include "policy/policy.h"

/* MLXR_FETCHER_ESCAPE="READPATH:WRITEPATH" (tests): after lockdown the
 * fetcher tries to read one file and create another, and reports both on
 * stderr — the proof, from inside the running fetcher, that it cannot. */
static void escape_probe(const char *spec)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", spec);
	char *colon = strchr(buf, ':');
	if (!colon)
		return;
	*colon = 0;
	int fd = open(buf, O_RDONLY | O_CLOEXEC);
	fprintf(stderr, "mlxr-fetcher: escape probe: read %s: %s\n", buf, fd >= 0 ? "OPENED" : strerror(errno));
	if (fd >= 0)
		close(fd);
	fd = open(colon + 1, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	fprintf(stderr, "mlxr-fetcher: escape probe: write %s: %s\n", colon + 1, fd >= 0 ? "OPENED" : strerror(errno));
	if (fd >= 0)
		close(fd);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "--self-test"))
		return policy_selftest(POLICY_FETCHER, argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "--probe"))
		return policy_probe(POLICY_FETCHER, argc, argv);
	int type = 0;
	socklen_t tl = sizeof(type);
	if (argc < 2 || strcmp(argv[1], "--serve") || getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &tl) ||
	    type != SOCK_SEQPACKET) {
		fprintf(stderr, "mlxr-fetcher: started by mlxr, not by hand\n");
		return 2;
	}
	policy_opts o;
	policy_opts_from_args(&o, argc, argv);
	const char *ca = o.ca_bundle;
	if (!ca) {
		const char *e = getenv("SSL_CERT_FILE");
		ca = e && *e ? e : "/etc/ssl/certs/ca-certificates.crt";
		o.ca_bundle = ca;
	}
	/* Opened now, parsed after lockdown (see tls_ca_load). */
	int ca_fd = open(ca, O_RDONLY | O_CLOEXEC);
	char err[512];
	if (policy_apply(POLICY_FETCHER, &o, NULL, err, sizeof(err))) {
		fprintf(stderr, "mlxr-fetcher: sandbox: %s\n", err);
		return 1;
	}
	const char *esc = getenv("MLXR_FETCHER_ESCAPE");
	if (esc && *esc)
		escape_probe(esc);
	return fetcher_serve(3, ca_fd, ca);
}
