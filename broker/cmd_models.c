/* broker/cmd_models.c — `mlxr list`, `mlxr show MODEL`, `mlxr rm MODEL`. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/cmds.h"
#include "broker/store.h"
#include "common/json.h"
#include "worker/model.h"

/* Bytes of the regular files of a model directory (symlinks followed, as
 * the Hugging Face cache links snapshots to blobs). */
static uint64_t dir_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	uint64_t sum = 0;
	struct dirent *e;
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char p[4096];
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
			sum += (uint64_t)st.st_size;
	}
	closedir(d);
	return sum;
}

static void human(uint64_t b, char *out, size_t n)
{
	if (b >= (1ull << 30))
		snprintf(out, n, "%.1f GB", b / 1e9);
	else
		snprintf(out, n, "%.0f MB", b / 1e6);
}

/* Architecture and quantization from config.json, without loading. */
static int describe(const char *dir, char *arch, size_t al, char *quant, size_t ql)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/config.json", dir);
	FILE *f = fopen(p, "rb");
	if (!f)
		return -1;
	char *b = malloc((4u << 20) + 1);
	size_t n = b ? fread(b, 1, 4u << 20, f) : 0;
	fclose(f);
	json_doc d;
	char jerr[128];
	if (!b || json_parse(b, n, &d, jerr, sizeof(jerr))) {
		free(b);
		return -1;
	}
	const char *mt = "?";
	json_get_str(d.root, "model_type", &mt);
	snprintf(arch, al, "%s", mt);
	const json_value *q = json_get(d.root, "quantization");
	int64_t bits, gs;
	if (q && json_get_int(q, "bits", &bits) == 0 && json_get_int(q, "group_size", &gs) == 0) {
		int ov = 0;
		for (uint32_t i = 0; i < q->n; i++)
			ov += q->items[2 * i + 1].type == JSON_OBJECT || q->items[2 * i + 1].type == JSON_FALSE;
		snprintf(quant, ql, "%lld-bit g%lld%s", (long long)bits, (long long)gs, ov ? " (mixed)" : "");
	} else {
		const char *dt = "bf16";
		json_get_str(d.root, "torch_dtype", &dt);
		snprintf(quant, ql, "%s", dt);
	}
	json_free(&d);
	free(b);
	return 0;
}

static void list_row(const char *name, const char *dir, const char *src)
{
	char arch[64] = "?", quant[64] = "?", size[32];
	if (describe(dir, arch, sizeof(arch), quant, sizeof(quant)))
		return; /* not a model directory */
	human(dir_bytes(dir), size, sizeof(size));
	printf("%-48s %-12s %-16s %9s  %s\n", name, arch, quant, size, src);
}

int cmd_list(int argc, char **argv)
{
	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "usage: mlxr list\n");
		return 2;
	}
	char models[3072], cache[3072], err[256];
	printf("%-48s %-12s %-16s %9s  %s\n", "NAME", "ARCH", "QUANT", "SIZE", "WHERE");
	if (store_models_dir(models, sizeof(models)) == 0) {
		DIR *d = opendir(models);
		struct dirent *o;
		while (d && (o = readdir(d))) {
			if (o->d_name[0] == '.')
				continue;
			char od[4096];
			snprintf(od, sizeof(od), "%s/%s", models, o->d_name);
			DIR *d2 = opendir(od);
			struct dirent *r;
			while (d2 && (r = readdir(d2))) {
				char name[600], dir[4400];
				if (r->d_name[0] == '.')
					continue;
				snprintf(name, sizeof(name), "%s/%s", o->d_name, r->d_name);
				if (store_check_name(name, err, sizeof(err)))
					continue;
				snprintf(dir, sizeof(dir), "%s/%s", od, r->d_name);
				list_row(name, dir, "store");
			}
			if (d2)
				closedir(d2);
		}
		if (d)
			closedir(d);
	}
	/* Hugging Face cache: models--org--repo. */
	const char *hc = getenv("HF_HUB_CACHE"), *hh = getenv("HF_HOME"), *home = getenv("HOME");
	if (hc && *hc)
		snprintf(cache, sizeof(cache), "%s", hc);
	else if (hh && *hh)
		snprintf(cache, sizeof(cache), "%s/hub", hh);
	else
		snprintf(cache, sizeof(cache), "%s/.cache/huggingface/hub", home ? home : "");
	DIR *d = opendir(cache);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "models--", 8))
			continue;
		char name[600], dir[4096];
		const char *rest = e->d_name + 8, *sep = strstr(rest, "--");
		if (!sep)
			continue;
		snprintf(name, sizeof(name), "%.*s/%s", (int)(sep - rest), rest, sep + 2);
		if (store_check_name(name, err, sizeof(err)) || store_resolve(name, dir, sizeof(dir), err, sizeof(err)))
			continue;
		if (strstr(dir, "/snapshots/"))
			list_row(name, dir, "hf-cache");
	}
	if (d)
		closedir(d);
	return 0;
}

