/* fuzz/json_fuzzer.c — common/json.c json_parse() on arbitrary bytes, and a
 * differential check against cJSON (Debian libcjson-dev, linked into the
 * fuzz build only).
 *
 * Checked:
 *  - no memory error, leak or UB (sanitizers);
 *  - the contract of json.h on every accepted document: strings are
 *    NUL-terminated valid UTF-8 of n bytes, duplicate keys absent, depth
 *    <= JSON_MAX_DEPTH, is_int numbers equal the integer they spell;
 *  - accept/reject agreement with cJSON, and equal values (types, strings,
 *    numbers bit for bit, members in order) when both accept.
 *
 * Exclusions (legitimate differences, each documented):
 *  E1 cJSON treats every byte <= 0x20 as whitespace (RFC 8259 §2 allows
 *     only space, tab, LF, CR) and accepts raw control characters in strings
 *     (§7 forbids them): inputs with such a byte are not compared on
 *     accept/reject.
 *  E2 cJSON's number grammar is strtod's over [0-9+-.eE] runs: it accepts
 *     "01", "1.", "-.5", "1.e3"; we implement §6 exactly. Inputs with a
 *     number token that is not §6-valid are not compared on accept/reject.
 *  E3 Numbers longer than 63 characters: cJSON reads at most 63, we at most
 *     64 (json.c): such inputs are not compared.
 *  E4 We reject duplicate keys, invalid UTF-8 and lone surrogates (json.h
 *     contract); cJSON accepts the first two. When we reject for one of
 *     these reasons (our error message says which), cJSON may accept.
 *  E5 Depth: we reject > 64 nested containers, cJSON > 1000.
 *  E6 cJSON skips a UTF-8 byte order mark at the start; RFC 8259 §8.1 says
 *     a parser MAY ignore it, we do not.
 *  E7 Strings are C strings in cJSON: a string with an escaped NUL
 *     ("\u0000") is compared up to its first NUL only.
 *  E8 cJSON 1.7.15 reads a \u escape with a non-hex digit as U+0000
 *     (parse_hex4 returns 0) instead of failing: inputs with such an escape
 *     are not compared on accept/reject.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "common/json.h"
#include "fuzz/fuzz.h"

/* §6 number at s[0..n): -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int rfc_number(const unsigned char *s, size_t n)
{
	size_t i = 0;
	if (i < n && s[i] == '-') i++;
	if (i >= n) return 0;
	if (s[i] == '0') i++;
	else if (s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
	else return 0;
	if (i < n && s[i] == '.') {
		i++;
		if (i >= n || s[i] < '0' || s[i] > '9') return 0;
		while (i < n && s[i] >= '0' && s[i] <= '9') i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-')) i++;
		if (i >= n || s[i] < '0' || s[i] > '9') return 0;
		while (i < n && s[i] >= '0' && s[i] <= '9') i++;
	}
	return i == n;
}

static int numchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

/* 1 when the input has a feature where cJSON is knowingly lenient or limited
 * (E1, E2, E3, E5, E6). A light lexer: strings with escapes, number runs. */
static int cjson_differs(const unsigned char *s, size_t n)
{
	int depth = 0;
	if (n >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF)
		return 1; /* E6 */
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		if (c == '"') {
			for (i++; i < n && s[i] != '"'; i++) {
				if (s[i] < 0x20)
					return 1; /* E1 */
				if (s[i] == '\\' && i + 1 < n && s[i + 1] == 'u') {
					for (size_t k = 2; k < 6; k++)
						if (i + k >= n || !isxdigit(s[i + k]))
							return 1; /* E8 */
				}
				if (s[i] == '\\')
					i++;
			}
			i++;
			continue;
		}
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
			return 1; /* E1 */
		if (c == '[' || c == '{') {
			if (++depth > JSON_MAX_DEPTH)
				return 1; /* E5 */
		} else if (c == ']' || c == '}') {
			depth--;
		}
		if (c == '-' || (c >= '0' && c <= '9')) {
			size_t j = i;
			while (j < n && numchar(s[j]))
				j++;
			if (!rfc_number(s + i, j - i) || j - i > 63)
				return 1; /* E2, E3 */
			i = j;
			continue;
		}
		i++;
	}
	return 0;
}

static int valid_utf8(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = p[i];
		size_t k;
		uint32_t cp;
		if (c < 0x80) { i++; continue; }
		else if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
		else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
		else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
		else return 0;
		if (n - i <= k) return 0;
		for (size_t j = 1; j <= k; j++) {
			if ((p[i + j] & 0xC0) != 0x80) return 0;
			cp = (cp << 6) | (p[i + j] & 0x3F);
		}
		if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += k + 1;
	}
	return 1;
}

