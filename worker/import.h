/* worker/import.h — `mlxr import`: a GGUF file becomes an MLX model
 * directory (model.safetensors, config.json, tokenizer.json,
 * tokenizer_config.json) that mlx-lm loads.
 *
 * Contract:
 *  - gguf_import() reads the GGUF file from in_fd (a regular file; read
 *    whole into memory, never mapped, so a file truncated under us cannot
 *    fault) and writes its four files through the descriptors in *out,
 *    which the caller opened (in the broker: in a staging directory). It
 *    never prints or exits. 0 ok; -1 with one line in err; the caller
 *    removes the staging directory.
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

/* The four output files, opened (empty, writable) by the caller: the
 * sandboxed importer opens nothing itself. */
typedef struct {
	int safetensors, config, tokenizer, tokenizer_config;
} imp_outs;

int gguf_import_fds(int in_fd, const imp_outs *out, const gguf_import_opts *opts,
		    gguf_import_stats *stats, char *err, size_t errlen);
/* The same, creating the four files (O_EXCL) under out_dirfd: for tests
 * and the fuzz harness, which run outside a sandbox. */
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
			 const imp_outs *out, char *err, size_t errlen);

/* Shared by import.c and import_tok.c: writes len bytes to output file fd
 * (name is for messages). */
int imp_write_file(int fd, const char *name, const void *buf, size_t len, char *err, size_t errlen);

#endif
