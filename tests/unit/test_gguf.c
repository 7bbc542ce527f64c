/* tests/unit/test_gguf.c — the GGUF reader rejects hostile files with the
 * expected message, and the dequantizers / MLX quantizer give known answers.
 * Run under ASan/UBSan by `make asan`. Exit status 0 = all passed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/gguf.h"
#include "worker/import.h"

static int failures;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			failures++;                                       \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);       \
			printf(__VA_ARGS__);                              \
			printf("\n");                                     \
		}                                                         \
	} while (0)

/* ---- a GGUF builder ---- */
typedef struct {
	uint8_t b[4096];
	size_t n;
} gbuf;

static void p8(gbuf *g, uint8_t v) { g->b[g->n++] = v; }
static void p32(gbuf *g, uint32_t v) { for (int i = 0; i < 4; i++) p8(g, (uint8_t)(v >> (8 * i))); }
static void p64(gbuf *g, uint64_t v) { for (int i = 0; i < 8; i++) p8(g, (uint8_t)(v >> (8 * i))); }
static void pstr(gbuf *g, const char *s) { p64(g, strlen(s)); memcpy(g->b + g->n, s, strlen(s)); g->n += strlen(s); }

/* Knobs for one file: two F32 tensors "a" [4] and "b" [8] plus one key. */
typedef struct {
	uint32_t version;
	uint64_t n_tensors, n_kv;
	uint32_t align;        /* general.alignment value */
	const char *name_b;
	uint32_t type_b, ndims_b;
	uint64_t ne_b[5];
	uint64_t off_b;
	uint64_t key_len;      /* 0 = actual */
	int dup_key, nested;
} spec;

static spec base_spec(void)
{
	spec s = { 3, 2, 1, 32, "b", GGML_F32, 1, { 8, 1, 1, 1, 1 }, 32, 0, 0, 0 };
	return s;
}

static void build(gbuf *g, const spec *s)
{
	g->n = 0;
	memcpy(g->b, "GGUF", 4);
	g->n = 4;
	p32(g, s->version);
	p64(g, s->n_tensors);
	p64(g, s->n_kv + (s->dup_key ? 1 : 0) + (s->nested ? 1 : 0));
	if (s->key_len)
		p64(g, s->key_len), memcpy(g->b + g->n, "general.alignment", 17), g->n += 17;
	else
		pstr(g, "general.alignment");
	p32(g, GGUF_V_UINT32);
	p32(g, s->align);
	if (s->dup_key) {
		pstr(g, "general.alignment");
		p32(g, GGUF_V_UINT32);
		p32(g, s->align);
	}
	if (s->nested) {
		pstr(g, "x");
		p32(g, GGUF_V_ARRAY);
		p32(g, GGUF_V_ARRAY);
		p64(g, 1);
	}
	pstr(g, "a");
	p32(g, 1);
	p64(g, 4);
	p32(g, GGML_F32);
	p64(g, 0);
	pstr(g, s->name_b);
	p32(g, s->ndims_b);
	for (uint32_t d = 0; d < s->ndims_b && d < 5; d++)
		p64(g, s->ne_b[d]);
	p32(g, s->type_b);
	p64(g, s->off_b);
	while (g->n % 32)
		p8(g, 0);
	for (int i = 0; i < 12; i++) { /* 4 + 8 floats of data, b at 32 */
		float f = (float)i;
		uint32_t u;
		memcpy(&u, &f, 4);
		if (i == 4)
			while (g->n % 32)
				p8(g, 0);
		p32(g, u);
	}
}

