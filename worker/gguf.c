/* worker/gguf.c — bounded GGUF reader; see gguf.h for the contract.
 *
 * Everything is read through a (pointer, bytes-left) cursor. A failed read
 * sets a sticky flag; the first error message wins. Spec references are to
 * ggml/docs/gguf.md ("spec") and ggml/src/gguf.cpp ("ggml").
 */
#include "worker/gguf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits, with reasons. */
#define GGUF_MAX_KEY 1024       /* real keys are < 100 bytes */
#define GGUF_MAX_NAME 256       /* ggml's GGML_MAX_NAME is 64 */
#define GGUF_MAX_ALIGNMENT 65536 /* real files use 32; a page is plenty */

typedef struct {
	const uint8_t *p;
	size_t left;
	const uint8_t *start;
	char *err;
	size_t errlen;
	int failed;
} cursor;

static void cfail(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cfail(cursor *c, const char *fmt, ...)
{
	if (c->failed)
		return;
	c->failed = 1;
	if (!c->err || !c->errlen)
		return;
	int n = snprintf(c->err, c->errlen, "offset %zu: ", (size_t)(c->p - c->start));
	if (n < 0 || (size_t)n >= c->errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
}

static int take(cursor *c, size_t n, const uint8_t **out, const char *what)
{
	if (c->failed)
		return -1;
	if (n > c->left) {
		cfail(c, "truncated file: %s needs %zu bytes, %zu left", what, n, c->left);
		return -1;
	}
	*out = c->p;
	c->p += n;
	c->left -= n;
	return 0;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int get_u32(cursor *c, uint32_t *v, const char *what)
{
	const uint8_t *p;
	if (take(c, 4, &p, what))
		return -1;
	*v = rd32(p);
	return 0;
}

static int get_u64(cursor *c, uint64_t *v, const char *what)
{
	const uint8_t *p;
	if (take(c, 8, &p, what))
		return -1;
	*v = rd64(p);
	return 0;
}

/* spec: gguf_string_t = uint64 len + len bytes (no NUL). */
static int get_str(cursor *c, const uint8_t **s, uint64_t *len, uint64_t cap, const char *what)
{
	if (get_u64(c, len, what))
		return -1;
	if (*len > cap) {
		cfail(c, "%s length %llu exceeds the limit %llu", what, (unsigned long long)*len,
		      (unsigned long long)cap);
		return -1;
	}
	if (*len > c->left) {
		cfail(c, "truncated file: %s of %llu bytes, %zu left", what, (unsigned long long)*len,
		      c->left);
		return -1;
	}
	return take(c, (size_t)*len, s, what);
}

static char *dup_name(cursor *c, const uint8_t *s, uint64_t len, const char *what)
{
	if (len == 0) {
		cfail(c, "empty %s", what);
		return NULL;
	}
	if (memchr(s, 0, (size_t)len)) {
		cfail(c, "%s contains a NUL byte", what);
		return NULL;
	}
	char *d = malloc((size_t)len + 1);
	if (!d) {
		cfail(c, "out of memory");
		return NULL;
	}
	memcpy(d, s, (size_t)len);
	d[len] = 0;
	return d;
}

static size_t scalar_size(uint32_t t)
{
	switch (t) {
	case GGUF_V_UINT8: case GGUF_V_INT8: case GGUF_V_BOOL: return 1;
	case GGUF_V_UINT16: case GGUF_V_INT16: return 2;
	case GGUF_V_UINT32: case GGUF_V_INT32: case GGUF_V_FLOAT32: return 4;
	case GGUF_V_UINT64: case GGUF_V_INT64: case GGUF_V_FLOAT64: return 8;
	default: return 0;
	}
}

static int read_value(cursor *c, gguf_kv *kv)
{
	if (kv->type >= GGUF_V_COUNT) {
		cfail(c, "key '%s': unknown value type %u", kv->key, kv->type);
		return -1;
	}
	if (kv->type == GGUF_V_STRING) {
		/* Strings may be as long as what is left (chat templates are KBs). */
		return get_str(c, &kv->data, &kv->n, UINT64_MAX, "string value");
	}
	if (kv->type != GGUF_V_ARRAY) {
		kv->n = 1;
		const uint8_t *p;
		if (take(c, scalar_size(kv->type), &p, "value"))
			return -1;
		if (kv->type == GGUF_V_BOOL && *p > 1) {
			cfail(c, "key '%s': bool value %u is not 0 or 1", kv->key, *p);
			return -1;
		}
		kv->data = p;
		return 0;
	}
	if (get_u32(c, &kv->arr_type, "array type") || get_u64(c, &kv->n, "array count"))
		return -1;
	if (kv->arr_type == GGUF_V_ARRAY) {
		/* ggml rejects nested arrays too; nothing real uses them. */
		cfail(c, "key '%s': nested arrays are not supported", kv->key);
		return -1;
	}
	if (kv->arr_type >= GGUF_V_COUNT) {
		cfail(c, "key '%s': unknown array element type %u", kv->key, kv->arr_type);
		return -1;
	}
	if (kv->arr_type != GGUF_V_STRING) {
		size_t es = scalar_size(kv->arr_type);
		/* Count capped by the bytes left, checked by division. */
		if (kv->n > c->left / es) {
			cfail(c, "key '%s': array of %llu elements does not fit in the %zu bytes left",
			      kv->key, (unsigned long long)kv->n, c->left);
			return -1;
		}
		return take(c, (size_t)kv->n * es, &kv->data, "array");
	}
	/* A string element takes at least its 8-byte length. */
	if (kv->n > c->left / 8) {
		cfail(c, "key '%s': array of %llu strings does not fit in the %zu bytes left", kv->key,
		      (unsigned long long)kv->n, c->left);
		return -1;
	}
	kv->data = c->p;
	kv->str_off = malloc((size_t)(kv->n ? kv->n : 1) * sizeof(uint64_t));
	if (!kv->str_off) {
		cfail(c, "out of memory");
		return -1;
	}
	for (uint64_t i = 0; i < kv->n; i++) {
		const uint8_t *s;
		uint64_t len;
		kv->str_off[i] = (uint64_t)(c->p - c->start);
		if (get_str(c, &s, &len, UINT64_MAX, "array string"))
			return -1;
	}
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	return strcmp(x, y);
}

/* Sets *dup to the first duplicate among n names (NULL if none); -1 on OOM. */
static int find_duplicate(char **names, uint64_t n, const char **dupout)
{
	*dupout = NULL;
	if (n < 2)
		return 0;
	char **s = malloc((size_t)n * sizeof(*s));
	if (!s)
		return -1;
	memcpy(s, names, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), cmp_name);
	const char *dup = NULL;
	for (uint64_t i = 1; i < n && !dup; i++)
		if (!strcmp(s[i - 1], s[i]))
			dup = s[i];
	free(s);
	*dupout = dup;
	return 0;
}

static int cmp_off(const void *a, const void *b)
{
	const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

void gguf_free(gguf_file *g)
{
	if (g->kv)
		for (uint64_t i = 0; i < g->n_kv; i++) {
			free(g->kv[i].key);
			free(g->kv[i].str_off);
		}
	if (g->tensors)
		for (uint64_t i = 0; i < g->n_tensors; i++)
			free(g->tensors[i].name);
	free(g->kv);
	free(g->tensors);
	memset(g, 0, sizeof(*g));
}

static int read_tensor_info(cursor *c, gguf_tensor *t)
{
	const uint8_t *s;
	uint64_t len;
	if (get_str(c, &s, &len, GGUF_MAX_NAME, "tensor name"))
		return -1;
	if (!(t->name = dup_name(c, s, len, "tensor name")))
		return -1;
	if (get_u32(c, &t->n_dims, "tensor dimension count"))
		return -1;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
		cfail(c, "tensor '%s': %u dimensions (1..%d allowed)", t->name, t->n_dims, GGUF_MAX_DIMS);
		return -1;
	}
	t->n_elem = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if (d >= t->n_dims)
			continue;
		if (get_u64(c, &t->ne[d], "tensor dimension"))
			return -1;
		if (t->ne[d] == 0 || t->ne[d] > INT64_MAX) {
			cfail(c, "tensor '%s': dimension %u is %llu", t->name, d,
			      (unsigned long long)t->ne[d]);
			return -1;
		}
		/* ggml: the element count must fit int64; divide before multiplying. */
		if (t->n_elem > (uint64_t)INT64_MAX / t->ne[d]) {
			cfail(c, "tensor '%s': element count overflows", t->name);
			return -1;
		}
		t->n_elem *= t->ne[d];
	}
	if (get_u32(c, &t->type, "tensor type"))
		return -1;
	uint32_t blck = ggml_blck_size(t->type), tsz = ggml_type_size(t->type);
	if (!blck) {
		cfail(c, "tensor '%s': unknown or unsupported tensor type %u", t->name, t->type);
		return -1;
	}
	if (t->ne[0] % blck) {
		cfail(c, "tensor '%s': row of %llu elements is not a multiple of the %s block (%u)",
		      t->name, (unsigned long long)t->ne[0], ggml_type_name(t->type), blck);
		return -1;
	}
	uint64_t blocks = t->n_elem / blck;
	if (blocks > UINT64_MAX / tsz) {
		cfail(c, "tensor '%s': byte size overflows", t->name);
		return -1;
	}
	t->nbytes = blocks * tsz;
	if (get_u64(c, &t->offset, "tensor offset"))
		return -1;
	return 0;
}

int gguf_parse(gguf_file *g, const uint8_t *buf, size_t size, char *err, size_t errlen)
{
	memset(g, 0, sizeof(*g));
	g->buf = buf;
	g->size = size;
	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	cursor c = { buf, size, buf, err, errlen, 0 };
	const uint8_t *p;
	char **names = NULL;
	gguf_tensor **by_off = NULL;

	/* spec: magic "GGUF", uint32 version, uint64 tensor_count, uint64 kv_count. */
	if (take(&c, 4, &p, "magic"))
		goto fail;
	if (memcmp(p, "GGUF", 4)) {
		cfail(&c, "not a GGUF file (bad magic)");
		goto fail;
	}
	if (get_u32(&c, &g->version, "version"))
		goto fail;
	if (g->version != 2 && g->version != 3) {
		cfail(&c, "unsupported GGUF version %u%s (2 and 3 are read)", g->version,
		      (g->version & 0xffff) == 0 ? ", big-endian file?" : "");
		goto fail;
	}
	uint64_t n_tensors, n_kv;
	if (get_u64(&c, &n_tensors, "tensor count") || get_u64(&c, &n_kv, "metadata count"))
		goto fail;
	/* A key-value pair takes at least 8 (key length) + 1 + 4 (type) + 1 bytes;
	 * a tensor info 8 + 1 + 4 + 8 + 4 + 8. Counts beyond that cannot fit. */
	if (n_kv > c.left / 14) {
		cfail(&c, "metadata count %llu does not fit in the file", (unsigned long long)n_kv);
		goto fail;
	}
	if (n_tensors > c.left / 33) {
		cfail(&c, "tensor count %llu does not fit in the file", (unsigned long long)n_tensors);
		goto fail;
	}
	g->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof(*g->kv));
	g->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof(*g->tensors));
	if (!g->kv || !g->tensors) {
		cfail(&c, "out of memory");
		goto fail;
	}
	for (uint64_t i = 0; i < n_kv; i++) {
		gguf_kv *kv = &g->kv[i];
		const uint8_t *s;
		uint64_t len;
		if (get_str(&c, &s, &len, GGUF_MAX_KEY, "key"))
			goto fail;
		if (!(kv->key = dup_name(&c, s, len, "key")))
			goto fail;
		g->n_kv = i + 1;
		if (get_u32(&c, &kv->type, "value type") || read_value(&c, kv))
			goto fail;
	}
	names = malloc((size_t)(n_kv > n_tensors ? n_kv : n_tensors ? n_tensors : 1) * sizeof(*names));
	if (!names) {
		cfail(&c, "out of memory");
		goto fail;
	}
	for (uint64_t i = 0; i < n_kv; i++)
		names[i] = g->kv[i].key;
	const char *dup;
	if (find_duplicate(names, n_kv, &dup))
		goto fail;
	if (dup) {
		cfail(&c, "duplicate key '%s'", dup);
		goto fail;
	}
	/* spec: general.alignment is a uint32, a power of two; default 32. */
	const gguf_kv *al = gguf_find(g, "general.alignment");
	if (al) {
		if (al->type != GGUF_V_UINT32) {
			cfail(&c, "general.alignment is not a uint32");
			goto fail;
		}
		uint32_t a = rd32(al->data);
		if (a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT) {
			cfail(&c, "general.alignment %u is not a power of two <= %d", a, GGUF_MAX_ALIGNMENT);
			goto fail;
		}
		g->alignment = a;
	}
	for (uint64_t i = 0; i < n_tensors; i++) {
		g->n_tensors = i + 1;
		if (read_tensor_info(&c, &g->tensors[i]))
			goto fail;
		if (g->tensors[i].offset % g->alignment) {
			cfail(&c, "tensor '%s': data offset %llu is not aligned to %llu", g->tensors[i].name,
			      (unsigned long long)g->tensors[i].offset, (unsigned long long)g->alignment);
			goto fail;
		}
	}
	g->n_tensors = n_tensors;
	for (uint64_t i = 0; i < n_tensors; i++)
		names[i] = g->tensors[i].name;
	if (find_duplicate(names, n_tensors, &dup))
		goto fail;
	if (dup) {
		cfail(&c, "duplicate tensor name '%s'", dup);
		goto fail;
	}
	/* spec: the data section starts at the next multiple of the alignment. */
	uint64_t hdr = (uint64_t)(c.p - buf);
	uint64_t start = hdr + (g->alignment - hdr % g->alignment) % g->alignment;
	if (n_tensors && start > size) {
		cfail(&c, "data section starts at %llu, past the end of the file (%zu bytes)",
		      (unsigned long long)start, size);
		goto fail;
	}
	/* With no tensors the (empty) data section may end before the padding
	 * would: it then starts at the end of the file, so data_start <= size
	 * holds for every accepted file (found by fuzz/gguf_fuzzer). */
	g->data_start = start <= size ? start : size;
	uint64_t data_len = start <= size ? size - start : 0;
	by_off = malloc((size_t)(n_tensors ? n_tensors : 1) * sizeof(*by_off));
	if (!by_off) {
		cfail(&c, "out of memory");
		goto fail;
	}
	for (uint64_t i = 0; i < n_tensors; i++) {
		gguf_tensor *t = &g->tensors[i];
		if (t->offset > data_len || t->nbytes > data_len - t->offset) {
			cfail(&c, "tensor '%s': data [%llu, +%llu) lies past the end of the file (data section is %llu bytes)",
			      t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
			      (unsigned long long)data_len);
			goto fail;
		}
		t->data = buf + start + t->offset;
		by_off[i] = t;
	}
	qsort(by_off, (size_t)n_tensors, sizeof(*by_off), cmp_off);
	for (uint64_t i = 1; i < n_tensors; i++) {
		const gguf_tensor *a = by_off[i - 1], *b = by_off[i];
		if (a->offset + a->nbytes > b->offset) {
			cfail(&c, "tensors '%s' and '%s' overlap", a->name, b->name);
			goto fail;
		}
	}
	free(names);
	free(by_off);
	return 0;