int cmd_show(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mlxr show MODEL\n");
		return 2;
	}
	char dir[4096], err[1024], arch[64], quant[64], size[32];
	model m;
	if (store_resolve(argv[1], dir, sizeof(dir), err, sizeof(err)) || model_load(&m, dir, err, sizeof(err))) {
		fprintf(stderr, "mlxr: show: %s\n", err);
		return 1;
	}
	const model_config *c = &m.cfg;
	describe(dir, arch, sizeof(arch), quant, sizeof(quant));
	human(dir_bytes(dir), size, sizeof(size));
	/* Parameters: every weight matrix (quantized ones by their logical
	 * shape) plus the 1-D tensors (norms, projection biases). */
	uint64_t params = 0;
	for (size_t i = 0; i < m.st.ntensors; i++)
		if (m.st.tensors[i].ndim == 1)
			params += st_numel(&m.st.tensors[i]);
	for (int l = 0; l < c->n_layers; l++) {
		const layer_weights *L = &m.layers[l];
		const kq_matrix *mats[] = { &L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down };
		for (size_t i = 0; i < 7; i++)
			params += (uint64_t)mats[i]->rows * (uint64_t)mats[i]->cols;
	}
	params += (uint64_t)m.embed.rows * (uint64_t)m.embed.cols;
	if (!c->tied)
		params += (uint64_t)m.lm_head.rows * (uint64_t)m.lm_head.cols;
	printf("  Model\n");
	printf("    path                %s\n", dir);
	printf("    architecture        %s\n", arch);
	printf("    parameters          %.1fM\n", params / 1e6);
	printf("    quantization        %s\n", quant);
	printf("    size on disk        %s\n", size);
	printf("    layers              %d\n", c->n_layers);
	printf("    hidden / FFN        %d / %d\n", c->hidden, c->inter);
	printf("    attention heads     %d (%d key/value, head dim %d)\n", c->n_heads, c->n_kv_heads, c->head_dim);
	printf("    vocabulary          %d\n", c->vocab);
	printf("    context length      %d\n", c->max_pos);
	printf("    embeddings          %s\n", c->tied ? "tied" : "separate lm_head");
	if (c->window)
		printf("    sliding window      %d\n", c->window);
	printf("    weight bytes/token  %.1f MB\n", m.decode_bytes / 1e6);
	printf("    tensors             %zu in %d file(s)\n", m.st.ntensors, m.st.nshards);
	model_free(&m);
	return 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p);
}

int cmd_rm(int argc, char **argv)
{
	const char *name = NULL;
	int yes = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--yes") || !strcmp(argv[i], "-y"))
			yes = 1;
		else if (!name)
			name = argv[i];
		else
			name = NULL, i = argc;
	}
	if (!name) {
		fprintf(stderr, "usage: mlxr rm MODEL [--yes]\n");
		return 2;
	}
	char models[3072], dir[4096], err[512];
	if (store_check_name(name, err, sizeof(err))) {
		fprintf(stderr, "mlxr: rm: %s\n", err);
		return 1;
	}
	store_models_dir(models, sizeof(models));
	snprintf(dir, sizeof(dir), "%s/%s", models, name);
	struct stat st;
	if (lstat(dir, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "mlxr: rm: '%s' is not in mlxr's store (%s); mlxr never deletes from the Hugging Face cache\n",
			name, models);
		return 1;
	}
	if (!yes) {
		if (!isatty(0)) {
			fprintf(stderr, "mlxr: rm: refusing to delete %s without --yes (standard input is not a terminal)\n", name);
			return 1;
		}
		fprintf(stderr, "Delete %s (%s)? [y/N] ", name, dir);
		char ans[16] = "";
		if (!fgets(ans, sizeof(ans), stdin) || (ans[0] != 'y' && ans[0] != 'Y')) {
			fprintf(stderr, "Not deleted.\n");
			return 1;
		}
	}
	/* Rename first, so the model disappears at once even if removal of
	 * the files is interrupted. */
	char gone[4200];
	snprintf(gone, sizeof(gone), "%s/.deleting-%ld", models, (long)getpid());
	if (rename(dir, gone) || nftw(gone, rm_entry, 16, FTW_DEPTH | FTW_PHYS)) {
		fprintf(stderr, "mlxr: rm: cannot delete %s: %s\n", dir, strerror(errno));
		return 1;
	}
	/* Remove an org folder left empty. */
	char org[4096];
	snprintf(org, sizeof(org), "%s/%.*s", models, (int)(strchr(name, '/') - name), name);
	rmdir(org);
	printf("deleted '%s'\n", name);
	return 0;
}