static void expect_reject(const spec *s, const char *want, const char *what)
{
	gbuf g;
	build(&g, s);
	gguf_file f;
	char err[256] = "";
	int rc = gguf_parse(&f, g.b, g.n, err, sizeof(err));
	CHECK(rc == -1, "%s: accepted", what);
	if (rc == 0) {
		gguf_free(&f);
		return;
	}
	CHECK(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", what, err, want);
}

static void test_valid_file_parses(void)
{
	spec s = base_spec();
	gbuf g;
	build(&g, &s);
	gguf_file f;
	char err[256] = "";
	int rc = gguf_parse(&f, g.b, g.n, err, sizeof(err));
	CHECK(rc == 0, "valid file rejected: %s", err);
	if (rc)
		return;
	CHECK(f.n_tensors == 2 && f.n_kv == 1 && f.alignment == 32, "counts");
	const gguf_tensor *b = gguf_find_tensor(&f, "b");
	CHECK(b && b->n_elem == 8 && b->nbytes == 32, "tensor b");
	float y[8];
	if (b) {
		gguf_dequant(b->type, b->data, y, 8);
		CHECK(y[0] == 4.0f && y[7] == 11.0f, "tensor b data %g %g", (double)y[0], (double)y[7]);
	}
	uint64_t a;
	CHECK(gguf_get_u64(&f, "general.alignment", &a) == 0 && a == 32, "alignment key");
	gguf_free(&f);
}

static void test_every_truncation_rejected(void)
{
	spec s = base_spec();
	gbuf g;
	build(&g, &s);
	/* The data section of b ends the file, so every shorter prefix is bad. */
	for (size_t n = 0; n < g.n; n++) {
		uint8_t *copy = malloc(n ? n : 1); /* exact size so ASan sees overreads */
		memcpy(copy, g.b, n);
		gguf_file f;
		char err[256] = "";
		int rc = gguf_parse(&f, copy, n, err, sizeof(err));
		CHECK(rc == -1, "prefix of %zu bytes accepted", n);
		if (rc == 0)
			gguf_free(&f);
		else
			CHECK(strstr(err, "truncated") || strstr(err, "past the end") || strstr(err, "does not fit") ||
				      strstr(err, "bad magic"),
			      "prefix %zu: unexpected message '%s'", n, err);
		free(copy);
	}
}

static void test_hostile_headers_rejected(void)
{
	spec s;
	s = base_spec(); s.version = 1;
	expect_reject(&s, "unsupported GGUF version 1", "version 1");
	s = base_spec(); s.version = 0x03000000;
	expect_reject(&s, "big-endian", "big-endian");
	s = base_spec(); s.n_tensors = 1ull << 60;
	expect_reject(&s, "tensor count", "huge tensor count");
	s = base_spec(); s.n_kv = UINT64_MAX;
	expect_reject(&s, "metadata count", "huge kv count");
	s = base_spec(); s.key_len = 1ull << 62;
	expect_reject(&s, "exceeds the limit", "huge key length");
	s = base_spec(); s.off_b = 1ull << 40;
	expect_reject(&s, "past the end", "offset past end");
	s = base_spec(); s.off_b = UINT64_MAX - 31;
	expect_reject(&s, "past the end", "offset near 2^64");
	s = base_spec(); s.off_b = 0;
	expect_reject(&s, "overlap", "overlapping tensors");
	s = base_spec(); s.type_b = 99;
	expect_reject(&s, "unknown or unsupported tensor type 99", "unknown type");
	s = base_spec(); s.type_b = 10; /* Q2_K: real but not read */
	expect_reject(&s, "unknown or unsupported tensor type 10", "unsupported type");
	s = base_spec(); s.ndims_b = 2; s.ne_b[0] = 1ull << 32; s.ne_b[1] = 1ull << 32;
	expect_reject(&s, "element count overflows", "shape product overflow");
	s = base_spec(); s.ndims_b = 3; s.ne_b[0] = 1ull << 40; s.ne_b[1] = 1ull << 20; s.ne_b[2] = 1ull << 10;
	expect_reject(&s, "element count overflows", "3-d shape product overflow");
	s = base_spec(); s.ndims_b = 5;
	expect_reject(&s, "5 dimensions", "too many dimensions");
	s = base_spec(); s.ne_b[0] = 0;
	expect_reject(&s, "dimension 0 is 0", "zero dimension");
	s = base_spec(); s.type_b = GGML_Q4_0; /* 8 elements: not a block of 32 */
	expect_reject(&s, "not a multiple", "partial block");
	s = base_spec(); s.type_b = GGML_Q8_0; s.ne_b[0] = 1ull << 20; /* 1 MiB of blocks in a 4 KiB file */
	expect_reject(&s, "past the end", "quantized tensor past end");
	s = base_spec(); s.align = 3;
	expect_reject(&s, "not a power of two", "alignment 3");
	s = base_spec(); s.align = 0;
	expect_reject(&s, "not a power of two", "alignment 0");
	s = base_spec(); s.off_b = 16;
	expect_reject(&s, "not aligned", "misaligned offset");
	s = base_spec(); s.name_b = "a";
	expect_reject(&s, "duplicate tensor name 'a'", "duplicate tensor");
	s = base_spec(); s.dup_key = 1;
	expect_reject(&s, "duplicate key 'general.alignment'", "duplicate key");
	s = base_spec(); s.nested = 1;
	expect_reject(&s, "nested arrays", "nested array");
	gbuf g;
	s = base_spec();
	build(&g, &s);
	g.b[0] = 'X';
	gguf_file f;
	char err[256];
	CHECK(gguf_parse(&f, g.b, g.n, err, sizeof(err)) == -1 && strstr(err, "bad magic"), "bad magic");
}

static void test_f16_conversions(void)
{
	CHECK(gguf_f32_to_f16(1.0f) == 0x3C00, "1.0");
	CHECK(gguf_f32_to_f16(-2.0f) == 0xC000, "-2.0");
	CHECK(gguf_f32_to_f16(65504.0f) == 0x7BFF, "max");
	CHECK(gguf_f32_to_f16(65519.0f) == 0x7BFF, "just below the inf threshold");
	CHECK(gguf_f32_to_f16(65520.0f) == 0x7C00, "65520 rounds to inf");
	CHECK(gguf_f32_to_f16(0x1p-24f) == 0x0001, "smallest subnormal");
	CHECK(gguf_f32_to_f16(0x1p-25f) == 0x0000, "half of it rounds to even 0");
	CHECK(gguf_f32_to_f16(0.1f) == 0x2E66, "0.1");
	CHECK(gguf_f32_to_f16(1.0f + 0x1p-11f) == 0x3C00, "tie rounds to even (down)");
	CHECK(gguf_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3C02, "tie rounds to even (up)");
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF))
			continue; /* NaN */
		if (gguf_f32_to_f16(gguf_f16_to_f32((uint16_t)h)) != h)
			bad++;
	}
	CHECK(bad == 0, "%d f16 values do not round-trip", bad);
	CHECK(gguf_f32_to_bf16(1.0f) == 0x3F80 && gguf_bf16_to_f32(0x3F80) == 1.0f, "bf16 1.0");
}

