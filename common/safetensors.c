/* common/safetensors.c — see safetensors.h. */
#include "common/safetensors.h"
#include "common/json.h"
#include "common/modelfiles.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_HUGE (2u << 20) /* x86-64 transparent huge page */

/* v rounded up to a whole number of huge pages (an address or a length). */
static uintptr_t st_huge_up(uintptr_t v)
{
	return (v + ST_HUGE - 1) & ~(uintptr_t)(ST_HUGE - 1);
}

/* Maps a shard read-only at a 2 MiB-aligned address with transparent
 * huge pages advised: where the page cache holds the file in 2 MiB folios
 * (read through such a mapping, or read() after eviction; not after a
 * plain write), the kernel maps them whole and decode streams at the
 * memory's full read bandwidth instead of about half (README, "Weights in
 * memory"). Returns NULL on failure. */
static const uint8_t *st_map_fd(int fd, size_t size)
{
	if (size > SIZE_MAX - ST_HUGE)
		return NULL;
	uint8_t *r = mmap(NULL, size + ST_HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r == MAP_FAILED)
		return NULL;
	uint8_t *a = (uint8_t *)st_huge_up((uintptr_t)r);
	size_t span = (size + 4095) & ~(size_t)4095;
	if (mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
		munmap(r, size + ST_HUGE);
		return NULL;
	}
	if (a > r)
		munmap(r, (size_t)(a - r));
	if (r + size + ST_HUGE > a + span)
		munmap(a + span, (size_t)(r + size + ST_HUGE - (a + span)));
	(void)madvise(a, span, MADV_HUGEPAGE); /* advice only */
	return a;
}

static const struct { const char *name; size_t size; } dtypes[ST_DTYPE_COUNT] = {
	[ST_F64] = { "F64", 8 }, [ST_F32] = { "F32", 4 }, [ST_F16] = { "F16", 2 }, [ST_BF16] = { "BF16", 2 },
	[ST_I64] = { "I64", 8 }, [ST_I32] = { "I32", 4 }, [ST_I16] = { "I16", 2 }, [ST_I8] = { "I8", 1 },
	[ST_U64] = { "U64", 8 }, [ST_U32] = { "U32", 4 }, [ST_U16] = { "U16", 2 }, [ST_U8] = { "U8", 1 },
	[ST_BOOL] = { "BOOL", 1 },
};

size_t st_dtype_size(st_dtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].size : 0; }
const char *st_dtype_name(st_dtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].name : "?"; }

