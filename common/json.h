/* common/json.h — a bounded JSON (RFC 8259) parser and a small writer.
 *
 * Contract:
 *  - json_parse() reads exactly `len` bytes (no NUL needed), builds a tree
 *    in memory owned by `doc`, and returns 0; on malformed input it returns
 *    -1 and writes one line "offset N: reason" into err (caller-owned).
 *  - Strings are unescaped into UTF-8 and NUL-terminated; `n` is their byte
 *    length (a string may contain an escaped NUL, so use n, not strlen).
 *  - Limits (reasons): nesting depth <= JSON_MAX_DEPTH (a real config nests
 *    < 10 deep; tokenizer.json < 6); input size is the caller's bound.
 *  - Duplicate object keys are rejected: two readers of one file must never
 *    disagree about which value is meant.
 *  - Invalid UTF-8 in strings and lone surrogate escapes are rejected.
 *  - json_free() releases everything; the doc may then be reused.
 */
#ifndef MLXR_JSON_H
#define MLXR_JSON_H

#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64

typedef enum {
	JSON_NULL,
	JSON_FALSE,
	JSON_TRUE,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
	JSON_TYPE_COUNT
} json_type;

typedef struct json_value json_value;
struct json_value {
	json_type type;
	uint32_t n;        /* string: bytes; array: items; object: members */
	int is_int;        /* number written without fraction/exponent, fits int64 */
	int64_t i;         /* valid when is_int */
	double num;        /* every number */
	const char *str;   /* string: NUL-terminated UTF-8 */
	json_value *items; /* array: n values; object: 2n values (key, value)... */
};

typedef struct {
	json_value *root;
	void *blocks; /* arena chain; private */
} json_doc;

int json_parse(const char *buf, size_t len, json_doc *doc, char *err, size_t errlen);
void json_free(json_doc *doc);

/* Lookups: NULL when absent or obj is not an object / index out of range. */
const json_value *json_get(const json_value *obj, const char *key);
const json_value *json_at(const json_value *arr, uint32_t idx);
/* Typed lookups: return 0 and fill *out when present with the right type,
 * 1 when absent (out untouched), -1 when present with the wrong type. */
int json_get_int(const json_value *obj, const char *key, int64_t *out);
int json_get_num(const json_value *obj, const char *key, double *out);
int json_get_bool(const json_value *obj, const char *key, int *out);
int json_get_str(const json_value *obj, const char *key, const char **out);

/* Writer: appends to a growable buffer; errors are sticky (check jw_finish). */
typedef struct {
	char *buf;
	size_t len, cap;
	int oom;
} jw_buf;

void jw_raw(jw_buf *w, const char *s, size_t n);
void jw_cstr(jw_buf *w, const char *s);               /* raw C string */
void jw_str(jw_buf *w, const char *s, size_t n);      /* quoted, escaped */
void jw_fmt(jw_buf *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* NUL-terminates; returns 0, or -1 if any allocation failed. */
int jw_finish(jw_buf *w);
void jw_free(jw_buf *w);

#endif
