/* release/tools/keygen.c — mlxr-keygen: a new release key pair.
 *
 *   mlxr-keygen --secret PATH [--slot primary|backup]
 *               [--source release/trusted_keys.inc] [--pub PATH.pub]
 *
 * Writes the secret key (minisign's unencrypted format, mode 0600, never
 * over an existing file) where the person says — keep it off the
 * repository and off the build machine's shared disks — and puts the public
 * key into the source file that mlxr compiles in (the slot's line replaced,
 * the other slot's line kept). --pub also writes a minisign .pub file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "release/release.h"

static int write_file(const char *path, const char *s, int excl, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (excl ? O_EXCL : O_TRUNC), mode);
	size_t n = strlen(s);
	if (fd < 0)
		return -1;
	if (write(fd, s, n) != (ssize_t)n || fsync(fd) < 0) {
		close(fd);
		return -1;
	}
	return close(fd);
}

/* The existing RS_TRUSTED_KEY line for slot in text, copied into out. */
static int find_line(const char *text, const char *slot, char *out, size_t cap)
{
	char pre[64];
	snprintf(pre, sizeof pre, "RS_TRUSTED_KEY(\"%s\"", slot);
	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (n < cap && !strncmp(p, pre, strlen(pre))) {
			memcpy(out, p, n);
			out[n] = 0;
			return 1;
		}
		p = nl ? nl + 1 : NULL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *secret = NULL, *slot = "primary", *source = "release/trusted_keys.inc", *pub = NULL;
	char skbuf[1024], b64[57], kid[17], line[2][256], text[8192] = "", out[10000];
	rs_seckey sk;
	rs_pubkey pk;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--secret") && i + 1 < argc)
			secret = argv[++i];
		else if (!strcmp(argv[i], "--slot") && i + 1 < argc)
			slot = argv[++i];
		else if (!strcmp(argv[i], "--source") && i + 1 < argc)
			source = argv[++i];
		else if (!strcmp(argv[i], "--pub") && i + 1 < argc)
			pub = argv[++i];
		else {
			fprintf(stderr, "usage: mlxr-keygen --secret PATH [--slot primary|backup] [--source FILE.inc] "
					"[--pub FILE.pub]\n");
			return 2;
		}
	}
	if (!secret || (strcmp(slot, "primary") && strcmp(slot, "backup"))) {
		fprintf(stderr, "mlxr-keygen: --secret PATH is required; --slot is primary or backup\n");
		return 2;
	}
	if (sodium_init() < 0)
		return 1;
	rs_keypair(&sk, &pk);
	if (rs_seckey_format(&sk, skbuf, sizeof skbuf) < 0 || write_file(secret, skbuf, 1, 0600) < 0) {
		fprintf(stderr, "mlxr-keygen: writing %s: %s\n", secret, strerror(errno));
		return 1;
	}
	sodium_memzero(skbuf, sizeof skbuf);
	sodium_memzero(&sk, sizeof sk);
	rs_pubkey_base64(&pk, b64);
	rs_keyid_hex(pk.id, kid);

	/* The source file: both slots, this one new. */
	FILE *f = fopen(source, "r");
	if (f) {
		size_t n = fread(text, 1, sizeof text - 1, f);
		text[n] = 0;
		fclose(f);
	}
	/* Primary first, then backup; the slot not being replaced is kept. */
	int is_primary = !strcmp(slot, "primary");
	int have_other = find_line(text, is_primary ? "backup" : "primary", line[1], sizeof line[1]);
	snprintf(line[0], sizeof line[0], "RS_TRUSTED_KEY(\"%s\", \"%s\") /* key id %s */", slot, b64, kid);
	const char *first = is_primary ? line[0] : have_other ? line[1] : NULL;
	const char *second = is_primary ? (have_other ? line[1] : NULL) : line[0];
	snprintf(out, sizeof out,
		 "/* release/trusted_keys.inc — the public keys `mlxr upgrade` trusts, compiled\n"
		 " * into release/keys.c: the primary signing key first, then the backup (used\n"
		 " * if the primary is lost or must be retired). Written by mlxr-keygen; each\n"
		 " * line's base64 is the minisign public key (`minisign -V -P KEY ...`). */\n"
		 "%s%s%s%s",
		 first ? first : "", first ? "\n" : "", second ? second : "", second ? "\n" : "");
	if (write_file(source, out, 0, 0644) < 0) {
		fprintf(stderr, "mlxr-keygen: writing %s: %s\n", source, strerror(errno));
		return 1;
	}
	if (pub) {
		char pubtext[256];
		snprintf(pubtext, sizeof pubtext, "untrusted comment: minisign public key %s\n%s\n", kid, b64);
		if (write_file(pub, pubtext, 0, 0644) < 0) {
			fprintf(stderr, "mlxr-keygen: writing %s: %s\n", pub, strerror(errno));
			return 1;
		}
	}
	printf("%s key %s\npublic key: %s\nsecret key written to %s; public key written to %s\n", slot, kid, b64, secret,
	       source);
	return 0;
}
