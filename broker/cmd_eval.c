/* broker/cmd_eval.c — `mlxr eval`: a developer verb that runs token ids
 * through the engine (in the worker) for reference comparisons
 * (tests/py/test_engine_ref.py).
 *
 *   mlxr eval MODEL --ids "1 2 3" [--logits OUT.f32] [--decode] [--generate N]
 *
 * --logits writes float32 little-endian logits [n][vocab] for every
 * position (one batched prefill, or token by token with --decode).
 * --generate prints N greedily chosen ids (EOS not special).
 *
 *   mlxr eval MODEL --chat MESSAGES.json [--no-think] [--continue]
 *
 * prints the ids of the conversation rendered with the model's chat
 * template and tokenized as the engine does before generating. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/cmds.h"
#include "broker/store.h"
#include "broker/wclient.h"
#include "common/json.h"

static int parse_ids(const char *s, int **out, size_t *n)
{
	size_t cap = 64, k = 0;
	int *v = malloc(sizeof(int) * cap);
	if (!v)
		return -1;
	while (*s) {
		while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t')
			s++;
		if (!*s)
			break;
		char *e;
		errno = 0;
		long x = strtol(s, &e, 10);
		if (e == s || errno || x < 0 || x > (1 << 30)) {
			free(v);
			return -1;
		}
		if (k == cap) {
			cap *= 2;
			int *t = realloc(v, sizeof(int) * cap);
			if (!t) {
				free(v);
				return -1;
			}
			v = t;
		}
		v[k++] = (int)x;
		s = e;
	}
	*out = v;
	*n = k;
	return 0;
}

/* MESSAGES.json: [{"role": ..., "content": ...}] (bounded: 16 MB). */
static int load_messages(const char *path, json_doc *d, wc_msg **msgs, size_t *n)
{
	char err[200];
	FILE *f = fopen(path, "rb");
	char *buf = malloc((16u << 20) + 1);
	size_t len = f && buf ? fread(buf, 1, 16u << 20, f) : 0;
	if (f)
		fclose(f);
	if (!buf || !len || json_parse(buf, len, d, err, sizeof(err)) || d->root->type != JSON_ARRAY) {
		free(buf);
		return -1;
	}
	free(buf);
	*msgs = calloc(d->root->n + 1, sizeof(wc_msg));
	if (!*msgs)
		return -1;
	for (uint32_t i = 0; i < d->root->n; i++) {
		const char *role = "", *content = "";
		json_get_str(&d->root->items[i], "role", &role);
		json_get_str(&d->root->items[i], "content", &content);
		(*msgs)[i].role = !strcmp(role, "system") ? WC_ROLE_SYSTEM :
				  !strcmp(role, "assistant") ? WC_ROLE_ASSISTANT : WC_ROLE_USER;
		(*msgs)[i].text = content;
		(*msgs)[i].len = strlen(content);
	}
	*n = d->root->n;
	return 0;
}

int cmd_eval(int argc, char **argv)
{
	const char *name = NULL, *ids_s = NULL, *logits_path = NULL, *chat = NULL;
	int decode = 0, gen = 0, no_think = 0, cont = 0, bad = 0, no_sandbox = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
		else if (!strcmp(argv[i], "--logits") && i + 1 < argc) logits_path = argv[++i];
		else if (!strcmp(argv[i], "--generate") && i + 1 < argc) gen = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--decode")) decode = 1;
		else if (!strcmp(argv[i], "--chat") && i + 1 < argc) chat = argv[++i];
		else if (!strcmp(argv[i], "--no-think")) no_think = 1;
		else if (!strcmp(argv[i], "--continue")) cont = 1;
		else if (!strcmp(argv[i], "--no-sandbox")) no_sandbox = 1;
		else if (!strcmp(argv[i], "--device") && i + 1 < argc) bad |= wclient_set_device(argv[++i]) != 0;
		else if (!strcmp(argv[i], "--fast-prefill")) wclient_set_fast_prefill();
		else if (argv[i][0] != '-' && !name) name = argv[i];
		else bad = 1;
	}
	int *ids = NULL;
	size_t n = 0;
	if (bad || !name || (!chat && (!ids_s || parse_ids(ids_s, &ids, &n) || n == 0 || gen < 0))) {
		fprintf(stderr, "usage: mlxr eval MODEL --ids \"1 2 3\" [--logits OUT.f32] [--decode] [--generate N]\n"
				"       mlxr eval MODEL --chat MESSAGES.json [--no-think] [--continue]\n"
				"       (either form) [--device auto|cpu|cuda] [--fast-prefill] [--no-sandbox]\n");
		free(ids);
		return 2;
	}
	char dir[4096], err[1024];
	wclient *w = NULL;
	wc_error e;
	int rc = 1;
	json_doc d = { 0 };
	wc_msg *msgs = NULL;
	size_t nm = 0;
	if (chat && load_messages(chat, &d, &msgs, &nm)) {
		fprintf(stderr, "mlxr: eval: %s: not a JSON array of messages\n", chat);
		goto out;
	}
	if (store_resolve(name, dir, sizeof(dir), err, sizeof(err))) {
		fprintf(stderr, "mlxr: eval: %s\n", err);
		goto out;
	}
	wclient_opts wo = { (int)n + gen + 16 > 256 ? (int)n + gen + 16 : 256, 0, no_sandbox };
	if (wclient_start(&w, dir, &wo, &e)) {
		fprintf(stderr, "mlxr: eval: %s\n", e.msg);
		goto out;
	}
	if (chat) {
		wc_request r;
		wc_request_defaults(&r);
		r.msgs = msgs;
		r.n_msgs = nm;
		r.no_think = no_think;
		r.continue_final = cont;
		int *pid;
		size_t np;
		if (wclient_chat_ids(w, &r, &pid, &np, &e)) {
			fprintf(stderr, "mlxr: eval: %s\n", e.msg);
			goto out;
		}
		for (size_t i = 0; i < np; i++)
			printf("%s%d", i ? " " : "", pid[i]);
		printf("\n");
		free(pid);
		rc = 0;
		goto out;
	}
	if (logits_path) {
		float *lg;
		if (wclient_logits(w, ids, n, decode, &lg, &e)) {
			fprintf(stderr, "mlxr: eval: %s\n", e.msg);
			goto out;
		}
		FILE *f = fopen(logits_path, "wb");
		size_t V = (size_t)wclient_info_get(w)->vocab;
		int ok = f && fwrite(lg, sizeof(float) * V, n, f) == n;
		if (f && fclose(f))
			ok = 0;
		free(lg);
		if (!ok) {
			fprintf(stderr, "mlxr: eval: cannot write %s\n", logits_path);
			goto out;
		}
	}
	if (gen > 0) {
		int *g;
		if (wclient_greedy(w, ids, n, gen, &g, &e)) {
			fprintf(stderr, "mlxr: eval: %s\n", e.msg);
			goto out;
		}
		for (int i = 0; i < gen; i++)
			printf("%s%d", i ? " " : "", g[i]);
		printf("\n");
		free(g);
	}
	rc = 0;
out:
	wclient_stop(w);
	free(msgs);
	json_free(&d);
	free(ids);
	return rc;
}
