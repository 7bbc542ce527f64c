/* fuzz/chat_render_fuzzer.c — worker/chat.c chat_render() of fuzzed
 * conversations with every real template (tests/data/templates, loaded
 * through tokenizer_config.json seeds of chat_config_seed_corpus/, plus the
 * plain-ChatML fallback).
 *
 * Input: byte 0 picks the template, byte 1 the options (bit 0
 * add_generation_prompt, bit 1 continue_final, bit 2 enable_thinking,
 * bit 3 a date override), then up to 16 messages separated by 0xFF (never
 * a byte of UTF-8); each message's first byte is its role (value 3 is an
 * invalid role, which must be rejected).
 * Checked beyond the sanitizers: errors are CHAT_ERR_INVALID with both
 * outputs NULL; invalid UTF-8 text and invalid roles are rejected; the mask
 * contract (fuzz/chat_check.h). */
#include <dirent.h>

#include "fuzz/chat_check.h"

#define MAXC 32
static chat_config cfgs[MAXC];
static int ncfg;

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	char d[4096];
	snprintf(d, sizeof(d), "%s/chat_config_seed_corpus", fuzz_dir());
	DIR *dir = opendir(d);
	FUZZ_CHECK(dir != NULL, "cannot open %s", d);
	char *names[64];
	int nn = 0;
	struct dirent *e;
	while ((e = readdir(dir)) && nn < 64)
		if (!strncmp(e->d_name, "tpl-", 4))
			names[nn++] = strdup(e->d_name);
	closedir(dir);
	qsort(names, (size_t)nn, sizeof(char *), cmp);
	for (int i = 0; i < nn && ncfg < MAXC - 1; i++) {
		char p[8192], err[256];
		size_t len;
		snprintf(p, sizeof(p), "%s/%s", d, names[i]);
		char *js = fuzz_slurp(p, &len);
		FUZZ_CHECK(chat_config_load(&cfgs[ncfg], js, len, err, sizeof(err)) == 0, "%s: %s", names[i], err);
		ncfg++;
		free(js);
		free(names[i]);
	}
	chat_config_fallback_chatml(&cfgs[ncfg++]);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	const chat_config *cfg = &cfgs[data[0] % ncfg];
	chat_opts o;
	chat_opts_default(&o);
	o.add_generation_prompt = data[1] & 1;
	o.continue_final = (data[1] >> 1) & 1;
	o.enable_thinking = (data[1] >> 2) & 1;
	o.date = (data[1] >> 3) & 1 ? "01 Jan 2030" : NULL;
	/* Without an override, Llama 3.2 renders today's date: fine, the checks
	 * below do not depend on it. */
	chat_msg msgs[16];
	size_t n = 0;
	int bad = 0;
	/* Each message text in its own exact-size allocation (ASan bounds). */
	char *copies[16];
	for (size_t i = 2; i < size && n < 16;) {
		size_t j = i;
		while (j < size && data[j] != 0xFF)
			j++;
		int role = j > i ? data[i] % 4 : CHAT_ROLE_USER; /* empty chunk: empty user text */
		size_t len = j > i ? j - i - 1 : 0;
		copies[n] = malloc(len ? len : 1);
		memcpy(copies[n], data + i + 1, len);
		msgs[n].role = role == 3 ? CHAT_ROLE_COUNT : (chat_role)role;
		msgs[n].text = copies[n];
		msgs[n].len = len;
		if (role == 3 || !fz_utf8_ok((const unsigned char *)copies[n], len))
			bad = 1;
		n++;
		i = j + 1;
	}
	if (n == 0)
		return 0;
	char *out;
	unsigned char *mask;
	size_t len;
	char err[256] = "";
	int r = chat_render(cfg, msgs, n, &o, &out, &mask, &len, err, sizeof(err));
	if (r == 0) {
		FUZZ_CHECK(!bad, "invalid role or UTF-8 accepted");
		fz_chat_check(msgs, n, out, mask, len);
		free(out);
		free(mask);
	} else {
		FUZZ_CHECK(r == CHAT_ERR_INVALID && !out && !mask && len == 0 && err[0], "render error %d", r);
	}
	for (size_t i = 0; i < n; i++)
		free(copies[i]);
	return 0;
}
