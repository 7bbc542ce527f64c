/* release/meta.c — release versions and the signed trusted comment. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "release/release.h"

static void seterr(char *err, size_t errlen, const char *msg)
{
	if (errlen)
		snprintf(err, errlen, "%s", msg);
}

/* One decimal component: digits, no leading zero (so "1.02.0" has a single
 * spelling), at most 6 digits (<= 999999: far beyond any real version, and
 * no overflow in the arithmetic below). */
static int parse_num(const char *s, size_t n, uint32_t *out)
{
	uint32_t v = 0;
	if (n == 0 || n > 6 || (n > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint32_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

int rs_version_parse(const char *s, size_t n, rs_version *v)
{
	size_t start = 0;
	int part = 0;
	if (!s)
		return -1;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || s[i] == '.') {
			if (part > 2 || parse_num(s + start, i - start, &v->v[part]) < 0)
				return -1;
			part++;
			start = i + 1;
		}
	}
	return part == 3 ? 0 : -1;
}

int rs_version_cmp(const rs_version *a, const rs_version *b)
{
	for (int i = 0; i < 3; i++)
		if (a->v[i] != b->v[i])
			return a->v[i] < b->v[i] ? -1 : 1;
	return 0;
}

void rs_version_str(const rs_version *v, char buf[24])
{
	snprintf(buf, 24, "%" PRIu32 ".%" PRIu32 ".%" PRIu32, v->v[0], v->v[1], v->v[2]);
}

/* A non-negative decimal int64 without leading zeros (Unix seconds). */
static int parse_i64(const char *s, size_t n, int64_t *out)
{
	int64_t v = 0;
	if (n == 0 || n > 18 || (n > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

enum { M_TIMESTAMP, M_FILE, M_VERSION, M_PLATFORM, M_EXPIRES, M_COUNT };
static const char *const meta_keys[M_COUNT] = { "timestamp", "file", "version", "platform", "expires" };

int rs_meta_parse(const char *tc, size_t n, rs_meta *m, char *err, size_t errlen)
{
	unsigned seen = 0;
	size_t start = 0;
	char msg[160];
	memset(m, 0, sizeof *m);
	if (!tc || n > RS_TRUSTED_MAX) {
		seterr(err, errlen, "trusted comment: too long");
		return -1;
	}
	for (size_t i = 0; i <= n; i++) {
		if (i < n && tc[i] != '\t')
			continue;
		const char *f = tc + start, *colon = memchr(f, ':', i - start);
		size_t flen = i - start;
		start = i + 1;
		if (!colon) {
			seterr(err, errlen, "trusted comment: a field without ':'");
			return -1;
		}
		size_t klen = (size_t)(colon - f), vlen = flen - klen - 1;
		const char *val = colon + 1;
		int k = -1;
		for (int j = 0; j < M_COUNT; j++)
			if (strlen(meta_keys[j]) == klen && !memcmp(meta_keys[j], f, klen))
				k = j;
		if (k < 0) {
			snprintf(msg, sizeof msg, "trusted comment: unknown field '%.*s'", (int)(klen > 32 ? 32 : klen), f);
			seterr(err, errlen, msg);
			return -1;
		}
		if (seen & (1u << k)) {
			snprintf(msg, sizeof msg, "trusted comment: field '%s' appears twice", meta_keys[k]);
			seterr(err, errlen, msg);
			return -1;
		}
		seen |= 1u << k;
		int bad = 0;
		switch (k) {
		case M_TIMESTAMP:
			bad = parse_i64(val, vlen, &m->timestamp);
			break;
		case M_EXPIRES:
			bad = parse_i64(val, vlen, &m->expires);
			break;
		case M_VERSION:
			bad = rs_version_parse(val, vlen, &m->version);
			break;
		case M_FILE: /* the signature covers SHA256SUMS and nothing else */
			bad = vlen != strlen(RS_SUMS_NAME) || memcmp(val, RS_SUMS_NAME, vlen);
			break;
		case M_PLATFORM:
			bad = vlen == 0 || vlen >= sizeof m->platform;
			for (size_t j = 0; !bad && j < vlen; j++) {
				char c = val[j];
				bad = !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_');
			}
			if (!bad)
				memcpy(m->platform, val, vlen);
			break;
		}
		if (bad) {
			snprintf(msg, sizeof msg, "trusted comment: bad value for '%s'", meta_keys[k]);
			seterr(err, errlen, msg);
			return -1;
		}
	}
	if (seen != (1u << M_COUNT) - 1) {
		for (int j = 0; j < M_COUNT; j++)
			if (!(seen & (1u << j))) {
				snprintf(msg, sizeof msg, "trusted comment: field '%s' is missing", meta_keys[j]);
				seterr(err, errlen, msg);
				break;
			}
		return -1;
	}
	return 0;
}

int rs_meta_format(const rs_meta *m, char *buf, size_t cap)
{
	char v[24];
	rs_version_str(&m->version, v);
	int k = snprintf(buf, cap, "timestamp:%" PRId64 "\tfile:%s\tversion:%s\tplatform:%s\texpires:%" PRId64,
			 m->timestamp, RS_SUMS_NAME, v, m->platform, m->expires);
	return k < 0 || (size_t)k >= cap ? -1 : 0;
}
