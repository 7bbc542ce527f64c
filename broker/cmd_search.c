/* broker/cmd_search.c — `mlxr search [QUERY] [--sort downloads|likes|
 * trending|recent] [--limit N]`: MLX models on the Hub (library "mlx")
 * with downloads and likes, and from each repository's config.json the
 * architecture, the quantization, and whether this engine runs it (the
 * same model_config_parse that validates a model before it is loaded).
 * Every byte comes through the sandboxed fetcher and is parsed here as
 * untrusted JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/cmds.h"
#include "broker/fclient.h"
#include "broker/store.h"
#include "common/json.h"
#include "worker/model.h"

#define SEARCH_MAX (8u << 20)
#define CONFIG_MAX (1u << 20)

static void usage(FILE *f)
{
	fprintf(f, "usage: mlxr search [QUERY] [--sort downloads|likes|trending|recent] [--limit N]\n"
		   "  lists MLX models on the Hugging Face Hub ($HF_ENDPOINT), with architecture,\n"
		   "  quantization and whether mlxr can run them (--limit 1..100, default 20)\n");
}

static void enc(char *out, size_t n, const char *s)
{
	size_t k = 0;
	for (; *s && k + 4 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~", c))
			out[k++] = (char)c;
		else
			k += (size_t)snprintf(out + k, n - k, "%%%02X", c);
	}
	out[k] = 0;
}

/* Printable, bounded copy of a string the Hub sent (no terminal escapes). */
static void clean(char *out, size_t n, const char *s)
{
	size_t k = 0;
	for (; s && *s && k + 1 < n; s++)
		out[k++] = ((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f) ? *s : '?';
	out[k] = 0;
}

static void describe(const char *base, const char *id, char *arch, size_t al, char *quant, size_t ql, const char **runs)
{
	char url[4096], ferr[512], eid[512];
	snprintf(arch, al, "?");
	snprintf(quant, ql, "?");
	*runs = "?";
	char cid[300];
	if (store_check_name(id, ferr, sizeof(ferr)))
		return;
	clean(cid, sizeof(cid), id);
	snprintf(eid, sizeof(eid), "%s", cid);
	snprintf(url, sizeof(url), "%s/%s/resolve/main/config.json", base, eid);
	char *body;
	size_t len;
	if (fclient_get(url, CONFIG_MAX, &body, &len, ferr, sizeof(ferr)) != 200) {
		free(body);
		return;
	}
	json_doc d;
	char jerr[160];
	if (json_parse(body, len, &d, jerr, sizeof(jerr)) == 0) {
		const char *mt = NULL;
		if (json_get_str(d.root, "model_type", &mt) == 0)
			clean(arch, al, mt);
		const json_value *q = json_get(d.root, "quantization");
		int64_t bits, gs;
		if (q && json_get_int(q, "bits", &bits) == 0 && json_get_int(q, "group_size", &gs) == 0)
			snprintf(quant, ql, "%lld-bit g%lld", (long long)bits, (long long)gs);
		else if (!q)
			snprintf(quant, ql, "none");
		json_free(&d);
		model_config mc;
		char cerr[256];
		if (model_config_parse(&mc, body, len, cerr, sizeof(cerr)) == 0) {
			model_config_free(&mc);
			*runs = "yes";
		} else {
			*runs = "no";
		}
	}
	free(body);
}

int cmd_search(int argc, char **argv)
{
	const char *query = NULL, *sort = "downloads";
	long limit = 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sort") && i + 1 < argc)
			sort = argv[++i];
		else if (!strcmp(argv[i], "--limit") && i + 1 < argc) {
			char *e;
			limit = strtol(argv[++i], &e, 10);
			if (*e || limit < 1 || limit > 100) {
				usage(stderr);
				return 2;
			}
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' || query) {
			usage(stderr);
			return 2;
		} else
			query = argv[i];
	}
	const char *key = !strcmp(sort, "downloads") ? "downloads" : !strcmp(sort, "likes") ? "likes" :
			  !strcmp(sort, "trending") ? "trendingScore" : !strcmp(sort, "recent") ? "lastModified" : NULL;
	if (!key) {
		usage(stderr);
		return 2;
	}
	const char *base = fclient_endpoint();
	char url[4096], q[1024] = "", err[1024];
	if (query) {
		char e[900];
		enc(e, sizeof(e), query);
		snprintf(q, sizeof(q), "&search=%s", e);
	}
	snprintf(url, sizeof(url), "%s/api/models?library=mlx%s&sort=%s&direction=-1&limit=%ld", base, q, key, limit);
	char *body;
	size_t len;
	int st = fclient_get(url, SEARCH_MAX, &body, &len, err, sizeof(err));
	if (st != 200) {
		if (st > 0)
			fprintf(stderr, "mlxr: search: the Hub answered HTTP %d\n", st);
		else
			fprintf(stderr, "mlxr: search: %s\n", err);
		free(body);
		fclient_stop();
		return 1;
	}
	json_doc d;
	char jerr[160];
	if (json_parse(body, len, &d, jerr, sizeof(jerr)) || d.root->type != JSON_ARRAY) {
		fprintf(stderr, "mlxr: search: the Hub's answer is not a JSON array\n");
		free(body);
		fclient_stop();
		return 1;
	}
	free(body);
	printf("%-48s %10s %6s  %-12s %-12s %s\n", "MODEL", "DOWNLOADS", "LIKES", "ARCH", "QUANT", "RUNS");
	for (uint32_t i = 0; i < d.root->n && i < (uint32_t)limit; i++) {
		const json_value *m = json_at(d.root, i);
		const char *id = NULL;
		if (json_get_str(m, "id", &id) && json_get_str(m, "modelId", &id))
			continue;
		int64_t dl = 0, likes = 0;
		json_get_int(m, "downloads", &dl);
		json_get_int(m, "likes", &likes);
		char arch[64], quant[64], cid[256];
		const char *runs;
		describe(base, id, arch, sizeof(arch), quant, sizeof(quant), &runs);
		clean(cid, sizeof(cid), id);
		printf("%-48s %10lld %6lld  %-12s %-12s %s\n", cid, (long long)dl, (long long)likes, arch, quant, runs);
	}
	if (d.root->n == 0)
		printf("(no MLX models found)\n");
	json_free(&d);
	fclient_stop();
	return 0;
}
