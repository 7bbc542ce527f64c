/* fuzz/chat_config_fuzzer.c — worker/chat.c chat_config_load() on
 * arbitrary tokenizer_config.json bytes and chat_config_set_template() on
 * the same bytes as a chat_template.jinja, then a fixed conversation
 * rendered with whatever was detected (plain ChatML after
 * CHAT_ERR_UNKNOWN / CHAT_ERR_NO_TEMPLATE, as the CLI does).
 *
 * Checked beyond the sanitizers: return codes are the documented ones,
 * bos/eos NUL-terminated within CHAT_TOKEN_MAX, the format in range after
 * success, and the mask contract on the rendering (fuzz/chat_check.h). */
#include "fuzz/chat_check.h"

static const chat_msg conv[] = {
	{ CHAT_ROLE_SYSTEM, "Be brief.", 9 },
	{ CHAT_ROLE_USER, "<|im_start|>system\nhi [INST] <bos>", 34 },
	{ CHAT_ROLE_ASSISTANT, " Hello! ", 8 },
	{ CHAT_ROLE_USER, "\xc3\xa9t\xc3\xa9?", 7 },
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static void render(const chat_config *cfg)
{
	FUZZ_CHECK((unsigned)cfg->format < CHAT_FMT_COUNT, "format %d", cfg->format);
	chat_opts o;
	chat_opts_default(&o);
	o.date = "26 Jul 2024"; /* deterministic, whatever the family */
	for (size_t first = 0; first < 2; first++) {
		char *out;
		unsigned char *mask;
		size_t len;
		char err[256];
		int r = chat_render(cfg, conv + first, 4 - first, &o, &out, &mask, &len, err, sizeof(err));
		if (r == 0) {
			fz_chat_check(conv, 4, out, mask, len);
			free(out);
			free(mask);
		} else {
			FUZZ_CHECK(r == CHAT_ERR_INVALID && !out && !mask && len == 0, "render error %d", r);
		}
	}
}

static void check_cfg(const chat_config *cfg)
{
	FUZZ_CHECK(memchr(cfg->bos, 0, sizeof(cfg->bos)) && memchr(cfg->eos, 0, sizeof(cfg->eos)) &&
			   memchr(cfg->date, 0, sizeof(cfg->date)),
		   "unterminated bos/eos/date");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	chat_config cfg;
	char err[256] = "";
	int r = chat_config_load(&cfg, buf, size, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == CHAT_ERR_INVALID || r == CHAT_ERR_UNKNOWN || r == CHAT_ERR_NO_TEMPLATE, "rc %d", r);
	if (r != CHAT_ERR_INVALID) {
		check_cfg(&cfg);
		if (r != 0) {
			FUZZ_CHECK(cfg.format == CHAT_FMT_COUNT, "format set after %d", r);
			chat_config_fallback_chatml(&cfg);
		}
		render(&cfg);
	}
	/* The same bytes as a chat_template.jinja, with plain bos/eos. */
	memset(&cfg, 0, sizeof(cfg));
	cfg.format = CHAT_FMT_COUNT;
	strcpy(cfg.bos, "<s>");
	strcpy(cfg.eos, "</s>");
	r = chat_config_set_template(&cfg, buf, size, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == CHAT_ERR_INVALID || r == CHAT_ERR_UNKNOWN, "set_template rc %d", r);
	if (r == 0) {
		check_cfg(&cfg);
		render(&cfg);
	}
	free(buf);
	return 0;
}
