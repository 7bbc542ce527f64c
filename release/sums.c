/* release/sums.c — SHA256SUMS as sha256sum(1) writes it (text mode "  " or
 * binary mode " *"), restricted to plain file names. */
#include <stdio.h>
#include <string.h>

#include "release/release.h"

static void seterr(char *err, size_t errlen, size_t line, const char *msg)
{
	if (errlen)
		snprintf(err, errlen, "SHA256SUMS line %zu: %s", line, msg);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '-' || c == '+';
}

int rs_sums_parse(const char *buf, size_t len, rs_sums *out, char *err, size_t errlen)
{
	size_t lineno = 0;
	const char *p = buf, *end = buf + len;
	out->n = 0;
	if (!buf || len > RS_SUMS_MAX_FILE) {
		seterr(err, errlen, 0, "file too long");
		return -1;
	}
	if (len == 0) {
		seterr(err, errlen, 0, "empty");
		return -1;
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		lineno++;
		if (!nl) {
			seterr(err, errlen, lineno, "no line ending");
			return -1;
		}
		size_t n = (size_t)(nl - p);
		/* 64 hex, ' ', ' ' or '*', a name of 1..RS_NAME_MAX */
		if (n < 67 || n > 66 + RS_NAME_MAX) {
			seterr(err, errlen, lineno, "not \"HEX64  NAME\"");
			return -1;
		}
		if (out->n == RS_SUMS_MAX) {
			seterr(err, errlen, lineno, "too many lines");
			return -1;
		}
		rs_sum *e = &out->e[out->n];
		for (int i = 0; i < 32; i++) {
			int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
			if (hi < 0 || lo < 0) {
				seterr(err, errlen, lineno, "the hash is not 64 hex digits");
				return -1;
			}
			e->sha256[i] = (uint8_t)(hi << 4 | lo);
		}
		if (p[64] != ' ' || (p[65] != ' ' && p[65] != '*')) {
			seterr(err, errlen, lineno, "not \"HEX64  NAME\"");
			return -1;
		}
		size_t nl_len = n - 66;
		const char *name = p + 66;
		/* no paths, no hidden names, nothing sha256sum would escape */
		if (name[0] == '.') {
			seterr(err, errlen, lineno, "a name may not start with '.'");
			return -1;
		}
		for (size_t i = 0; i < nl_len; i++)
			if (!name_char(name[i])) {
				seterr(err, errlen, lineno, "a name may hold only A-Z a-z 0-9 . _ - +");
				return -1;
			}
		memcpy(e->name, name, nl_len);
		e->name[nl_len] = 0;
		if (rs_sums_find(out, e->name)) {
			seterr(err, errlen, lineno, "a name listed twice");
			return -1;
		}
		out->n++;
		p = nl + 1;
	}
	return 0;
}

const rs_sum *rs_sums_find(const rs_sums *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->e[i].name, name))
			return &s->e[i];
	return NULL;
}
