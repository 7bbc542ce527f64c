/* worker/gguf.h — a bounded reader for GGUF (v2, v3) files, the ggml block
 * dequantizers, and the MLX affine quantizer used by `mlxr import`.
 *
 * Contract (reader):
 *  - gguf_parse() reads a whole file image the caller owns (buf, size) and
 *    MUST NOT read outside it. It returns 0, or -1 with one line in err
 *    (caller-owned) naming the rule that failed. On -1 nothing needs freeing;
 *    on 0 the caller SHALL call gguf_free() and keep buf alive until then.
 *  - Every pointer in the result points into buf or into memory owned by the
 *    gguf_file; keys and tensor names are copied, NUL-terminated and contain
 *    no NUL byte.
 *  - What a successful parse guarantees: version 2 or 3, little-endian;
 *    every count capped by the bytes left; known value and tensor types only;
 *    no nested arrays; 1..4 dimensions, each >= 1; element count <= INT64_MAX
 *    (checked by division); ne[0] a multiple of the type's block size; each
 *    tensor's data aligned to general.alignment, inside the file and not
 *    overlapping any other; keys and tensor names unique.
 * Spec: github.com/ggml-org/ggml/blob/master/docs/gguf.md
 */
#ifndef MLXR_GGUF_H
#define MLXR_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types (gguf.md "gguf_metadata_value_type"). */
enum gguf_vtype {
	GGUF_V_UINT8 = 0,
	GGUF_V_INT8 = 1,
	GGUF_V_UINT16 = 2,
	GGUF_V_INT16 = 3,
	GGUF_V_UINT32 = 4,
	GGUF_V_INT32 = 5,
	GGUF_V_FLOAT32 = 6,
	GGUF_V_BOOL = 7,
	GGUF_V_STRING = 8,
	GGUF_V_ARRAY = 9,
	GGUF_V_UINT64 = 10,
	GGUF_V_INT64 = 11,
	GGUF_V_FLOAT64 = 12,
	GGUF_V_COUNT
};

/* ggml tensor types we read (ggml.h numbering). Others are rejected. */
enum ggml_type {
	GGML_F32 = 0,
	GGML_F16 = 1,
	GGML_Q4_0 = 2,
	GGML_Q4_1 = 3,
	GGML_Q5_0 = 6,
	GGML_Q5_1 = 7,
	GGML_Q8_0 = 8,
	GGML_Q4_K = 12,
	GGML_Q5_K = 13,
	GGML_Q6_K = 14,
	GGML_BF16 = 30,
	GGML_TYPE_COUNT = 31 /* one past the largest number above */
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
	char *key;           /* NUL-terminated copy */
	uint32_t type;       /* enum gguf_vtype */
	uint32_t arr_type;   /* element type when type == GGUF_V_ARRAY */
	uint64_t n;          /* array: elements; string: bytes; scalar: 1 */
	const uint8_t *data; /* scalar/array elements, string bytes (in buf) */
	uint64_t *str_off;   /* string arrays: n offsets of each length field in buf */
} gguf_kv;

typedef struct {
	char *name;            /* NUL-terminated copy */
	uint32_t n_dims;       /* 1..GGUF_MAX_DIMS */
	uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] innermost (contiguous); unused = 1 */
	uint64_t n_elem;       /* product of ne */
	uint32_t type;         /* enum ggml_type */
	uint64_t offset;       /* from the start of the data section */
	uint64_t nbytes;
	const uint8_t *data;   /* buf + data section + offset */
} gguf_tensor;

typedef struct {
	const uint8_t *buf;
	size_t size;
	uint32_t version;
	uint64_t alignment;
	uint64_t data_start; /* file offset of the data section */
	uint64_t n_kv, n_tensors;
	gguf_kv *kv;          /* n_kv */
	gguf_tensor *tensors; /* n_tensors, in file order */
} gguf_file;

int gguf_parse(gguf_file *g, const uint8_t *buf, size_t size, char *err, size_t errlen);
void gguf_free(gguf_file *g);

/* Lookups. gguf_find returns NULL when absent. The typed getters return 0
 * and fill *out, 1 when absent, -1 when present with an incompatible type
 * (integers convert between widths when the value fits). */
const gguf_kv *gguf_find(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out);
int gguf_get_f64(const gguf_file *g, const char *key, double *out);
int gguf_get_bool(const gguf_file *g, const char *key, int *out);
int gguf_get_str(const gguf_file *g, const char *key, const char **s, uint64_t *len);
/* Element i of a string array (i < kv->n; the caller checks both). */
void gguf_arr_str(const gguf_file *g, const gguf_kv *kv, uint64_t i, const char **s, uint64_t *len);
/* Element i of a numeric array as double / int64 (i < kv->n). */
double gguf_arr_f64(const gguf_kv *kv, uint64_t i);
int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i);

/* Type table: NULL name for types we do not read. */
const char *ggml_type_name(uint32_t type);
/* Elements per block and bytes per block; 0 for unknown types. */
uint32_t ggml_blck_size(uint32_t type);
uint32_t ggml_type_size(uint32_t type);

/* ---- gguf_quant.c ---- */
float gguf_f16_to_f32(uint16_t h);
uint16_t gguf_f32_to_f16(float f); /* round to nearest even; inf on overflow */
float gguf_bf16_to_f32(uint16_t h);
uint16_t gguf_f32_to_bf16(float f); /* round to nearest even */

/* Dequantizes n elements (n a multiple of ggml_blck_size(type)) starting at
 * src into dst, exactly as ggml's dequantize_row_* does (f32 arithmetic).
 * The caller guarantees src holds n / blck * type_size bytes. 0, or -1 for
 * a type we cannot read. */
int gguf_dequant(uint32_t type, const uint8_t *src, float *dst, uint64_t n);

/* MLX affine quantization of a row-major [rows, cols] matrix, following
 * mx.quantize (mlx/backend/cpu/quantized.cpp) for an f16 input: values are
 * taken as given (the caller rounds them to f16 first), scale and bias are
 * computed in f32, codes use the f32 scale, the stored scale and bias are
 * rounded to f16. Packing: value j of a row sits at bit j*bits of the row's
 * little-endian bit stream in uint32 words (LSB first).
 * bits in {2,3,4,5,6,8}, group_size in {32,64,128}, cols % group_size == 0.
 * wq: rows * cols * bits / 32 words; scales, biases: rows * cols / gs f16. */
int mlx_quantize(const float *w, uint64_t rows, uint64_t cols, int bits, int group_size,
		 uint32_t *wq, uint16_t *scales, uint16_t *biases);
/* The inverse: w = scale * code + bias in f32 (for tests). */
void mlx_dequantize(const uint32_t *wq, const uint16_t *scales, const uint16_t *biases,
		    uint64_t rows, uint64_t cols, int bits, int group_size, float *w);

#endif
