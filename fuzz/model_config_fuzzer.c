/* fuzz/model_config_fuzzer.c — worker/model_config.c model_config_parse()
 * on arbitrary config.json bytes.
 *
 * Checked beyond the sanitizers, on every accepted config: the dimensions
 * are inside the bounds model_config.c documents (the products model_load
 * and the forward pass compute must fit an int), head_dim is even and
 * non-zero, heads are a multiple of kv heads, the rotated dims fit in a
 * head, the RoPE tables are allocated, finite and positive, the special ids
 * are inside the vocabulary; model_config_free() releases everything. */
#include <math.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "worker/model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	model_config c;
	char err[512] = "";
	if (model_config_parse(&c, buf, size, err, sizeof(err)) == 0) {
		FUZZ_CHECK((unsigned)c.arch < ARCH_COUNT, "arch %d", c.arch);
		FUZZ_CHECK(c.hidden >= 1 && c.hidden <= 65536, "hidden %d", c.hidden);
		FUZZ_CHECK(c.n_layers >= 1 && c.n_layers <= MODEL_MAX_LAYERS, "layers %d", c.n_layers);
		FUZZ_CHECK(c.n_heads >= 1 && c.n_heads <= 1024 && c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0,
			   "heads %d/%d", c.n_heads, c.n_kv_heads);
		FUZZ_CHECK(c.head_dim >= 2 && c.head_dim % 2 == 0, "head_dim %d", c.head_dim);
		FUZZ_CHECK(c.vocab >= 1 && c.vocab <= (1 << 22) && c.inter >= 1, "vocab %d inter %d", c.vocab, c.inter);
		FUZZ_CHECK(c.rot_dim >= 0 && c.rot_dim <= c.head_dim && c.rot_dim % 2 == 0, "rot_dim %d", c.rot_dim);
		FUZZ_CHECK(c.inv_freq && c.inv_freq_local, "RoPE tables");
		for (int i = 0; i < c.rot_dim / 2; i++)
			FUZZ_CHECK(isfinite(c.inv_freq[i]) && isfinite(c.inv_freq_local[i]), "inv_freq[%d] = %g", i,
				   c.inv_freq[i]);
		FUZZ_CHECK(isfinite(c.attn_scale) && c.attn_scale > 0, "attn_scale %g", c.attn_scale);
		FUZZ_CHECK(c.bos_id >= -1 && c.bos_id < c.vocab, "bos %d", c.bos_id);
		FUZZ_CHECK(c.n_eos >= 0 && c.n_eos <= MODEL_MAX_EOS, "n_eos %d", c.n_eos);
		for (int i = 0; i < c.n_eos; i++)
			FUZZ_CHECK(c.eos_ids[i] >= 0 && c.eos_ids[i] < c.vocab, "eos %d", c.eos_ids[i]);
		FUZZ_CHECK(memchr(c.model_type, 0, sizeof(c.model_type)) != NULL, "model_type not terminated");
		model_config_free(&c);
	} else {
		FUZZ_CHECK(err[0] != 0, "rejected without a message");
	}
	free(buf);
	return 0;
}