uint64_t st_numel(const st_tensor *t)
{
	uint64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= (uint64_t)t->shape[i]; /* validated not to overflow at parse time */
	return n;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static int cmp_span(const void *a, const void *b)
{
	const st_tensor *x = *(st_tensor * const *)a, *y = *(st_tensor * const *)b;
	if (x->data != y->data)
		return x->data < y->data ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

int st_parse_file(st_set *set, int shard, const char *fname, const uint8_t *buf, size_t size,
		  char *err, size_t errlen)
{
	json_doc doc = { 0 };
	char jerr[160];
	size_t first = set->ntensors;
	const char *f = base_name(fname);

	if (size < 8) {
		snprintf(err, errlen, "%s: file is %zu bytes, shorter than the 8-byte header length", f, size);
		return -1;
	}
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | buf[i];
	if (hlen > ST_MAX_HEADER || hlen > size - 8) {
		snprintf(err, errlen, "%s: header length %llu exceeds %s", f, (unsigned long long)hlen,
			 hlen > ST_MAX_HEADER ? "the 100 MB limit" : "the file size");
		return -1;
	}
	if (json_parse((const char *)buf + 8, hlen, &doc, jerr, sizeof(jerr))) {
		snprintf(err, errlen, "%s: header is not valid JSON (%s)", f, jerr);
		return -1;
	}
	const uint8_t *data = buf + 8 + hlen;
	uint64_t dsize = size - 8 - hlen;
	const json_value *root = doc.root;
	if (root->type != JSON_OBJECT) {
		snprintf(err, errlen, "%s: header is not a JSON object", f);
		goto fail;
	}
	/* <= 65536 tensors in a set: the largest real checkpoints have < 10k,
	 * and the cap bounds the duplicate check below. */
	if (root->n > 65536 || set->ntensors + root->n > 65536) {
		snprintf(err, errlen, "%s: more than 65536 tensors", f);
		goto fail;
	}
	st_tensor *nt = realloc(set->tensors, (set->ntensors + root->n) * sizeof(st_tensor));
	if (!nt && root->n) {
		snprintf(err, errlen, "%s: out of memory", f);
		goto fail;
	}
	set->tensors = nt;
	for (uint32_t i = 0; i < root->n; i++) {
		const json_value *k = &root->items[2 * i], *v = &root->items[2 * i + 1];
		if (!strcmp(k->str, "__metadata__")) {
			if (v->type != JSON_OBJECT) {
				snprintf(err, errlen, "%s: __metadata__ is not an object", f);
				goto fail;
			}
			continue;
		}
		if (k->n == 0 || k->n >= ST_MAX_NAME || memchr(k->str, 0, k->n)) {
			snprintf(err, errlen, "%s: tensor name of %u bytes is empty, too long or has a NUL", f, k->n);
			goto fail;
		}
		const char *dt = NULL;
		const json_value *shape = json_get(v, "shape"), *offs = json_get(v, "data_offsets");
		if (v->type != JSON_OBJECT || json_get_str(v, "dtype", &dt) != 0 || !shape ||
		    shape->type != JSON_ARRAY || !offs || offs->type != JSON_ARRAY || offs->n != 2) {
			snprintf(err, errlen, "%s: tensor %s: needs dtype, shape and data_offsets [begin, end]", f, k->str);
			goto fail;
		}
		st_tensor t = { 0 };
		t.dtype = ST_DTYPE_COUNT;
		for (int d = 0; d < ST_DTYPE_COUNT; d++)
			if (!strcmp(dt, dtypes[d].name))
				t.dtype = (st_dtype)d;
		if (t.dtype == ST_DTYPE_COUNT) {
			snprintf(err, errlen, "%s: tensor %s: unknown dtype '%.16s'", f, k->str, dt);
			goto fail;
		}
		if (shape->n > ST_MAX_DIMS) {
			snprintf(err, errlen, "%s: tensor %s: rank %u exceeds %d", f, k->str, shape->n, ST_MAX_DIMS);
			goto fail;
		}
		t.ndim = (int)shape->n;
		uint64_t numel = 1;
		for (uint32_t d = 0; d < shape->n; d++) {
			const json_value *e = &shape->items[d];
			if (e->type != JSON_NUMBER || !e->is_int || e->i < 0) {
				snprintf(err, errlen, "%s: tensor %s: dimension %u is not a non-negative integer", f, k->str, d);
				goto fail;
			}
			t.shape[d] = e->i;
			if (e->i && numel > UINT64_MAX / (uint64_t)e->i) {
				snprintf(err, errlen, "%s: tensor %s: element count overflows", f, k->str);
				goto fail;
			}
			numel *= (uint64_t)e->i;
		}
		size_t es = dtypes[t.dtype].size;
		if (numel > UINT64_MAX / es) {
			snprintf(err, errlen, "%s: tensor %s: byte size overflows", f, k->str);
			goto fail;
		}
		const json_value *b = &offs->items[0], *e = &offs->items[1];
		if (b->type != JSON_NUMBER || !b->is_int || b->i < 0 || e->type != JSON_NUMBER || !e->is_int ||
		    e->i < b->i) {
			snprintf(err, errlen, "%s: tensor %s: data_offsets are not 0 <= begin <= end", f, k->str);
			goto fail;
		}
		if ((uint64_t)e->i > dsize) {
			snprintf(err, errlen, "%s: tensor %s: data ends at %lld, past the %llu data bytes of the file",
				 f, k->str, (long long)e->i, (unsigned long long)dsize);
			goto fail;
		}
		if ((uint64_t)(e->i - b->i) != numel * es) {
			snprintf(err, errlen, "%s: tensor %s: data_offsets span %lld bytes but %s%s needs %llu",
				 f, k->str, (long long)(e->i - b->i), dt, " of that shape", (unsigned long long)(numel * es));
			goto fail;
		}
		if (st_find(set, k->str)) {
			snprintf(err, errlen, "%s: tensor %s appears twice", f, k->str);
			goto fail;
		}
		t.name = strdup(k->str);
		if (!t.name) {
			snprintf(err, errlen, "%s: out of memory", f);
			goto fail;
		}
		t.shard = shard;
		t.data = data + b->i;
		t.nbytes = numel * es;
		set->tensors[set->ntensors++] = t;
		set->total_bytes += t.nbytes;
	}
	/* No overlaps: sort this file's spans and check neighbours. */
	size_t cnt = set->ntensors - first;
	if (cnt > 1) {
		st_tensor **ord = malloc(cnt * sizeof(*ord));
		if (!ord) {
			snprintf(err, errlen, "%s: out of memory", f);
			goto fail;
		}
		for (size_t i = 0; i < cnt; i++)
			ord[i] = &set->tensors[first + i];
		qsort(ord, cnt, sizeof(*ord), cmp_span);
		for (size_t i = 1; i < cnt; i++) {
			if (ord[i - 1]->data + ord[i - 1]->nbytes > ord[i]->data && ord[i]->nbytes && ord[i - 1]->nbytes) {
				snprintf(err, errlen, "%s: tensors %s and %s overlap", f, ord[i - 1]->name, ord[i]->name);
				free(ord);
				goto fail;
			}
		}
		free(ord);
	}
	json_free(&doc);
	return 0;
fail:
	json_free(&doc);
	return -1;
}

const st_tensor *st_find(const st_set *set, const char *name)
{
	for (size_t i = 0; i < set->ntensors; i++)
		if (!strcmp(set->tensors[i].name, name))
			return &set->tensors[i];
	return NULL;
}

static int add_shard(st_set *set, const char *dir, const char *fname, char *err, size_t errlen)
{
	if (set->nshards >= ST_MAX_SHARDS) {
		snprintf(err, errlen, "%s: more than %d shards", fname, ST_MAX_SHARDS);
		return -1;
	}
	for (int i = 0; i < set->nshards; i++)
		if (!strcmp(base_name(set->shards[i].path), fname))
			return 0; /* listed by several index entries */
	st_shard *ns = realloc(set->shards, (set->nshards + 1) * sizeof(st_shard));
	if (!ns) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	set->shards = ns;
	st_shard *s = &set->shards[set->nshards];
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	size_t pl = strlen(dir) + strlen(fname) + 2;
	s->path = malloc(pl);
	if (!s->path) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	snprintf(s->path, pl, "%s/%s", dir, fname);
	set->nshards++;
	s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (s->fd < 0 || fstat(s->fd, &st) || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: cannot open as a regular file", fname);
		return -1;
	}
	s->size = (size_t)st.st_size;
	if (s->size && !(s->map = st_map_fd(s->fd, s->size))) {
		snprintf(err, errlen, "%s: cannot map", fname);
		return -1;
	}
	return st_parse_file(set, set->nshards - 1, fname, s->map, s->size, err, errlen);
}

/* ---- resident copy (st_make_resident) ---- */

#define ST_COPY_CHUNK (8u << 20) /* bytes per pread task */

typedef struct {
	const st_shard *s;
	uint8_t *dst;
	int failed; /* first failing chunk's errno, 0: none (racy writes of nonzero values only) */
} st_copy_job;

static void st_copy_task(void *arg, int i)
{
	st_copy_job *j = arg;
	size_t off = (size_t)i * ST_COPY_CHUNK, end = off + ST_COPY_CHUNK;
	if (end > j->s->size)
		end = j->s->size;
	while (off < end) {
		ssize_t k = pread(j->s->fd, j->dst + off, end - off, (off_t)off);
		if (k <= 0) {
			j->failed = k < 0 && errno ? errno : EIO;
			return;
		}
		off += (size_t)k;
	}
}

static void st_serial(int n, void (*fn)(void *arg, int i), void *arg)
{
	for (int i = 0; i < n; i++)
		fn(arg, i);
}

int st_make_resident(st_set *set, void (*par)(int n, void (*fn)(void *arg, int i), void *arg), char *err,
		     size_t errlen)
{
	if (!par)
		par = st_serial;
	uint8_t **mem = calloc((size_t)set->nshards + 1, sizeof(*mem));
	size_t *len = calloc((size_t)set->nshards + 1, sizeof(*len));
	int rc = -1, i;
	if (!mem || !len) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0; i < set->nshards; i++) {
		st_shard *s = &set->shards[i];
		if (!s->size || s->fd < 0)
			continue;
		if (s->size > SIZE_MAX - 2 * (size_t)ST_HUGE || s->size / ST_COPY_CHUNK >= INT_MAX) {
			snprintf(err, errlen, "shard %d: too large to copy", i);
			goto undo;
		}
		len[i] = st_huge_up(s->size) + ST_HUGE; /* room to start on a 2 MiB boundary */
		void *p = mmap(NULL, len[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			snprintf(err, errlen, "shard %d: cannot allocate %zu MB for the weights: %s", i, s->size >> 20,
				 strerror(errno));
			goto undo;
		}
		mem[i] = p;
		uint8_t *dst = (uint8_t *)st_huge_up((uintptr_t)p);
		(void)madvise(dst, st_huge_up(s->size), MADV_HUGEPAGE); /* advice only */
		st_copy_job j = { s, dst, 0 };
		par((int)((s->size + ST_COPY_CHUNK - 1) / ST_COPY_CHUNK), st_copy_task, &j);
		if (j.failed) {
			snprintf(err, errlen, "shard %d: read failed: %s", i, strerror(j.failed));
			goto undo;
		}
	}
	for (size_t t = 0; t < set->ntensors; t++) {
		st_tensor *x = &set->tensors[t];
		const st_shard *s = &set->shards[x->shard];
		if (mem[x->shard])
			x->data = (const uint8_t *)st_huge_up((uintptr_t)mem[x->shard]) +
				  (x->data - s->map);
	}
	for (i = 0; i < set->nshards; i++) {
		st_shard *s = &set->shards[i];
		if (!mem[i])
			continue;
		munmap((void *)s->map, s->size);
		s->map = (const uint8_t *)st_huge_up((uintptr_t)mem[i]);
		s->own = mem[i];
		s->own_len = len[i];
		mem[i] = NULL;
	}
	rc = 0;
	goto out;
undo:
	for (i = 0; i < set->nshards; i++)
		if (mem[i])
			munmap(mem[i], len[i]);
out:
	free(mem);
	free(len);
	return rc;
}

static int safe_shard_name(const char *n)
{
	size_t l = strlen(n);
	return l > 12 && l < 256 && !strchr(n, '/') && n[0] != '.' && !strcmp(n + l - 12, ".safetensors");
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char * const *)a, *(char * const *)b);
}