static void test_dequant_known_answers(void)
{
	uint8_t blk[256];
	float y[256];
	/* Q4_1: d = 0.5, m = -1, nibble j low, 15 - j high. */
	memset(blk, 0, sizeof(blk));
	blk[0] = 0x00; blk[1] = 0x38; blk[2] = 0x00; blk[3] = 0xBC;
	for (int j = 0; j < 16; j++)
		blk[4 + j] = (uint8_t)(j | (15 - j) << 4);
	gguf_dequant(GGML_Q4_1, blk, y, 32);
	int ok = 1;
	for (int j = 0; j < 16; j++)
		ok &= y[j] == j * 0.5f - 1 && y[j + 16] == (15 - j) * 0.5f - 1;
	CHECK(ok, "Q4_1 block");
	/* Q8_0: d = 0.25, q = j - 16. */
	blk[0] = 0x00; blk[1] = 0x34;
	for (int j = 0; j < 32; j++)
		blk[2 + j] = (uint8_t)(int8_t)(j - 16);
	gguf_dequant(GGML_Q8_0, blk, y, 32);
	ok = 1;
	for (int j = 0; j < 32; j++)
		ok &= y[j] == (j - 16) * 0.25f;
	CHECK(ok, "Q8_0 block");
	/* Q4_0: d = 1, nibble j (low) → j - 8. */
	blk[0] = 0x00; blk[1] = 0x3C;
	for (int j = 0; j < 16; j++)
		blk[2 + j] = (uint8_t)j;
	gguf_dequant(GGML_Q4_0, blk, y, 32);
	CHECK(y[0] == -8 && y[15] == 7 && y[16] == -8 && y[31] == -8, "Q4_0 block");
	/* Q5_0: d = 1, qh bit j set for j < 16 → high bit of the low half. */
	memset(blk, 0, 22);
	blk[1] = 0x3C;
	blk[2] = 0xFF; blk[3] = 0xFF;
	gguf_dequant(GGML_Q5_0, blk, y, 32);
	CHECK(y[0] == 0 && y[15] == 0 && y[16] == -16, "Q5_0 block %g %g", (double)y[0], (double)y[16]);
	/* Q4_K: d = 1, dmin = 0, sub-block scales 1..8, all codes low 1 / high 2. */
	memset(blk, 0, 144);
	blk[1] = 0x3C;
	for (int j = 0; j < 4; j++)
		blk[4 + j] = (uint8_t)(j + 1);
	for (int j = 0; j < 4; j++)
		blk[12 + j] = (uint8_t)(j + 5);
	memset(blk + 16, 0x21, 128);
	gguf_dequant(GGML_Q4_K, blk, y, 256);
	const float want_k[8] = { 1, 4, 3, 8, 5, 12, 7, 16 };
	ok = 1;
	for (int j = 0; j < 256; j++)
		ok &= y[j] == want_k[j / 32];
	CHECK(ok, "Q4_K block");
	/* Q6_K: d = 1, scales 1, all codes 0 → -32; ql[0] = 0x0F → y[0] = -17. */
	memset(blk, 0, 210);
	for (int j = 0; j < 16; j++)
		blk[192 + j] = 1;
	blk[209] = 0x3C;
	blk[0] = 0x0F;
	gguf_dequant(GGML_Q6_K, blk, y, 256);
	CHECK(y[0] == -17 && y[1] == -32 && y[255] == -32, "Q6_K block %g %g", (double)y[0], (double)y[1]);
}

