/* release/state.c — the highest release version this installation accepted,
 * per signing key id ($MLXR_HOME/upgrade/accepted). It is the floor below
 * which no signed release is installed again (no replay of an older signed
 * release, even after the binaries were restored by hand). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "release/release.h"

#define STATE_FILE_MAX 4096 /* RS_STATE_MAX lines of at most 40 bytes */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int rs_state_parse(const char *buf, size_t len, rs_state *s, char *err, size_t errlen)
{
	const char *p = buf, *end = buf + len;
	s->n = 0;
	if (len > STATE_FILE_MAX) {
		snprintf(err, errlen, "too long");
		return -1;
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : 0;
		if (!nl || n < 18 || p[16] != ' ' || s->n == RS_STATE_MAX) {
			snprintf(err, errlen, "line %zu is not \"KEYID VERSION\"", s->n + 1);
			return -1;
		}
		/* the id as rs_keyid_hex writes it: big-endian hex of the LE number */
		for (int i = 0; i < RS_KEYID_BYTES; i++) {
			int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
			if (hi < 0 || lo < 0) {
				snprintf(err, errlen, "line %zu: bad key id", s->n + 1);
				return -1;
			}
			s->id[s->n][RS_KEYID_BYTES - 1 - i] = (uint8_t)(hi << 4 | lo);
		}
		if (rs_version_parse(p + 17, n - 17, &s->v[s->n]) < 0) {
			snprintf(err, errlen, "line %zu: bad version", s->n + 1);
			return -1;
		}
		for (size_t j = 0; j < s->n; j++)
			if (!memcmp(s->id[j], s->id[s->n], RS_KEYID_BYTES)) {
				snprintf(err, errlen, "line %zu: key id listed twice", s->n + 1);
				return -1;
			}
		s->n++;
		p = nl + 1;
	}
	return 0;
}

int rs_state_load(const char *path, rs_state *s, char *err, size_t errlen)
{
	char buf[STATE_FILE_MAX + 1], e2[128];
	size_t got = 0;
	s->n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	for (;;) {
		ssize_t k = read(fd, buf + got, sizeof buf - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
		if (got == sizeof buf)
			break;
	}
	close(fd);
	if (rs_state_parse(buf, got, s, e2, sizeof e2) < 0) {
		snprintf(err, errlen,
			 "%s: %s (refusing to guess which versions were accepted; restore or remove the file)", path,
			 e2);
		return -1;
	}
	return 0;
}

const rs_version *rs_state_floor(const rs_state *s)
{
	const rs_version *best = NULL;
	for (size_t i = 0; i < s->n; i++)
		if (!best || rs_version_cmp(&s->v[i], best) > 0)
			best = &s->v[i];
	return best;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int rs_state_record(const char *path, rs_state *s, const uint8_t id[RS_KEYID_BYTES], const rs_version *v, char *err,
		    size_t errlen)
{
	char tmp[4200], dir[4200], out[STATE_FILE_MAX], kid[17], ver[24];
	size_t i, len = 0;
	for (i = 0; i < s->n; i++)
		if (!memcmp(s->id[i], id, RS_KEYID_BYTES))
			break;
	if (i == s->n) {
		if (s->n == RS_STATE_MAX) {
			snprintf(err, errlen, "%s: too many key ids", path);
			return -1;
		}
		memcpy(s->id[s->n], id, RS_KEYID_BYTES);
		s->v[s->n++] = *v;
	} else if (rs_version_cmp(v, &s->v[i]) > 0) {
		s->v[i] = *v;
	}
	for (i = 0; i < s->n; i++) {
		rs_keyid_hex(s->id[i], kid);
		rs_version_str(&s->v[i], ver);
		len += (size_t)snprintf(out + len, sizeof out - len, "%s %s\n", kid, ver);
	}
	if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp ||
	    snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) {
		snprintf(err, errlen, "state path too long");
		return -1;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || write_all(fd, out, len) < 0 || fsync(fd) < 0) {
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		return -1;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0) {
		snprintf(err, errlen, "fsync of %s: %s", dir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	close(dfd);
	return 0;
}
