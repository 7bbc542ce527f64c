/* common/modelfiles.c — see modelfiles.h. */
#include "common/modelfiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mf_read_file(const char *path, size_t cap, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return 1;
	char *b = malloc(cap + 1);
	size_t n = b ? fread(b, 1, cap + 1, f) : 0;
	fclose(f);
	if (!b || n > cap) {
		free(b);
		return -1;
	}
	b[n] = 0;
	*out = b;
	*len = n;
	return 0;
}

int mf_read(const char *dir, mf_files *f, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		size_t cap;
		int required;
	} files[4] = {
		{ "tokenizer.json", MF_TOKENIZER_MAX, 1 },
		{ "tokenizer_config.json", MF_TOKCONFIG_MAX, 0 },
		{ "generation_config.json", MF_GENCONFIG_MAX, 0 },
		{ "chat_template.jinja", MF_TEMPLATE_MAX, 0 },
	};
	mf_buf *dst[4] = { &f->tokenizer, &f->tok_config, &f->gen_config, &f->chat_template };
	memset(f, 0, sizeof(*f));
	for (int i = 0; i < 4; i++) {
		size_t n = 0;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
		int r = mf_read_file(path, files[i].cap, &f->owned[i], &n);
		if (r < 0) {
			snprintf(err, errlen, "%s: larger than %zu MB", files[i].name, files[i].cap >> 20);
			mf_free(f);
			return -1;
		}
		if (r == 1 && files[i].required) {
			snprintf(err, errlen, "%s: missing or unreadable", files[i].name);
			mf_free(f);
			return -1;
		}
		if (r == 0) {
			dst[i]->p = f->owned[i];
			dst[i]->n = n;
		}
	}
	return 0;
}

void mf_free(mf_files *f)
{
	for (int i = 0; i < 4; i++)
		free(f->owned[i]);
	memset(f, 0, sizeof(*f));
}