fail:
	if (!c.failed)
		cfail(&c, "out of memory");
	free(names);
	free(by_off);
	gguf_free(g);
	return -1;
}

const gguf_kv *gguf_find(const gguf_file *g, const char *key)
{
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (g->kv[i].key && !strcmp(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name)
{
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if (!strcmp(g->tensors[i].name, name))
			return &g->tensors[i];
	return NULL;
}

static int scalar_i64(uint32_t type, const uint8_t *p, int64_t *out, uint64_t *uout, int *is_unsigned)
{
	*is_unsigned = 0;
	switch (type) {
	case GGUF_V_UINT8: *out = p[0]; return 0;
	case GGUF_V_INT8: *out = (int8_t)p[0]; return 0;
	case GGUF_V_UINT16: *out = (uint16_t)(p[0] | p[1] << 8); return 0;
	case GGUF_V_INT16: *out = (int16_t)(uint16_t)(p[0] | p[1] << 8); return 0;
	case GGUF_V_UINT32: *out = rd32(p); return 0;
	case GGUF_V_INT32: *out = (int32_t)rd32(p); return 0;
	case GGUF_V_UINT64: *uout = rd64(p); *is_unsigned = 1; return 0;
	case GGUF_V_INT64: *out = (int64_t)rd64(p); return 0;
	default: return -1;
	}
}

int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out)
{
	const gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return 1;
	int64_t v = 0;
	uint64_t u = 0;
	int is_u;
	if (kv->type == GGUF_V_ARRAY || kv->type == GGUF_V_STRING ||
	    scalar_i64(kv->type, kv->data, &v, &u, &is_u))
		return -1;
	if (is_u) {
		*out = u;
		return 0;
	}
	if (v < 0)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

static double scalar_f64(uint32_t type, const uint8_t *p)
{
	int64_t v = 0;
	uint64_t u = 0;
	int is_u;
	if (type == GGUF_V_FLOAT32) {
		uint32_t b = rd32(p);
		float f;
		memcpy(&f, &b, 4);
		return f;
	}
	if (type == GGUF_V_FLOAT64) {
		uint64_t b = rd64(p);
		double d;
		memcpy(&d, &b, 8);
		return d;
	}
	if (type == GGUF_V_BOOL)
		return p[0];
	if (scalar_i64(type, p, &v, &u, &is_u))
		return 0;
	return is_u ? (double)u : (double)v;
}

int gguf_get_f64(const gguf_file *g, const char *key, double *out)
{
	const gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return 1;
	if (kv->type == GGUF_V_ARRAY || kv->type == GGUF_V_STRING || kv->type == GGUF_V_BOOL)
		return -1;
	*out = scalar_f64(kv->type, kv->data);
	return 0;
}

int gguf_get_bool(const gguf_file *g, const char *key, int *out)
{
	const gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return 1;
	if (kv->type != GGUF_V_BOOL)
		return -1;
	*out = kv->data[0] != 0;
	return 0;
}

int gguf_get_str(const gguf_file *g, const char *key, const char **s, uint64_t *len)
{
	const gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return 1;
	if (kv->type != GGUF_V_STRING)
		return -1;
	*s = (const char *)kv->data;
	*len = kv->n;
	return 0;
}

void gguf_arr_str(const gguf_file *g, const gguf_kv *kv, uint64_t i, const char **s, uint64_t *len)
{
	const uint8_t *p = g->buf + kv->str_off[i];
	*len = rd64(p);
	*s = (const char *)p + 8;
}

double gguf_arr_f64(const gguf_kv *kv, uint64_t i)
{
	return scalar_f64(kv->arr_type, kv->data + i * scalar_size(kv->arr_type));
}

int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i)
{
	int64_t v = 0;
	uint64_t u = 0;
	int is_u;
	if (scalar_i64(kv->arr_type, kv->data + i * scalar_size(kv->arr_type), &v, &u, &is_u))
		return 0;
	return is_u ? (u > INT64_MAX ? INT64_MAX : (int64_t)u) : v;
}

/* ggml.c type_traits: block size and bytes per block. */
static const struct {
	const char *name;
	uint32_t blck, size;
} types[GGML_TYPE_COUNT] = {
	[GGML_F32] = { "F32", 1, 4 },
	[GGML_F16] = { "F16", 1, 2 },
	[GGML_Q4_0] = { "Q4_0", 32, 18 },
	[GGML_Q4_1] = { "Q4_1", 32, 20 },
	[GGML_Q5_0] = { "Q5_0", 32, 22 },
	[GGML_Q5_1] = { "Q5_1", 32, 24 },
	[GGML_Q8_0] = { "Q8_0", 32, 34 },
	[GGML_Q4_K] = { "Q4_K", 256, 144 },
	[GGML_Q5_K] = { "Q5_K", 256, 176 },
	[GGML_Q6_K] = { "Q6_K", 256, 210 },
	[GGML_BF16] = { "BF16", 1, 2 },
};

const char *ggml_type_name(uint32_t type)
{
	return type < GGML_TYPE_COUNT ? types[type].name : NULL;
}

uint32_t ggml_blck_size(uint32_t type)
{
	return type < GGML_TYPE_COUNT ? types[type].blck : 0;
}

uint32_t ggml_type_size(uint32_t type)
{
	return type < GGML_TYPE_COUNT ? types[type].size : 0;
}
