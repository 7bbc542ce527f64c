/* common/safetensors.h — bounded reader of safetensors files and sharded
 * model directories (https://github.com/huggingface/safetensors, format:
 * u64 little-endian header length N, N bytes of JSON, then the data).
 *
 * Contract:
 *  - st_open_dir() maps every shard read-only and validates all headers
 *    before returning: header length <= ST_MAX_HEADER and inside the file,
 *    JSON well-formed, dtype known, rank <= ST_MAX_DIMS, every dimension
 *    >= 0, element count * element size computed with overflow checks and
 *    equal to the data_offsets span, every span inside the file's data
 *    section, no two tensors overlapping, no name repeated across shards,
 *    and (sharded) the index's weight_map agreeing with the shards.
 *  - A rejection fills err with one line naming the file, the tensor and
 *    the rule, and returns -1; nothing stays open.
 *  - Tensor data pointers are NOT aligned (MLX does not align tensors).
 *  - st_close() unmaps everything. The set owns all memory.
 */
#ifndef MLXR_SAFETENSORS_H
#define MLXR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER (100u << 20) /* 100 MB: the largest real header is a few MB */
#define ST_MAX_DIMS 8
#define ST_MAX_SHARDS 256          /* the largest public checkpoints have < 200 */
#define ST_MAX_NAME 512

typedef enum {
	ST_F64, ST_F32, ST_F16, ST_BF16,
	ST_I64, ST_I32, ST_I16, ST_I8,
	ST_U64, ST_U32, ST_U16, ST_U8,
	ST_BOOL,
	ST_DTYPE_COUNT
} st_dtype;

typedef struct {
	char *name;
	st_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	int shard;          /* index into the set's shards */
	const uint8_t *data; /* inside the shard's mapping; unaligned */
	uint64_t nbytes;
} st_tensor;

typedef struct {
	char *path;
	int fd;
	const uint8_t *map;
	size_t size;
	void *own;      /* st_make_resident: the anonymous region map lies in */
	size_t own_len; /* (0: map is the file mapping) */
} st_shard;

typedef struct {
	st_shard *shards;
	int nshards;
	st_tensor *tensors;
	size_t ntensors;
	uint64_t total_bytes; /* sum of tensor data bytes */
} st_set;

int st_open_dir(st_set *set, const char *dir, char *err, size_t errlen);
/* Validates one in-memory file (used by st_open_dir and the fuzz harness):
 * appends its tensors to set with shard index `shard`. */
int st_parse_file(st_set *set, int shard, const char *fname, const uint8_t *buf, size_t size,
		  char *err, size_t errlen);
const st_tensor *st_find(const st_set *set, const char *name);
void st_close(st_set *set);
/* Moves every shard's bytes from its file mapping into private anonymous
 * memory advised for transparent huge pages, read from the shard's fd
 * with pread (par runs fn(arg, 0..n-1), possibly in parallel; NULL: one
 * thread), and rebases every tensor's data pointer; the file mappings are
 * unmapped. Why: on the machines measured (README, "Weights in memory")
 * a 4 KiB-page mapping of the page cache streams at about half the
 * memory's read bandwidth, a 2 MiB-page one at full speed; the copy makes
 * that independent of how the page cache holds the file, at a load-time
 * cost (MLXR_WEIGHTS=copy). On failure the set is unchanged and err says
 * why. */
int st_make_resident(st_set *set, void (*par)(int n, void (*fn)(void *arg, int i), void *arg), char *err,
		     size_t errlen);

size_t st_dtype_size(st_dtype dt);
const char *st_dtype_name(st_dtype dt);
uint64_t st_numel(const st_tensor *t);


/* ---- the validated tensor table, as the broker hands it to the worker ----
 * The broker packs the table of a validated set; the worker rebuilds a set
 * from it and the shard fds it received, checking each fd's size against
 * the table (fstat) and each tensor's span against its shard, and maps the
 * shards PROT_READ. The worker never parses a safetensors header. */
#include "common/ipc.h"
void st_table_pack(const st_set *set, ipc_blob *b);
/* Reads the table from rd; fds[i] is shard i (taken over: closed by
 * st_close, or on error). */
int st_table_load(st_set *set, ipc_rd *rd, const int *fds, int nfds, char *err, size_t errlen);
#endif
