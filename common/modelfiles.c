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

const mf_spec mf_specs[MF_COUNT] = {
	{ "tokenizer.json", MF_TOKENIZER_MAX, 1 },
	{ "tokenizer_config.json", MF_TOKCONFIG_MAX, 0 },
	{ "generation_config.json", MF_GENCONFIG_MAX, 0 },
	{ "chat_template.jinja", MF_TEMPLATE_MAX, 0 },
};

void mf_too_large(const mf_spec *s, char *err, size_t errlen)
{
	int mb = (s->cap >> 20) != 0;
	snprintf(err, errlen, "%s: larger than %zu %s", s->name, mb ? s->cap >> 20 : s->cap >> 10, mb ? "MB" : "KB");
}

int mf_read(const char *dir, mf_files *f, char *err, size_t errlen)
{
	mf_buf *dst[MF_COUNT] = { &f->tokenizer, &f->tok_config, &f->gen_config, &f->chat_template };
	memset(f, 0, sizeof(*f));
	for (int i = 0; i < MF_COUNT; i++) {
		size_t n = 0;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, mf_specs[i].name);
		int r = mf_read_file(path, mf_specs[i].cap, &f->owned[i], &n);
		if (r < 0) {
			mf_too_large(&mf_specs[i], err, errlen);
			mf_free(f);
			return -1;
		}
		if (r == 1 && mf_specs[i].required) {
			snprintf(err, errlen, "%s: missing or unreadable", mf_specs[i].name);
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
	for (int i = 0; i < MF_COUNT; i++)
		free(f->owned[i]);
	memset(f, 0, sizeof(*f));
}

int mlx_quant_supported(int bits, int group_size)
{
	int b = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
	int g = group_size == 32 || group_size == 64 || group_size == 128;
	return b && g;
}
