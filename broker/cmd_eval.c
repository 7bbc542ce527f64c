/* broker/cmd_eval.c — `mlxr eval`: a developer verb that runs token ids
 * through the engine for reference comparisons (tests/py/test_engine_ref.py).
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
#include "common/json.h"
#include "worker/model.h"
#include "worker/sampler.h"
#include "worker/session.h"

static int parse_ids(const char *s, int **out, int *n)
{
	int cap = 64, k = 0;
	int *v = malloc(sizeof(int) * (size_t)cap);
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
			int *t = realloc(v, sizeof(int) * (size_t)cap);
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

/* Renders MESSAGES.json ([{"role": ..., "content": ...}]) with the model's
 * template and prints the prompt ids. */
static int chat_ids(const char *name, const char *path, int no_think, int cont)
{
	char dir[4096], err[1024];
	FILE *f = fopen(path, "rb");
	char *buf = malloc((16u << 20) + 1);
	size_t n = f && buf ? fread(buf, 1, 16u << 20, f) : 0;
	if (f)
		fclose(f);
	json_doc d;
	int rc = 1;
	if (!buf || !n || json_parse(buf, n, &d, err, sizeof(err)) || d.root->type != JSON_ARRAY) {
		fprintf(stderr, "mlxr: eval: %s: not a JSON array of messages\n", path);
		free(buf);
		return 1;
	}
	chat_msg *msgs = calloc(d.root->n + 1, sizeof(chat_msg));
	for (uint32_t i = 0; msgs && i < d.root->n; i++) {
		const char *role = "", *content = "";
		json_get_str(&d.root->items[i], "role", &role);
		json_get_str(&d.root->items[i], "content", &content);
		msgs[i].role = !strcmp(role, "system") ? CHAT_ROLE_SYSTEM :
			       !strcmp(role, "assistant") ? CHAT_ROLE_ASSISTANT : CHAT_ROLE_USER;
		msgs[i].text = content;
		msgs[i].len = strlen(content);
	}
	session s;
	int *ids = NULL;
	size_t nids = 0;
	chat_opts co;
	chat_opts_default(&co);
	co.enable_thinking = !no_think;
	if (cont) {
		co.continue_final = 1;
		co.add_generation_prompt = 0;
	}
	if (store_resolve(name, dir, sizeof(dir), err, sizeof(err)) || session_open(&s, dir, 256, err, sizeof(err))) {
		fprintf(stderr, "mlxr: eval: %s\n", err);
		goto out;
	}
	if (session_encode_chat(&s, msgs, d.root->n, &co, &ids, &nids, err, sizeof(err))) {
		fprintf(stderr, "mlxr: eval: %s\n", err);
	} else {
		for (size_t i = 0; i < nids; i++)
			printf("%s%d", i ? " " : "", ids[i]);
		printf("\n");
		rc = 0;
	}
	free(ids);
	session_close(&s);
out:
	free(msgs);
	json_free(&d);
	free(buf);
	return rc;
}

int cmd_eval(int argc, char **argv)
{
	const char *name = NULL, *ids_s = NULL, *logits_path = NULL, *chat = NULL;
	int decode = 0, gen = 0, no_think = 0, cont = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
		else if (!strcmp(argv[i], "--logits") && i + 1 < argc) logits_path = argv[++i];
		else if (!strcmp(argv[i], "--generate") && i + 1 < argc) gen = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--decode")) decode = 1;
		else if (!strcmp(argv[i], "--chat") && i + 1 < argc) chat = argv[++i];
		else if (!strcmp(argv[i], "--no-think")) no_think = 1;
		else if (!strcmp(argv[i], "--continue")) cont = 1;
		else if (argv[i][0] != '-' && !name) name = argv[i];
		else {
			fprintf(stderr, "usage: mlxr eval MODEL --ids \"1 2 3\" [--logits OUT.f32] [--decode] [--generate N]\n");
			return 2;
		}
	}
	if (chat && name)
		return chat_ids(name, chat, no_think, cont);
	int *ids = NULL, n = 0;
	if (!name || !ids_s || parse_ids(ids_s, &ids, &n) || n == 0 || gen < 0) {
		fprintf(stderr, "mlxr: eval: need MODEL and --ids with at least one non-negative id\n");
		free(ids);
		return 2;
	}
	char dir[4096], err[512];
	model m;
	model_state s;
	int rc = 1;
	FILE *f = NULL;
	kpool_init(0);
	if (store_resolve(name, dir, sizeof(dir), err, sizeof(err)) || model_load(&m, dir, err, sizeof(err))) {
		fprintf(stderr, "mlxr: eval: %s\n", err);
		free(ids);
		return 1;
	}
	for (int i = 0; i < n; i++)
		if (ids[i] >= m.cfg.vocab) {
			fprintf(stderr, "mlxr: eval: id %d is outside the vocabulary (%d)\n", ids[i], m.cfg.vocab);
			goto out_model;
		}
	int ctx = n + gen + 1, batch = decode ? 1 : (n < 512 ? n : 512);
	if (model_state_init(&s, &m, ctx, batch)) {
		fprintf(stderr, "mlxr: eval: out of memory for a %d-token context\n", ctx);
		goto out_model;
	}
	if (logits_path && !(f = fopen(logits_path, "wb"))) {
		fprintf(stderr, "mlxr: eval: cannot write %s\n", logits_path);
		goto out;
	}
	size_t V = (size_t)m.cfg.vocab;
	for (int done = 0; done < n;) {
		int step = n - done < batch ? n - done : batch;
		if (model_forward(&m, &s, ids + done, step, 1)) {
			fprintf(stderr, "mlxr: eval: forward failed\n");
			goto out;
		}
		if (f && fwrite(s.logits, sizeof(float) * V, (size_t)step, f) != (size_t)step) {
			fprintf(stderr, "mlxr: eval: short write to %s\n", logits_path);
			goto out;
		}
		done += step;
	}
	if (gen > 0) {
		/* s.logits holds [step][V] from the last call; its last row is next. */
		int last_step = decode ? 1 : (n % batch ? n % batch : batch);
		int tok = sampler_argmax(s.logits + (size_t)(last_step - 1) * V, (int)V);
		for (int g = 0; g < gen; g++) {
			printf("%s%d", g ? " " : "", tok);
			if (g + 1 == gen)
				break;
			if (model_forward(&m, &s, &tok, 1, 0)) {
				fprintf(stderr, "mlxr: eval: forward failed\n");
				goto out;
			}
			tok = sampler_argmax(s.logits, (int)V);
		}
		printf("\n");
	}
	rc = 0;
out:
	if (f && fclose(f) && rc == 0) {
		fprintf(stderr, "mlxr: eval: cannot write %s\n", logits_path);
		rc = 1;
	}
	model_state_free(&s);
out_model:
	model_free(&m);
	free(ids);
	return rc;
}