int st_open_dir(st_set *set, const char *dir, char *err, size_t errlen)
{
	char path[4096];
	char *idx = NULL;
	size_t idxlen = 0;
	json_doc doc = { 0 };
	memset(set, 0, sizeof(*set));
	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
	int r = mf_read_file(path, 64u << 20, &idx, &idxlen); /* index <= 64 MB: real ones are ~100 KB */
	if (r < 0) {
		snprintf(err, errlen, "model.safetensors.index.json: larger than 64 MB");
		return -1;
	}
	if (r == 0) {
		char jerr[160];
		if (json_parse(idx, idxlen, &doc, jerr, sizeof(jerr))) {
			snprintf(err, errlen, "model.safetensors.index.json: not valid JSON (%s)", jerr);
			goto fail;
		}
		const json_value *wm = json_get(doc.root, "weight_map");
		if (!wm || wm->type != JSON_OBJECT) {
			snprintf(err, errlen, "model.safetensors.index.json: no weight_map object");
			goto fail;
		}
		for (uint32_t i = 0; i < wm->n; i++) {
			const json_value *v = &wm->items[2 * i + 1];
			if (v->type != JSON_STRING || !safe_shard_name(v->str)) {
				snprintf(err, errlen, "model.safetensors.index.json: tensor %s: shard name is not a plain *.safetensors file name",
					 wm->items[2 * i].str);
				goto fail;
			}
			if (add_shard(set, dir, v->str, err, errlen))
				goto fail;
		}
		/* Every tensor listed must be in the shard the index names. */
		for (uint32_t i = 0; i < wm->n; i++) {
			const st_tensor *t = st_find(set, wm->items[2 * i].str);
			if (!t || strcmp(base_name(set->shards[t->shard].path), wm->items[2 * i + 1].str)) {
				snprintf(err, errlen, "model.safetensors.index.json: tensor %s is not in %s",
					 wm->items[2 * i].str, wm->items[2 * i + 1].str);
				goto fail;
			}
		}
		if (set->ntensors != wm->n) {
			snprintf(err, errlen, "model.safetensors.index.json: shards hold %zu tensors, the index lists %u",
				 set->ntensors, wm->n);
			goto fail;
		}
	} else {
		DIR *d = opendir(dir);
		if (!d) {
			snprintf(err, errlen, "%s: cannot open directory", dir);
			return -1;
		}
		char **names = NULL;
		size_t nn = 0;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!safe_shard_name(e->d_name))
				continue;
			char **t = realloc(names, (nn + 1) * sizeof(char *));
			if (!t) break;
			names = t;
			names[nn] = strdup(e->d_name);
			if (names[nn]) nn++;
		}
		closedir(d);
		qsort(names, nn, sizeof(char *), name_cmp);
		int bad = 0;
		for (size_t i = 0; i < nn && !bad; i++)
			bad = add_shard(set, dir, names[i], err, errlen);
		for (size_t i = 0; i < nn; i++)
			free(names[i]);
		free(names);
		if (bad)
			goto fail;
		if (!nn) {
			snprintf(err, errlen, "%s: no *.safetensors file", dir);
			goto fail;
		}
	}
	json_free(&doc);
	free(idx);
	return 0;