static void test_mlx_quantize(void)
{
	/* 0..31 / 31 at 4 bits: max is the edge, scale = -1/15, bias = 1, so
	 * code = rint((1 - w) * 15): w = 0 → 15, w = 1 → 0. */
	float w[128];
	for (int j = 0; j < 32; j++)
		w[j] = gguf_f16_to_f32(gguf_f32_to_f16(j / 31.0f));
	uint32_t q[16];
	uint16_t s[4], b[4];
	CHECK(mlx_quantize(w, 1, 32, 4, 32, q, s, b) == 0, "quantize");
	CHECK((q[0] & 0xF) == 15 && (q[3] >> 28) == 0, "codes %08x %08x", q[0], q[3]);
	CHECK(gguf_f16_to_f32(b[0]) == 1.0f, "bias %g", (double)gguf_f16_to_f32(b[0]));
	CHECK(fabsf(gguf_f16_to_f32(s[0]) + 1 / 15.0f) < 1e-3f, "scale %g", (double)gguf_f16_to_f32(s[0]));
	/* Every supported width: dequantized error within one step. (Not half:
	 * mx.quantize snaps the scale so the edge value is exact, and the far
	 * end may then be clamped; tests/py checks bit equality with MLX.) */
	const int bits[] = { 2, 3, 4, 5, 6, 8 };
	for (int bi = 0; bi < 6; bi++) {
		for (int j = 0; j < 128; j++)
			w[j] = gguf_f16_to_f32(gguf_f32_to_f16(sinf((float)j * 0.37f) * 0.1f));
		uint32_t wq[128 * 8 / 32];
		uint16_t sc[4], bs[4];
		float back[128];
		CHECK(mlx_quantize(w, 1, 128, bits[bi], 32, wq, sc, bs) == 0, "quantize %d", bits[bi]);
		mlx_dequantize(wq, sc, bs, 1, 128, bits[bi], 32, back);
		float worst = 0;
		for (int j = 0; j < 128; j++) {
			float step = fabsf(gguf_f16_to_f32(sc[j / 32]));
			float e = fabsf(back[j] - w[j]) / step;
			worst = e > worst ? e : worst;
		}
		CHECK(worst <= 1.0f + 1e-2f, "%d bits: error %g steps", bits[bi], (double)worst);
	}
	CHECK(mlx_quantize(w, 1, 48, 4, 32, q, s, b) == -1, "cols not a multiple of the group");
	CHECK(mlx_quantize(w, 1, 32, 7, 32, q, s, b) == -1, "7 bits");
}

/* Found by fuzz/gguf_fuzzer: a requantized tensor holding a value outside
 * f16's range made gguf_import format its error message from a freed row
 * buffer (heap-use-after-free under ASan). The regression input is a
 * small llama GGUF in the fuzz corpus; run from the repository root. */
static void test_import_f16_overflow_message(void)
{
	const char *in = "fuzz/gguf_seed_corpus/regress-import-f16-overflow-uaf";
	int fd = open(in, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0, "open %s (run from the repository root)", in);
	if (fd < 0)
		return;
	char dir[] = "/tmp/mlxr-test-gguf-XXXXXX";
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	int od = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	gguf_import_opts o = { 4, 64 };
	char err[256] = "";
	int r = gguf_import(fd, od, &o, NULL, err, sizeof(err));
	CHECK(r == -1 && strstr(err, "does not fit f16"), "rejected: rc %d, '%s'", r, err);
	close(od);
	close(fd);
	rmdir(dir); /* empty: the check happens before any file is written */
}

/* Found by fuzz/gguf_fuzzer: a v2 file with no tensors and no metadata,
 * 28 bytes, whose aligned data start (32) lies past its end, was accepted
 * with data_start > size. The empty data section now starts at the end of
 * the file. */
static void test_no_tensors_short_padding(void)
{
	uint8_t b[28] = { 'G', 'G', 'U', 'F', 2 };
	gguf_file f;
	char err[256] = "";
	int rc = gguf_parse(&f, b, sizeof(b), err, sizeof(err));
	CHECK(rc == 0, "a tensor-less file is well-formed: %s", err);
	if (rc)
		return;
	CHECK(f.n_tensors == 0 && f.data_start <= sizeof(b), "data_start %llu past the %zu-byte file",
	      (unsigned long long)f.data_start, sizeof(b));
	gguf_free(&f);
}

int main(void)
{
	test_no_tensors_short_padding();
	test_valid_file_parses();
	test_every_truncation_rejected();
	test_hostile_headers_rejected();
	test_f16_conversions();
	test_dequant_known_answers();
	test_mlx_quantize();
	test_import_f16_overflow_message();
	if (failures) {
		printf("test_gguf: %d failure(s)\n", failures);
		return 1;
	}
	printf("test_gguf: ok\n");
	return 0;
}
