/* tests/unit/test_safetensors.c — the safetensors reader rejects hostile
 * headers with a message naming the file, tensor and rule, and accepts
 * valid (unaligned) ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/safetensors.h"

static int fails;

/* Builds a file: 8-byte length, header JSON, `data` bytes of payload. */
static uint8_t *mk(const char *hdr, size_t data, size_t *size)
{
	size_t h = strlen(hdr);
	*size = 8 + h + data;
	uint8_t *b = calloc(1, *size + 1);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)h >> (8 * i));
	memcpy(b + 8, hdr, h);
	for (size_t i = 0; i < data; i++)
		b[8 + h + i] = (uint8_t)i;
	return b;
}

static void expect_reject(const char *what, const char *hdr, size_t data, const char *needle)
{
	size_t size;
	uint8_t *b = mk(hdr, data, &size);
	st_set s = { 0 };
	char err[512] = "";
	int r = st_parse_file(&s, 0, "model.safetensors", b, size, err, sizeof(err));
	if (r == 0 || !strstr(err, needle) || !strstr(err, "model.safetensors")) {
		printf("FAIL %s: r=%d err='%s' (wanted '%s')\n", what, r, err, needle);
		fails++;
	} else {
		printf("ok   %s: %s\n", what, err);
	}
	st_close(&s);
	free(b);
}

static void test_valid_unaligned(void)
{
	/* Two tensors, the second starting at an odd offset. */
	const char *h = "{\"__metadata__\":{\"format\":\"mlx\"},"
			"\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
			"\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[3,19]}}";
	size_t size;
	uint8_t *buf = mk(h, 19, &size);
	st_set s = { 0 };
	char err[256] = "";
	int r = st_parse_file(&s, 0, "x.safetensors", buf, size, err, sizeof(err));
	const st_tensor *t = st_find(&s, "b");
	if (r || s.ntensors != 2 || !t || t->nbytes != 16 || t->ndim != 2 || t->shape[1] != 2 ||
	    t->data != buf + 8 + strlen(h) + 3 || st_numel(t) != 4) {
		printf("FAIL valid unaligned file: r=%d err=%s\n", r, err);
		fails++;
	} else {
		printf("ok   valid unaligned file\n");
	}
	st_close(&s);
	free(buf);
}

static void test_short_and_huge_header(void)
{
	uint8_t tiny[5] = { 0 };
	st_set s = { 0 };
	char err[256] = "";
	if (st_parse_file(&s, 0, "t.safetensors", tiny, sizeof(tiny), err, sizeof(err)) == 0 || !strstr(err, "shorter")) {
		printf("FAIL truncated length: %s\n", err);
		fails++;
	} else {
		printf("ok   truncated length: %s\n", err);
	}
	uint8_t big[16] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f };
	if (st_parse_file(&s, 0, "t.safetensors", big, sizeof(big), err, sizeof(err)) == 0 || !strstr(err, "header length")) {
		printf("FAIL huge header length: %s\n", err);
		fails++;
	} else {
		printf("ok   huge header length: %s\n", err);
	}
	st_close(&s);
}

int main(void)
{
	test_valid_unaligned();
	test_short_and_huge_header();
	expect_reject("not JSON", "{\"a\":", 0, "not valid JSON");
	expect_reject("not an object", "[1,2]", 0, "not a JSON object");
	expect_reject("unknown dtype", "{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype");
	expect_reject("negative dim", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "dimension 0");
	expect_reject("rank too high", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "rank 9");
	expect_reject("span past end", "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 4, "past the 4 data bytes");
	expect_reject("span/shape mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "needs 8");
	expect_reject("begin after end", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}", 8, "begin <= end");
	expect_reject("element count overflow",
		      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,1]}}", 1, "overflows");
	expect_reject("byte size overflow",
		      "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,1]}}", 1, "overflows");
	expect_reject("overlap",
		      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 8, "overlap");
	expect_reject("duplicate name",
		      "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "duplicate");
	expect_reject("missing offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "tensor w");
	expect_reject("float dim", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1, "dimension 0");
	expect_reject("metadata not object", "{\"__metadata__\":3}", 0, "__metadata__");
	if (fails) {
		printf("%d FAILED\n", fails);
		return 1;
	}
	printf("all safetensors tests passed\n");
	return 0;
}