fail:
	json_free(&doc);
	free(idx);
	st_close(set);
	return -1;
}

void st_close(st_set *set)
{
	for (size_t i = 0; i < set->ntensors; i++)
		free(set->tensors[i].name);
	free(set->tensors);
	for (int i = 0; i < set->nshards; i++) {
		if (set->shards[i].own)
			munmap(set->shards[i].own, set->shards[i].own_len);
		else if (set->shards[i].map)
			munmap((void *)set->shards[i].map, set->shards[i].size);
		if (set->shards[i].fd >= 0)
			close(set->shards[i].fd);
		free(set->shards[i].path);
	}
	free(set->shards);
	memset(set, 0, sizeof(*set));
}

/* ---- tensor table ---- */

void st_table_pack(const st_set *set, ipc_blob *b)
{
	ipc_blob_u32(b, (uint32_t)set->nshards);
	for (int i = 0; i < set->nshards; i++)
		ipc_blob_u64(b, set->shards[i].size);
	ipc_blob_u32(b, (uint32_t)set->ntensors);
	for (size_t i = 0; i < set->ntensors; i++) {
		const st_tensor *t = &set->tensors[i];
		ipc_blob_bytes(b, t->name, strlen(t->name));
		ipc_blob_u32(b, (uint32_t)t->dtype);
		ipc_blob_u32(b, (uint32_t)t->ndim);
		for (int d = 0; d < t->ndim; d++)
			ipc_blob_u64(b, (uint64_t)t->shape[d]);
		ipc_blob_u32(b, (uint32_t)t->shard);
		ipc_blob_u64(b, (uint64_t)(t->data - set->shards[t->shard].map));
		ipc_blob_u64(b, t->nbytes);
	}
}

