/* release/verify.c — checks a staged release (a directory holding
 * SHA256SUMS, SHA256SUMS.sig and the binaries) against the trusted keys and
 * the version policy. Nothing here touches the installation. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "release/release.h"

const char *const rs_files[RS_NFILES] = { "mlxr-worker", "mlxr-fetcher", "mlxr" };

/* Opens name under dirfd as a regular file of at most max bytes (no
 * symlinks followed). fd, or -1 with err. */
static int open_regular(int dirfd, const char *name, uint64_t max, uint64_t *size, char *err, size_t errlen)
{
	struct stat st;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errlen)
			snprintf(err, errlen, "%s: %s", name, errno == ENOENT ? "missing" : strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		if (errlen)
			snprintf(err, errlen, "%s: not a regular file of at most %llu bytes", name,
				 (unsigned long long)max);
		close(fd);
		return -1;
	}
	*size = (uint64_t)st.st_size;
	return fd;
}

/* Reads a whole small file into a malloc'd buffer (NUL-terminated). */
static char *read_small(int dirfd, const char *name, size_t max, size_t *len, char *err, size_t errlen)
{
	uint64_t size;
	int fd = open_regular(dirfd, name, max, &size, err, errlen);
	if (fd < 0)
		return NULL;
	char *buf = malloc((size_t)size + 1);
	size_t got = 0;
	while (buf && got < size) {
		ssize_t k = read(fd, buf + got, (size_t)size - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	if (!buf || got != size) {
		if (errlen)
			snprintf(err, errlen, "%s: read failed", name);
		free(buf);
		return NULL;
	}
	buf[got] = 0;
	*len = got;
	return buf;
}

int rs_sha256_fd(int fd, uint8_t out[32], uint64_t *size, char *err, size_t errlen)
{
	crypto_hash_sha256_state st;
	uint8_t buf[1 << 16];
	uint64_t total = 0;
	crypto_hash_sha256_init(&st);
	for (off_t off = 0;;) {
		ssize_t k = pread(fd, buf, sizeof buf, off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			if (errlen)
				snprintf(err, errlen, "read: %s", strerror(errno));
			return -1;
		}
		if (k == 0)
			break;
		crypto_hash_sha256_update(&st, buf, (size_t)k);
		off += k;
		total += (uint64_t)k;
	}
	crypto_hash_sha256_final(&st, out);
	if (size)
		*size = total;
	return 0;
}

int rs_verify_sums(int dirfd, const rs_pubkey *keys, size_t nkeys, rs_release *r, char *err, size_t errlen)
{
	size_t slen = 0, glen = 0;
	char kid[17], e2[256];
	int rc = -1;
	memset(r, 0, sizeof *r);
	char *sums = read_small(dirfd, RS_SUMS_NAME, RS_SUMS_MAX_FILE, &slen, err, errlen);
	char *sig = read_small(dirfd, RS_SIG_NAME, RS_SIGFILE_MAX, &glen, err, errlen);
	if (!sums || !sig)
		goto fail;
	if (rs_sig_parse(sig, glen, &r->sig, e2, sizeof e2) < 0) {
		snprintf(err, errlen, "%s: %s", RS_SIG_NAME, e2);
		goto fail;
	}
	const rs_pubkey *k = rs_key_find(keys, nkeys, r->sig.keyid, &r->key_index);
	if (!k) {
		rs_keyid_hex(r->sig.keyid, kid);
		snprintf(err, errlen, "%s: signed by key %s, which this mlxr does not trust", RS_SIG_NAME, kid);
		goto fail;
	}
	if (rs_sig_verify(&r->sig, k, (const uint8_t *)sums, slen, e2, sizeof e2) < 0) {
		snprintf(err, errlen, "%s: %s", RS_SIG_NAME, e2);
		goto fail;
	}
	/* From here on the bytes are the project's: parse what they say. */
	if (rs_meta_parse(r->sig.trusted, r->sig.trusted_len, &r->meta, err, errlen) < 0)
		goto fail;
	if (rs_sums_parse(sums, slen, &r->sums, err, errlen) < 0)
		goto fail;
	for (int i = 0; i < RS_NFILES; i++) {
		const rs_sum *s = rs_sums_find(&r->sums, rs_files[i]);
		if (!s) {
			snprintf(err, errlen, "%s does not list %s", RS_SUMS_NAME, rs_files[i]);
			goto fail;
		}
		memcpy(r->sha256[i], s->sha256, 32);
	}
	rc = 0;
fail:
	free(sums);
	free(sig);
	return rc;
}

int rs_check_policy(const rs_release *r, const rs_version *running, const rs_version *floor, const char *platform,
		    int64_t now, char *err, size_t errlen)
{
	char a[24], b[24];
	rs_version_str(&r->meta.version, a);
	if (strcmp(r->meta.platform, platform)) {
		snprintf(err, errlen, "the signed release %s is for platform %s, this is %s", a, r->meta.platform,
			 platform);
		return -1;
	}
	if (rs_version_cmp(&r->meta.version, running) <= 0) {
		rs_version_str(running, b);
		snprintf(err, errlen, "the signed release %s is not newer than the running version %s", a, b);
		return -1;
	}
	if (floor && rs_version_cmp(&r->meta.version, floor) < 0) {
		rs_version_str(floor, b);
		snprintf(err, errlen,
			 "the signed release %s is older than %s, which this installation already accepted "
			 "(rollback refused)",
			 a, b);
		return -1;
	}
	if (now >= r->meta.expires) {
		snprintf(err, errlen,
			 "the signature of release %s expired (at %lld, now %lld): the feed may be serving a stale "
			 "release",
			 a, (long long)r->meta.expires, (long long)now);
		return -1;
	}
	return 0;
}

int rs_verify_files(int dirfd, const rs_release *r, char *err, size_t errlen)
{
	for (int i = 0; i < RS_NFILES; i++) {
		uint8_t h[32];
		uint64_t size;
		char e2[128];
		int fd = open_regular(dirfd, rs_files[i], RS_BINARY_MAX, &size, err, errlen);
		if (fd < 0)
			return -1;
		int bad = rs_sha256_fd(fd, h, NULL, e2, sizeof e2);
		close(fd);
		if (bad) {
			snprintf(err, errlen, "%s: %s", rs_files[i], e2);
			return -1;
		}
		if (sodium_memcmp(h, r->sha256[i], 32) != 0) {
			snprintf(err, errlen, "%s: SHA-256 does not match the signed %s", rs_files[i], RS_SUMS_NAME);
			return -1;
		}
	}
	return 0;
}
