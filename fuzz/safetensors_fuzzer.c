/* fuzz/safetensors_fuzzer.c — common/safetensors.c st_parse_file(), the
 * validator every shard's bytes go through (st_open_dir maps the file and
 * calls it), on an arbitrary in-memory file.
 *
 * Checked beyond the sanitizers, on every accepted file (safetensors.h
 * contract): each tensor's data span lies inside the data section; spans
 * of non-empty tensors do not overlap; names are non-empty, unique, shorter
 * than ST_MAX_NAME; dtype known; rank <= ST_MAX_DIMS; element count times
 * element size equals nbytes; total_bytes is their sum. Then the same bytes
 * parsed again as a second shard of the same set must be rejected whenever
 * the first parse produced a tensor (no tensor in two shards). */
#include <string.h>

#include "common/safetensors.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees overreads */
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	st_set set;
	memset(&set, 0, sizeof(set));
	char err[1024] = "";
	if (st_parse_file(&set, 0, "model.safetensors", buf, size, err, sizeof(err)) == 0) {
		uint64_t hlen = 0;
		for (int i = 7; i >= 0; i--)
			hlen = (hlen << 8) | buf[i];
		const uint8_t *d0 = buf + 8 + hlen, *d1 = buf + size;
		uint64_t total = 0;
		for (size_t i = 0; i < set.ntensors; i++) {
			const st_tensor *t = &set.tensors[i];
			size_t nl = strlen(t->name);
			FUZZ_CHECK(nl > 0 && nl < ST_MAX_NAME, "name length %zu", nl);
			FUZZ_CHECK((unsigned)t->dtype < ST_DTYPE_COUNT, "dtype %d", t->dtype);
			FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "rank %d", t->ndim);
			FUZZ_CHECK(t->shard == 0, "shard %d", t->shard);
			FUZZ_CHECK(t->data >= d0 && t->data <= d1 && t->nbytes <= (uint64_t)(d1 - t->data),
				   "tensor %s outside the data section", t->name);
			FUZZ_CHECK(st_numel(t) * st_dtype_size(t->dtype) == t->nbytes, "tensor %s size", t->name);
			FUZZ_CHECK(st_find(&set, t->name) == t, "tensor %s found elsewhere", t->name);
			total += t->nbytes;
			if (t->nbytes && set.ntensors <= 256)
				for (size_t j = 0; j < i; j++) {
					const st_tensor *u = &set.tensors[j];
					FUZZ_CHECK(!u->nbytes || t->data + t->nbytes <= u->data ||
						   u->data + u->nbytes <= t->data, "%s overlaps %s", t->name, u->name);
				}
		}
		FUZZ_CHECK(total == set.total_bytes, "total_bytes");
		size_t n = set.ntensors;
		int again = st_parse_file(&set, 1, "model-2.safetensors", buf, size, err, sizeof(err));
		FUZZ_CHECK(n == 0 ? again == 0 : again != 0, "the same tensors accepted in a second shard");
	} else {
		FUZZ_CHECK(err[0] != 0, "rejected without a message");
	}
	st_close(&set);
	free(buf);
	return 0;
}
