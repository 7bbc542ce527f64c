/* fuzz/gguf_fuzzer.c — worker/gguf.c gguf_parse() on an arbitrary file
 * image, then the whole `mlxr import` path (worker/import.c gguf_import)
 * from a memfd into a fresh temporary directory.
 *
 * Checked beyond the sanitizers, on every parsed file (gguf.h contract):
 * version 2 or 3; every tensor has 1..4 dims each >= 1, a known type,
 * n_elem the product of ne, data aligned and inside the file, no two
 * tensors overlapping; keys and names NUL-terminated, unique and found by
 * the lookups; every string-array element lies inside the file. Imports
 * must either fail with a message or write the four files. */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz/fuzz.h"
#include "worker/gguf.h"
#include "worker/import.h"

static char base[256];
static void cleanup(void);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *b = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(base, sizeof(base), "%s/mlxr-fuzz-gguf-XXXXXX", b);
	if (!mkdtemp(base))
		abort();
	atexit(cleanup);
	return 0;
}

static void rm_tree(const char *d);

static void cleanup(void)
{
	char out[300];
	snprintf(out, sizeof(out), "%s/out", base);
	rm_tree(out);
	rmdir(base);
}

static void check_parsed(const gguf_file *g, const uint8_t *buf, size_t size)
{
	FUZZ_CHECK(g->version == 2 || g->version == 3, "version %u", g->version);
	FUZZ_CHECK(g->alignment > 0 && g->data_start <= size, "alignment/data_start");
	for (uint64_t i = 0; i < g->n_kv; i++) {
		const gguf_kv *kv = &g->kv[i];
		FUZZ_CHECK(kv->key && gguf_find(g, kv->key) == kv, "key %llu not found back", (unsigned long long)i);
		FUZZ_CHECK(kv->type < GGUF_V_COUNT, "value type %u", kv->type);
		if (kv->type == GGUF_V_ARRAY && kv->arr_type == GGUF_V_STRING)
			for (uint64_t j = 0; j < kv->n && j < 4096; j++) {
				const char *s;
				uint64_t l;
				gguf_arr_str(g, kv, j, &s, &l);
				FUZZ_CHECK((const uint8_t *)s >= buf && l <= (uint64_t)(buf + size - (const uint8_t *)s),
					   "string %llu of %s outside the file", (unsigned long long)j, kv->key);
			}
		if (kv->type == GGUF_V_ARRAY && kv->arr_type != GGUF_V_STRING && kv->arr_type != GGUF_V_BOOL &&
		    kv->n > 0) {
			(void)gguf_arr_f64(kv, kv->n - 1);
			(void)gguf_arr_i64(kv, 0);
		}
		uint64_t u;
		double f;
		int b;
		const char *s;
		uint64_t l;
		(void)gguf_get_u64(g, kv->key, &u);
		(void)gguf_get_f64(g, kv->key, &f);
		(void)gguf_get_bool(g, kv->key, &b);
		if (gguf_get_str(g, kv->key, &s, &l) == 0)
			FUZZ_CHECK((const uint8_t *)s >= buf && l <= (uint64_t)(buf + size - (const uint8_t *)s), "string");
	}
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const gguf_tensor *t = &g->tensors[i];
		FUZZ_CHECK(gguf_find_tensor(g, t->name) == t, "tensor %s not found back", t->name);
		FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "dims %u", t->n_dims);
		uint64_t ne = 1;
		for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
			FUZZ_CHECK(t->ne[d] >= 1, "ne[%u] = 0", d);
			FUZZ_CHECK(ne <= UINT64_MAX / t->ne[d], "n_elem overflows");
			ne *= t->ne[d];
		}
		FUZZ_CHECK(ne == t->n_elem, "n_elem");
		FUZZ_CHECK(ggml_type_name(t->type) && ggml_blck_size(t->type), "type %u", t->type);
		FUZZ_CHECK(t->ne[0] % ggml_blck_size(t->type) == 0, "ne[0] not a block multiple");
		FUZZ_CHECK(t->nbytes == t->n_elem / ggml_blck_size(t->type) * ggml_type_size(t->type), "nbytes");
		FUZZ_CHECK(t->data >= buf && t->nbytes <= (uint64_t)(buf + size - t->data), "tensor %s outside", t->name);
		FUZZ_CHECK(t->offset % g->alignment == 0, "tensor %s unaligned", t->name);
		for (uint64_t j = 0; j < i && g->n_tensors <= 256; j++) {
			const gguf_tensor *u = &g->tensors[j];
			FUZZ_CHECK(strcmp(u->name, t->name), "duplicate name");
			FUZZ_CHECK(!t->nbytes || !u->nbytes || t->data + t->nbytes <= u->data ||
				   u->data + u->nbytes <= t->data, "tensors %s and %s overlap", t->name, u->name);
		}
		/* Dequantize the first block row (what import does, bounded). */
		uint64_t n = ggml_blck_size(t->type);
		float out[256];
		if (n <= 256)
			FUZZ_CHECK(gguf_dequant(t->type, t->data, out, n) == 0, "dequant of a parsed type failed");
	}
}

static void rm_tree(const char *d)
{
	DIR *dir = opendir(d);
	if (!dir)
		return;
	struct dirent *e;
	char p[512];
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.') {
			snprintf(p, sizeof(p), "%s/%s", d, e->d_name);
			unlink(p);
		}
	closedir(dir);
	rmdir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	gguf_file g;
	char err[512] = "";
	int parsed = gguf_parse(&g, buf, size, err, sizeof(err)) == 0;
	if (parsed) {
		check_parsed(&g, buf, size);
		gguf_free(&g);
	} else {
		FUZZ_CHECK(err[0] != 0, "rejected without a message");
	}
	free(buf);
	if (!parsed)
		return 0; /* gguf_import parses first: nothing more to reach */

	int in = memfd_create("gguf", MFD_CLOEXEC);
	FUZZ_CHECK(in >= 0, "memfd");
	FUZZ_CHECK(write(in, data, size) == (ssize_t)size, "memfd write");
	lseek(in, 0, SEEK_SET);
	char out[300];
	snprintf(out, sizeof(out), "%s/out", base);
	rm_tree(out);
	FUZZ_CHECK(mkdir(out, 0700) == 0, "mkdir %s", out);
	int od = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FUZZ_CHECK(od >= 0, "open %s", out);
	gguf_import_opts o = { 4, 64 };
	gguf_import_stats st;
	err[0] = 0;
	if (gguf_import(in, od, &o, &st, err, sizeof(err)) == 0) {
		static const char *files[] = { "model.safetensors", "config.json", "tokenizer.json",
					       "tokenizer_config.json" };
		for (int i = 0; i < 4; i++) {
			struct stat sb;
			FUZZ_CHECK(fstatat(od, files[i], &sb, 0) == 0, "import wrote no %s", files[i]);
		}
	} else {
		FUZZ_CHECK(err[0] != 0, "import failed without a message");
	}
	close(od);
	close(in);
	rm_tree(out);
	return 0;
}
