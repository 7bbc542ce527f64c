/* tests/unit/test_model_config.c — config.json validation in
 * worker/model_config.c: values derived from defaults obey the same bounds
 * as values written in the file. Regression inputs found by
 * fuzz/model_config_fuzzer live in fuzz/model_config_seed_corpus/regress-*.
 * Run under ASan/UBSan by `make asan`. Exit status 0 = all passed. */
#include <stdio.h>
#include <string.h>

#include "worker/model.h"

static int failures;

#define CHECK(cond, ...)                                            \
	do {                                                        \
		if (!(cond)) {                                      \
			failures++;                                 \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                        \
			printf("\n");                               \
		}                                                   \
	} while (0)

static int parse(const char *js, char *err, size_t errlen)
{
	model_config c;
	int r = model_config_parse(&c, js, strlen(js), err, errlen);
	if (r == 0)
		model_config_free(&c);
	return r;
}

static void test_valid_config_parses(void)
{
	char err[256] = "";
	CHECK(parse("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,\"intermediate_size\":128,"
		    "\"num_attention_heads\":4,\"vocab_size\":32}", err, sizeof(err)) == 0, "valid llama: %s", err);
}

/* Found by fuzz/model_config_fuzzer: hidden_size 2 with 4 heads and no
 * head_dim gave the default head_dim 2 / 4 = 0, which bypassed the
 * [2, 1024] bound (only values read from the file were checked). */
static void test_default_head_dim_zero_rejected(void)
{
	char err[256] = "";
	int r = parse("{\"model_type\":\"gemma2\",\"hidden_size\":2,\"num_hidden_layers\":4,\"intermediate_size\":16,"
		      "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":16}", err, sizeof(err));
	CHECK(r == -1 && strstr(err, "head_dim 0"), "default head_dim 0 rejected: rc %d '%s'", r, err);
}

/* phi3's head_dim is hidden / heads (mlx-lm ignores head_dim): the same
 * bound applies. */
static void test_phi3_derived_head_dim_bounded(void)
{
	char err[256] = "";
	int r = parse("{\"model_type\":\"phi3\",\"hidden_size\":4096,\"num_hidden_layers\":1,\"intermediate_size\":16,"
		      "\"num_attention_heads\":2,\"vocab_size\":16}", err, sizeof(err));
	CHECK(r == -1 && strstr(err, "head_dim 2048"), "phi3 head_dim 2048 rejected: rc %d '%s'", r, err);
}

/* Found by fuzz/model_config_fuzzer (regress-longrope-tiny-factor.json):
 * a long_factor of 2.1e-60 is positive as a double but 0 as a float, and
 * the rotary frequency became inf. */
static void test_longrope_factor_bounded(void)
{
	char err[256] = "";
	const char *fmt = "{\"model_type\":\"phi3\",\"hidden_size\":16,\"num_hidden_layers\":1,\"intermediate_size\":16,"
			  "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":16,"
			  "\"rope_scaling\":{\"type\":\"longrope\",\"long_factor\":[1.0,%s],\"short_factor\":[1.0,1.0]},"
			  "\"max_position_embeddings\":8192,\"original_max_position_embeddings\":4096}";
	char js[512];
	snprintf(js, sizeof(js), fmt, "2.1e-060");
	int r = parse(js, err, sizeof(err));
	CHECK(r == -1 && strstr(err, "long_factor[1]"), "long_factor 2.1e-60 rejected: rc %d '%s'", r, err);
	snprintf(js, sizeof(js), fmt, "1e7");
	r = parse(js, err, sizeof(err));
	CHECK(r == -1 && strstr(err, "long_factor[1]"), "long_factor 1e7 rejected: rc %d '%s'", r, err);
	snprintf(js, sizeof(js), fmt, "2.5");
	CHECK(parse(js, err, sizeof(err)) == 0, "long_factor 2.5 accepted: %s", err);
}

int main(void)
{
	test_longrope_factor_bounded();
	test_valid_config_parses();
	test_default_head_dim_zero_rejected();
	test_phi3_derived_head_dim_bounded();
	if (failures) {
		printf("test_model_config: %d failure(s)\n", failures);
		return 1;
	}
	printf("test_model_config: ok\n");
	return 0;
}
