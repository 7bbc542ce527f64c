/* worker/tool_chatfmt.c — `mlxr chat-render`, a developer verb: renders a
 * conversation with a model's chat template (worker/chat.h) and prints the
 * bytes, or with --mask the mask as '0'/'1' characters. tests/py/test_chat.py
 * compares its output with transformers' apply_chat_template. It runs in a
 * sandboxed worker (worker/tool.h): the broker opens the files, the
 * template and the messages are parsed only here.
 *
 *   mlxr chat-render TOKENIZER_CONFIG.json MESSAGES.json [--template FILE.jinja]
 *       [--no-generation-prompt] [--continue] [--no-think] [--date "26 Jul 2024"]
 *       [--fallback-chatml] [--mask | --format]
 *
 * --format prints the detected family (chat_format_name) instead.
 *
 * MESSAGES.json: [{"role": "system"|"user"|"assistant", "content": "..."}, ...]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "worker/chat.h"
#include "worker/tool.h"

/* Messages file <= 64 MiB: a conversation far longer than any context. */
#define CHATFMT_MESSAGES_MAX ((size_t)64 << 20)

/* The file the broker opened for argument path, at most max bytes. */
static char *read_whole(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
	char *buf;
	if (tool_read(path, max, &buf, len)) {
		if (errno == EFBIG)
			snprintf(err, errlen, "%s: over %zu bytes", path, max);
		else
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	return buf;
}

static int parse_messages(const json_value *root, chat_msg **out, size_t *n, char *err, size_t errlen)
{
	chat_msg *m;

	if (!root || root->type != JSON_ARRAY || root->n == 0) {
		snprintf(err, errlen, "messages: expected a non-empty array");
		return -1;
	}
	m = calloc(root->n, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "messages: out of memory");
		return -1;
	}
	for (uint32_t i = 0; i < root->n; i++) {
		const json_value *e = json_at(root, i), *c;
		const char *role;

		if (!e || e->type != JSON_OBJECT || json_get_str(e, "role", &role) != 0 ||
		    !(c = json_get(e, "content")) || c->type != JSON_STRING) {
			snprintf(err, errlen, "messages[%u]: expected {\"role\": string, \"content\": string}", i);
			free(m);
			return -1;
		}
		if (!strcmp(role, "system"))
			m[i].role = CHAT_ROLE_SYSTEM;
		else if (!strcmp(role, "user"))
			m[i].role = CHAT_ROLE_USER;
		else if (!strcmp(role, "assistant"))
			m[i].role = CHAT_ROLE_ASSISTANT;
		else {
			snprintf(err, errlen, "messages[%u]: unknown role (system, user, assistant)", i);
			free(m);
			return -1;
		}
		m[i].text = c->str;
		m[i].len = c->n;
	}
	*out = m;
	*n = root->n;
	return 0;
}

static int chatfmt_usage(void)
{
	fprintf(stderr, "usage: mlxr chat-render TOKENIZER_CONFIG.json MESSAGES.json [--template FILE.jinja]\n"
			"         [--no-generation-prompt] [--continue] [--no-think] [--date \"DD Mon YYYY\"]\n"
			"         [--fallback-chatml] [--mask | --format]\n");
	return 2;
}

int tool_chat_render(int argc, char **argv)
{
	const char *cfg_path = NULL, *msg_path = NULL, *tmpl_path = NULL;
	int want_mask = 0, want_format = 0, fallback = 0, status = 1, rc;
	char err[512] = "", *cfg_buf = NULL, *msg_buf = NULL, *tmpl_buf = NULL, *out = NULL;
	unsigned char *mask = NULL;
	size_t cfg_len = 0, msg_len = 0, tmpl_len = 0, n = 0, len = 0;
	chat_config cfg;
	chat_opts opts;
	chat_msg *msgs = NULL;
	json_doc doc = { 0 };

	chat_opts_default(&opts);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--no-generation-prompt"))
			opts.add_generation_prompt = 0;
		else if (!strcmp(argv[i], "--continue")) {
			opts.continue_final = 1;
			opts.add_generation_prompt = 0;
		} else if (!strcmp(argv[i], "--no-think"))
			opts.enable_thinking = 0;
		else if (!strcmp(argv[i], "--mask"))
			want_mask = 1;
		else if (!strcmp(argv[i], "--format"))
			want_format = 1;
		else if (!strcmp(argv[i], "--fallback-chatml"))
			fallback = 1;
		else if (!strcmp(argv[i], "--date") && i + 1 < argc)
			opts.date = argv[++i];
		else if (!strcmp(argv[i], "--template") && i + 1 < argc)
			tmpl_path = argv[++i];
		else if (argv[i][0] == '-')
			return chatfmt_usage();
		else if (!cfg_path)
			cfg_path = argv[i];
		else if (!msg_path)
			msg_path = argv[i];
		else
			return chatfmt_usage();
	}
	if (!cfg_path || !msg_path)
		return chatfmt_usage();

	if (!(cfg_buf = read_whole(cfg_path, CHAT_CONFIG_MAX, &cfg_len, err, sizeof(err))))
		goto fail;
	rc = chat_config_load(&cfg, cfg_buf, cfg_len, err, sizeof(err));
	if (tmpl_path && rc != CHAT_ERR_INVALID) {
		if (!(tmpl_buf = read_whole(tmpl_path, CHAT_TEMPLATE_MAX, &tmpl_len, err, sizeof(err))))
			goto fail;
		rc = chat_config_set_template(&cfg, tmpl_buf, tmpl_len, err, sizeof(err));
	}
	if (rc == CHAT_ERR_UNKNOWN || rc == CHAT_ERR_NO_TEMPLATE) {
		if (!fallback)
			goto fail;
		fprintf(stderr, "mlxr chat-render: warning: %s; using plain ChatML\n", err);
		chat_config_fallback_chatml(&cfg);
	} else if (rc) {
		goto fail;
	}

	if (want_format) {
		printf("%s\n", chat_format_name(cfg.format));
		status = fflush(stdout) ? 1 : 0;
		snprintf(err, sizeof(err), "stdout: write error");
		goto fail;
	}
	if (!(msg_buf = read_whole(msg_path, CHATFMT_MESSAGES_MAX, &msg_len, err, sizeof(err))))
		goto fail;
	if (json_parse(msg_buf, msg_len, &doc, err, sizeof(err)) ||
	    parse_messages(doc.root, &msgs, &n, err, sizeof(err)))
		goto fail;
	if (chat_render(&cfg, msgs, n, &opts, &out, &mask, &len, err, sizeof(err)))
		goto fail;
	if (want_mask) {
		for (size_t i = 0; i < len; i++)
			putchar(mask[i] ? '1' : '0');
	} else {
		fwrite(out, 1, len, stdout);
	}
	if (fflush(stdout)) {
		snprintf(err, sizeof(err), "stdout: write error");
		goto fail;
	}
	status = 0;
fail:
	if (status)
		fprintf(stderr, "mlxr chat-render: %s\n", err);
	free(out);
	free(mask);
	free(msgs);
	json_free(&doc);
	free(msg_buf);
	free(tmpl_buf);
	free(cfg_buf);
	return status;
}
