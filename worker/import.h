/* worker/import.h — `mlxr import`: a GGUF file becomes an MLX model
 * directory (model.safetensors, config.json, tokenizer.json,
 * tokenizer_config.json) that mlx-lm loads.
 *
 * Contract:
 *  - gguf_import() reads the GGUF file from in_fd (a regular file; read
 *    whole into memory, never mapped, so a file truncated under us cannot
 *    fault) and creates its files with openat() under out_dirfd, which the
 *    caller created empty. It never prints or exits. 0 ok; -1 with one line
 *    in err. On -1 files may remain under out_dirfd: the caller removes the
 *    directory (it writes into a temporary directory and renames it).
 *  - Q4_1 tensors become MLX 4-bit group-32 and Q8_0 tensors 8-bit group-32
 *    bit-exactly; every other matrix is dequantized and requantized to
 *    opts->bits / opts->group_size as mx.quantize would; 1-D tensors stay
 *    f32.
 */
#ifndef MLXR_IMPORT_H
#define MLXR_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "worker/gguf.h"

typedef struct {
	int bits;       /* 2,3,4,5,6,8; default 4 */
	int group_size; /* 32,64,128; default 64 */
} gguf_import_opts;

typedef struct {
	uint64_t tensors;     /* written */
	uint64_t exact;       /* Q4_1/Q8_0 mapped bit-exactly */
	uint64_t requantized; /* dequantized and quantized again */
	uint64_t dense;       /* kept unquantized */
	char arch[32];
} gguf_import_stats;

int gguf_import(int in_fd, int out_dirfd, const gguf_import_opts *opts,
		gguf_import_stats *stats, char *err, size_t errlen);

/* ---- st_write.c: a safetensors writer (MLX writes "format": "mlx"). ---- */
typedef struct {
	char *name;          /* owned */
	const char *dtype;   /* "U32", "F16", "BF16", "F32" */
	uint32_t n_dims;
	uint64_t shape[4];
	void *data;          /* owned, nbytes */
	uint64_t nbytes;
} st_out;

/* Writes header and data of n tensors to fd in the given order. */
int st_write(int fd, const st_out *t, size_t n, char *err, size_t errlen);

/* ---- import_tok.c: tokenizer.json and tokenizer_config.json ---- */
/* Writes both files under dirfd from the GGUF tokenizer.* metadata.
 * arch is general.architecture; context_length bounds model_max_length. */
int gguf_write_tokenizer(const gguf_file *g, const char *arch, uint64_t context_length,
			 int dirfd, char *err, size_t errlen);

/* Shared by import.c and import_tok.c: writes len bytes to a new file. */
int imp_write_file(int dirfd, const char *name, const void *buf, size_t len, char *err, size_t errlen);

#endif