/* The json.h contract on an accepted tree. */
static void check_tree(const json_value *v, int depth)
{
	FUZZ_CHECK(v->type < JSON_TYPE_COUNT, "type %d", v->type);
	switch (v->type) {
	case JSON_STRING:
		FUZZ_CHECK(v->str && v->str[v->n] == 0, "string not NUL-terminated");
		FUZZ_CHECK(valid_utf8((const unsigned char *)v->str, v->n), "accepted string is not valid UTF-8");
		break;
	case JSON_NUMBER:
		FUZZ_CHECK(!isnan(v->num), "NaN number");
		if (v->is_int)
			FUZZ_CHECK(fabs(v->num - (double)v->i) <= fabs(v->num) * 1e-15 + 0.5,
				   "is_int %lld vs %g", (long long)v->i, v->num);
		break;
	case JSON_ARRAY:
	case JSON_OBJECT: {
		FUZZ_CHECK(depth < JSON_MAX_DEPTH, "depth %d accepted", depth);
		uint32_t m = v->type == JSON_OBJECT ? 2 * v->n : v->n;
		for (uint32_t i = 0; i < m; i++)
			check_tree(&v->items[i], depth + 1);
		if (v->type == JSON_OBJECT) {
			for (uint32_t i = 0; i < v->n; i++) {
				FUZZ_CHECK(v->items[2 * i].type == JSON_STRING, "object key is not a string");
				/* json_get must find the first (only) member of each key. */
				if (!memchr(v->items[2 * i].str, 0, v->items[2 * i].n))
					FUZZ_CHECK(json_get(v, v->items[2 * i].str) == &v->items[2 * i + 1],
						   "json_get finds another member for key %u", i);
				for (uint32_t j = 0; j < i && v->n <= 64; j++)
					FUZZ_CHECK(v->items[2 * i].n != v->items[2 * j].n ||
						   memcmp(v->items[2 * i].str, v->items[2 * j].str, v->items[2 * i].n),
						   "duplicate key accepted");
			}
		}
		break;
	}
	default:
		break;
	}
}

/* E7: cJSON strings end at the first NUL. */
static void same_string(const char *ours, uint32_t n, const char *theirs)
{
	size_t cut = strnlen(ours, n);
	FUZZ_CHECK(theirs && strlen(theirs) == cut && memcmp(ours, theirs, cut) == 0, "strings differ");
}

static void same_value(const json_value *v, const cJSON *c)
{
	switch (v->type) {
	case JSON_NULL: FUZZ_CHECK(cJSON_IsNull(c), "null vs cJSON type %d", c->type); break;
	case JSON_TRUE: FUZZ_CHECK(cJSON_IsTrue(c), "true vs cJSON type %d", c->type); break;
	case JSON_FALSE: FUZZ_CHECK(cJSON_IsFalse(c), "false vs cJSON type %d", c->type); break;
	case JSON_NUMBER:
		FUZZ_CHECK(cJSON_IsNumber(c), "number vs cJSON type %d", c->type);
		FUZZ_CHECK(memcmp(&v->num, &c->valuedouble, sizeof(double)) == 0, "number %.17g vs cJSON %.17g",
			   v->num, c->valuedouble);
		break;
	case JSON_STRING:
		FUZZ_CHECK(cJSON_IsString(c), "string vs cJSON type %d", c->type);
		same_string(v->str, v->n, c->valuestring);
		break;
	case JSON_ARRAY:
	case JSON_OBJECT: {
		int obj = v->type == JSON_OBJECT;
		FUZZ_CHECK(obj ? cJSON_IsObject(c) : cJSON_IsArray(c), "container vs cJSON type %d", c->type);
		FUZZ_CHECK((int)v->n == cJSON_GetArraySize(c), "%u members vs cJSON %d", v->n, cJSON_GetArraySize(c));
		const cJSON *e = c->child;
		for (uint32_t i = 0; i < v->n && e; i++, e = e->next) {
			if (obj) {
				same_string(v->items[2 * i].str, v->items[2 * i].n, e->string);
				same_value(&v->items[2 * i + 1], e);
			} else {
				same_value(&v->items[i], e);
			}
		}
		break;
	}
	default:
		FUZZ_CHECK(0, "bad type %d", v->type);
	}
}

/* E4, E5: rejections of ours that cJSON need not share. */
static int ours_stricter(const char *err)
{
	static const char *why[] = { "duplicate object key", "invalid UTF-8", "surrogate", "nesting deeper",
				     "number longer" };
	for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++)
		if (strstr(err, why[i]))
			return 1;
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_doc doc;
	char err[160] = "";
	/* A copy of exactly `size` bytes: ASan then catches any read past the
	 * end, which the caller's buffer (NUL-terminated by libFuzzer) might
	 * hide. */
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	int ours = json_parse(buf, size, &doc, err, sizeof(err));
	if (ours == 0) {
		FUZZ_CHECK(doc.root != NULL, "accepted without a root");
		check_tree(doc.root, 0);
	} else {
		FUZZ_CHECK(err[0] != 0 && doc.root == NULL, "rejected without a message");
	}

	/* cJSON with an explicit length and a required terminator: the copy
	 * carries one NUL after the input. */
	char *z = malloc(size + 1);
	if (z) {
		memcpy(z, data, size);
		z[size] = 0;
		const char *end = NULL;
		cJSON *c = cJSON_ParseWithLengthOpts(z, size + 1, &end, 1);
		int theirs = c ? 0 : -1;
		if (!cjson_differs(data, size)) {
			if (ours == 0)
				FUZZ_CHECK(theirs == 0, "we accept, cJSON rejects");
			else if (theirs == 0)
				FUZZ_CHECK(ours_stricter(err), "we reject (%s), cJSON accepts", err);
		}
		if (ours == 0 && theirs == 0)
			same_value(doc.root, c);
		cJSON_Delete(c);
		free(z);
	}
	if (ours == 0)
		json_free(&doc);
	free(buf);
	return 0;
}