int st_table_load(st_set *set, ipc_rd *rd, const int *fds, int nfds, char *err, size_t errlen)
{
	memset(set, 0, sizeof(*set));
	uint32_t ns = ipc_get_u32(rd);
	if (rd->bad || ns == 0 || ns > ST_MAX_SHARDS || (int)ns != nfds) {
		snprintf(err, errlen, "tensor table: %u shards for %d descriptors", ns, nfds);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return -1;
	}
	set->shards = calloc(ns, sizeof(st_shard));
	if (!set->shards) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	set->nshards = (int)ns;
	for (uint32_t i = 0; i < ns; i++) /* every descriptor is owned by the set from here on */
		set->shards[i].fd = fds[i];
	for (uint32_t i = 0; i < ns; i++) {
		st_shard *s = &set->shards[i];
		s->path = strdup("shard");
		uint64_t want = ipc_get_u64(rd);
		struct stat st;
		if (rd->bad || fstat(s->fd, &st) || (!S_ISREG(st.st_mode)) || (uint64_t)st.st_size != want ||
		    want > SIZE_MAX) {
			snprintf(err, errlen, "tensor table: shard %u is not a regular file of %llu bytes", i,
				 (unsigned long long)want);
			goto fail;
		}
		s->size = (size_t)want;
		if (s->size && !(s->map = st_map_fd(s->fd, s->size))) {
			snprintf(err, errlen, "tensor table: cannot map shard %u", i);
			goto fail;
		}
	}
	uint32_t nt = ipc_get_u32(rd);
	if (rd->bad || nt > 65536 || nt > rd->left / 24) {
		snprintf(err, errlen, "tensor table: bad tensor count");
		goto fail;
	}
	set->tensors = calloc(nt ? nt : 1, sizeof(st_tensor));
	if (!set->tensors) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < nt; i++) {
		st_tensor *t = &set->tensors[set->ntensors];
		size_t nl;
		const uint8_t *name = ipc_get_bytes(rd, ST_MAX_NAME - 1, &nl);
		uint32_t dt = ipc_get_u32(rd), nd = ipc_get_u32(rd);
		if (rd->bad || !nl || memchr(name, 0, nl) || dt >= ST_DTYPE_COUNT || nd > ST_MAX_DIMS) {
			snprintf(err, errlen, "tensor table: entry %u is malformed", i);
			goto fail;
		}
		t->name = malloc(nl + 1);
		if (!t->name) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		memcpy(t->name, name, nl);
		t->name[nl] = 0;
		set->ntensors++;
		t->dtype = (st_dtype)dt;
		t->ndim = (int)nd;
		uint64_t numel = 1;
		for (uint32_t d = 0; d < nd; d++) {
			uint64_t v = ipc_get_u64(rd);
			if (v > INT64_MAX || (v && numel > UINT64_MAX / v)) {
				snprintf(err, errlen, "tensor table: %s: bad shape", t->name);
				goto fail;
			}
			t->shape[d] = (int64_t)v;
			numel *= v;
		}
		uint32_t sh = ipc_get_u32(rd);
		uint64_t off = ipc_get_u64(rd), nb = ipc_get_u64(rd);
		size_t es = st_dtype_size(t->dtype);
		if (rd->bad || sh >= ns || numel > UINT64_MAX / es || nb != numel * es ||
		    off > set->shards[sh].size || nb > set->shards[sh].size - off) {
			snprintf(err, errlen, "tensor table: %s: span outside its shard", t->name);
			goto fail;
		}
		t->shard = (int)sh;
		t->data = set->shards[sh].map + off;
		t->nbytes = nb;
		set->total_bytes += nb;
	}
	return 0;
fail:
	st_close(set);
	return -1;
}
