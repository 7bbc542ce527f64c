/* release/tools/sign.c — mlxr-sign: signs SHA256SUMS for `make release`.
 *
 *   mlxr-sign [--version X.Y.Z] [--platform P] [--expires-days N | --expires UNIX]
 *             [--timestamp UNIX] [--out FILE.sig] FILE
 *
 * The secret key comes from $MLXR_SIGN_KEY_FILE (a path) or $MLXR_SIGN_KEY
 * (the key file's text), never from an argument that would land in shell
 * history, and never from the repository (release/make_release.sh refuses
 * a key file inside it). Version and platform default to this build's
 * (common/version.h); the trusted comment is rs_meta_format's. The output
 * is a minisign signature file, pre-hashed ("ED"): `minisign -V` reads it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "common/version.h"
#include "release/release.h"

static char *slurp(const char *path, size_t max, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf = NULL;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max)
		goto fail;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf || read(fd, buf, (size_t)st.st_size) != st.st_size)
		goto fail;
	buf[st.st_size] = 0;
	*len = (size_t)st.st_size;
	close(fd);
	return buf;
fail:
	free(buf);
	if (fd >= 0)
		close(fd);
	return NULL;
}

static int parse_i64(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || end == s || v < 0)
		return -1;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	const char *file = NULL, *out = NULL, *ver = mlxr_version;
	char outbuf[4096], tc[512], sigtext[RS_SIGFILE_MAX], err[256], kid[17], untrusted[128];
	int64_t days = 180, expires = -1;
	rs_meta m = { 0 };
	rs_seckey sk;
	snprintf(m.platform, sizeof m.platform, "%s", mlxr_platform);
	m.timestamp = (int64_t)time(NULL);
	for (int i = 1; i < argc; i++) {
		int more = i + 1 < argc;
		if (!strcmp(argv[i], "--version") && more)
			ver = argv[++i];
		else if (!strcmp(argv[i], "--platform") && more)
			snprintf(m.platform, sizeof m.platform, "%s", argv[++i]);
		else if (!strcmp(argv[i], "--expires-days") && more) {
			if (parse_i64(argv[++i], &days) < 0 || days > 36500)
				goto usage;
		} else if (!strcmp(argv[i], "--expires") && more) {
			if (parse_i64(argv[++i], &expires) < 0)
				goto usage;
		} else if (!strcmp(argv[i], "--timestamp") && more) {
			if (parse_i64(argv[++i], &m.timestamp) < 0)
				goto usage;
		} else if (!strcmp(argv[i], "--out") && more)
			out = argv[++i];
		else if (argv[i][0] != '-' && !file)
			file = argv[i];
		else
			goto usage;
	}
	if (!file)
		goto usage;
	if (rs_version_parse(ver, strlen(ver), &m.version) < 0) {
		fprintf(stderr, "mlxr-sign: version '%s' is not X.Y.Z\n", ver);
		return 2;
	}
	m.expires = expires >= 0 ? expires : m.timestamp + days * 86400;
	if (!out) {
		snprintf(outbuf, sizeof outbuf, "%s.sig", file);
		out = outbuf;
	}

	/* the key */
	const char *kf = getenv("MLXR_SIGN_KEY_FILE"), *kt = getenv("MLXR_SIGN_KEY");
	char *ktext = NULL;
	size_t klen = 0;
	if (kf && *kf)
		ktext = slurp(kf, 4096, &klen);
	else if (kt && *kt) {
		ktext = strdup(kt);
		klen = ktext ? strlen(ktext) : 0;
	} else {
		fprintf(stderr, "mlxr-sign: set MLXR_SIGN_KEY_FILE (path of the secret key) or MLXR_SIGN_KEY (its text)\n");
		return 2;
	}
	if (!ktext || rs_seckey_parse(ktext, klen, &sk, err, sizeof err) < 0) {
		fprintf(stderr, "mlxr-sign: %s\n", ktext ? err : "cannot read the secret key");
		return 1;
	}
	sodium_memzero(ktext, klen);
	free(ktext);

	size_t mlen;
	char *msg = slurp(file, RS_SUMS_MAX_FILE, &mlen);
	if (!msg) {
		fprintf(stderr, "mlxr-sign: %s: unreadable or larger than %d bytes\n", file, RS_SUMS_MAX_FILE);
		return 1;
	}
	rs_keyid_hex(sk.id, kid);
	snprintf(untrusted, sizeof untrusted, "signature from mlxr release key %s", kid);
	if (rs_meta_format(&m, tc, sizeof tc) < 0 ||
	    rs_sign(&sk, (const uint8_t *)msg, mlen, untrusted, tc, sigtext, sizeof sigtext, err, sizeof err) < 0) {
		fprintf(stderr, "mlxr-sign: %s\n", err);
		return 1;
	}
	sodium_memzero(&sk, sizeof sk);
	free(msg);
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	size_t n = strlen(sigtext);
	if (fd < 0 || write(fd, sigtext, n) != (ssize_t)n || close(fd) < 0) {
		fprintf(stderr, "mlxr-sign: writing %s: %s\n", out, strerror(errno));
		return 1;
	}
	printf("signed %s with key %s: %s\n", file, kid, tc);
	return 0;
usage:
	fprintf(stderr, "usage: mlxr-sign [--version X.Y.Z] [--platform P] [--expires-days N | --expires UNIX] "
			"[--timestamp UNIX] [--out FILE.sig] FILE\n");
	return 2;
}
