/* broker/cmd_run.c — `mlxr run MODEL [PROMPT]`: a one-shot answer streamed
 * to stdout, or an interactive chat (libedit) when no prompt is given.
 * Flags follow Ollama's where they exist. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <editline/readline.h>

#include "broker/cmds.h"
#include "broker/runopts.h"
#include "broker/store.h"
#include "worker/session.h"

static volatile sig_atomic_t g_cancel;

static void on_sigint(int sig)
{
	(void)sig;
	g_cancel = 1;
}

static int emit_stdout(void *arg, const char *t, size_t n)
{
	(void)arg;
	fwrite(t, 1, n, stdout);
	fflush(stdout);
	return 0;
}

/* Owned copy of the conversation, with the assistant text accumulated. */
typedef struct {
	chat_msg *m;
	size_t n, cap;
} convo;

static int convo_add(convo *c, chat_role role, const char *t, size_t n)
{
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 8;
		chat_msg *m = realloc(c->m, nc * sizeof(*m));
		if (!m)
			return -1;
		c->m = m;
		c->cap = nc;
	}
	char *copy = malloc(n + 1);
	if (!copy)
		return -1;
	memcpy(copy, t, n);
	copy[n] = 0;
	c->m[c->n].role = role;
	c->m[c->n].text = copy;
	c->m[c->n].len = n;
	c->n++;
	return 0;
}

static void convo_drop(convo *c, size_t i)
{
	free((char *)c->m[i].text);
	memmove(&c->m[i], &c->m[i + 1], (c->n - i - 1) * sizeof(*c->m));
	c->n--;
}

static void convo_free(convo *c)
{
	while (c->n)
		convo_drop(c, c->n - 1);
	free(c->m);
	memset(c, 0, sizeof(*c));
}

/* Renders the conversation; if it does not fit the context (leaving room
 * for the answer), drops the oldest turns after the system prompt, keeping
 * the latest message. */
static int build_prompt(session *s, convo *c, const run_opts *o, int **ids, size_t *n, char *err, size_t errlen)
{
	chat_opts co;
	chat_opts_default(&co);
	co.enable_thinking = !o->no_think;
	int reserve = o->gen.max_tokens > 0 ? o->gen.max_tokens : 256;
	if (reserve > s->st.ctx / 4)
		reserve = s->st.ctx / 4;
	for (;;) {
		if (session_encode_chat(s, c->m, c->n, &co, ids, n, err, errlen))
			return -1;
		if (*n + (size_t)reserve <= (size_t)s->st.ctx)
			return 0;
		size_t first = c->n && c->m[0].role == CHAT_ROLE_SYSTEM ? 1 : 0;
		if (c->n - first <= 1) {
			snprintf(err, errlen, "context full: the prompt needs %zu tokens, the context holds %d "
				 "(raise --ctx or shorten the message)", *n, s->st.ctx);
			free(*ids);
			return -1;
		}
		free(*ids);
		/* Drop one turn: a user message and the answer after it. */
		convo_drop(c, first);
		if (c->n - first > 1 && c->m[first].role == CHAT_ROLE_ASSISTANT)
			convo_drop(c, first);
	}
}

static void print_stats(const gen_stats *st)
{
	fprintf(stderr, "\nprompt:   %zu tokens (%zu prefilled) in %.3f s, %.1f tok/s\n", st->prompt_tokens,
		st->prefilled, st->prefill_s, st->prefill_s > 0 ? st->prefilled / st->prefill_s : 0.0);
	fprintf(stderr, "generate: %zu tokens in %.3f s, %.1f tok/s\n", st->generated, st->decode_s,
		st->decode_s > 0 ? st->generated / st->decode_s : 0.0);
	fprintf(stderr, "time to first token: %.3f s\n", st->ttft_s);
}

typedef struct {
	char *buf;
	size_t n, cap;
	int quiet;
} collect;

static int emit_collect(void *arg, const char *t, size_t n)
{
	collect *c = arg;
	if (!c->quiet)
		emit_stdout(NULL, t, n);
	if (c->n + n + 1 > c->cap) {
		size_t nc = (c->n + n + 1) * 2;
		char *b = realloc(c->buf, nc);
		if (!b)
			return 1;
		c->buf = b;
		c->cap = nc;
	}
	memcpy(c->buf + c->n, t, n);
	c->n += n;
	return 0;
}

/* One turn: render, generate, append the answer. */
static int turn(session *s, convo *c, run_opts *o)
{
	char err[512];
	int *ids;
	size_t n;
	gen_stats st;
	collect col = { 0 };
	if (build_prompt(s, c, o, &ids, &n, err, sizeof(err))) {
		fprintf(stderr, "mlxr: %s\n", err);
		return 1;
	}
	g_cancel = 0;
	o->gen.cancel = &g_cancel;
	int r = session_generate(s, ids, n, &o->gen, emit_collect, &col, &st, err, sizeof(err));
	free(ids);
	if (r) {
		fprintf(stderr, "mlxr: %s\n", err);
		free(col.buf);
		return 1;
	}
	printf("\n");
	if (st.stop_reason == 3)
		fprintf(stderr, "mlxr: context full after %zu tokens (raise --ctx)\n", st.generated);
	if (o->verbose)
		print_stats(&st);
	convo_add(c, CHAT_ROLE_ASSISTANT, col.buf ? col.buf : "", col.n);
	free(col.buf);
	o->last = st;
	return 0;
}

static void show_info(session *s, const run_opts *o, const char *dir)
{
	const model_config *c = &s->m.cfg;
	printf("  model        %s\n  architecture %s\n  parameters   %d layers, hidden %d, %d heads (%d kv), vocab %d\n",
	       dir, c->model_type, c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->vocab);
	printf("  quantization %s\n  chat format  %s%s\n  context      %d\n", s->m.embed.bits || s->m.layers[0].q.bits ?
	       "affine (see mlxr show)" : "none", chat_format_name(s->chat.format), s->chat_ok ? "" : " (fallback)",
	       s->st.ctx);
	printf("  temperature %g  top_k %d  top_p %g  min_p %g  repeat_penalty %g  seed %llu  think %s\n",
	       o->gen.sp.temperature, o->gen.sp.top_k, o->gen.sp.top_p, o->gen.sp.min_p, o->gen.sp.repeat_penalty,
	       (unsigned long long)o->gen.sp.seed, o->no_think ? "off" : "on");
}

static void chat_loop(session *s, run_opts *o, const char *dir)
{
	convo c = { 0 };
	struct sigaction sa = { 0 };
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: Ctrl-C interrupts reads */
	if (o->system)
		convo_add(&c, CHAT_ROLE_SYSTEM, o->system, strlen(o->system));
	using_history();
	printf("mlxr chat with %s — /? for help, /bye to leave\n", dir);
	for (;;) {
		g_cancel = 0;
		char *line = readline(">>> ");
		if (!line) {
			if (g_cancel) { /* Ctrl-C at the prompt: a fresh line */
				printf("\nUse Ctrl-D or /bye to exit.\n");
				continue;
			}
			printf("\n");
			break;
		}
		char *t = line;
		while (*t == ' ' || *t == '\t')
			t++;
		if (!*t) {
			free(line);
			continue;
		}
		add_history(t);
		if (!strcmp(t, "/bye") || !strcmp(t, "/exit")) {
			free(line);
			break;
		}
		if (t[0] == '/') {
			if (!strcmp(t, "/?") || !strcmp(t, "/help")) {
				printf("  /set temperature F | top_k N | top_p F | min_p F | repeat_penalty F | seed N | num_predict N\n"
				       "  /set system TEXT    /set think | nothink    /set verbose | quiet\n"
				       "  /show               /clear (forget the conversation)    /bye\n");
			} else if (!strcmp(t, "/clear")) {
				convo_free(&c);
				if (o->system)
					convo_add(&c, CHAT_ROLE_SYSTEM, o->system, strlen(o->system));
				session_reset(s);
				printf("Cleared the conversation.\n");
			} else if (!strcmp(t, "/show")) {
				show_info(s, o, dir);
			} else if (!strncmp(t, "/set ", 5)) {
				char err[200];
				if (!strncmp(t + 5, "system ", 7)) {
					if (c.n && c.m[0].role == CHAT_ROLE_SYSTEM)
						convo_drop(&c, 0);
					/* Insert the system prompt first. */
					convo tmp = { 0 };
					convo_add(&tmp, CHAT_ROLE_SYSTEM, t + 12, strlen(t + 12));
					for (size_t i = 0; i < c.n; i++)
						convo_add(&tmp, c.m[i].role, c.m[i].text, c.m[i].len);
					convo_free(&c);
					c = tmp;
					printf("Set system message.\n");
				} else if (runopts_set(o, t + 5, err, sizeof(err))) {
					printf("%s\n", err);
				} else {
					printf("Set '%s'.\n", t + 5);
				}
			} else {
				printf("Unknown command '%s'. Type /? for help.\n", t);
			}
			free(line);
			continue;
		}
		convo_add(&c, CHAT_ROLE_USER, t, strlen(t));
		free(line);
		if (turn(s, &c, o)) {
			/* The failed message stays out of the history. */
			if (c.n && c.m[c.n - 1].role == CHAT_ROLE_USER)
				convo_drop(&c, c.n - 1);
		}
	}
	convo_free(&c);
}

int cmd_run(int argc, char **argv)
{
	run_opts o;
	char err[1024], dir[4096];
	int rc = 1;
	runopts_defaults(&o);
	err[0] = 0;
	if (runopts_parse(&o, argc, argv, err, sizeof(err)) || !o.model) {
		if (err[0])
			fprintf(stderr, "mlxr: run: %s\n", err);
		fprintf(stderr, "%s", RUNOPTS_USAGE("run MODEL [PROMPT]"));
		runopts_free(&o);
		return 2;
	}
	session s;
	if (store_resolve(o.model, dir, sizeof(dir), err, sizeof(err)) ||
	    session_open(&s, dir, o.ctx, err, sizeof(err))) {
		fprintf(stderr, "mlxr: %s: %s\n", o.model, err);
		runopts_free(&o);
		return 1;
	}
	if (!s.chat_ok && !o.raw)
		fprintf(stderr, "mlxr: note: %s; using plain ChatML\n", s.chat_note[0] ? s.chat_note : "unknown chat template");
	char *stdin_text = NULL;
	if (!o.prompt && !isatty(0)) {
		/* Piped input is the prompt, as with `ollama run`. */
		size_t cap = 4096, n = 0, r;
		stdin_text = malloc(cap);
		while (stdin_text && (r = fread(stdin_text + n, 1, cap - n - 1, stdin)) > 0) {
			n += r;
			if (n + 1 == cap) {
				char *t = cap < (64u << 20) ? realloc(stdin_text, cap * 2) : NULL;
				if (!t) {
					fprintf(stderr, "mlxr: run: standard input larger than 64 MB\n");
					goto out;
				}
				stdin_text = t;
				cap *= 2;
			}
		}
		if (!stdin_text)
			goto out;
		stdin_text[n] = 0;
		o.prompt = stdin_text;
	}
	if (o.prompt) {
		struct sigaction sa = { 0 };
		sa.sa_handler = on_sigint;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		if (o.raw) {
			int *ids;
			size_t n;
			gen_stats st;
			if (session_encode_plain(&s, o.prompt, strlen(o.prompt), &ids, &n, err, sizeof(err))) {
				fprintf(stderr, "mlxr: %s\n", err);
				goto out;
			}
			o.gen.cancel = &g_cancel;
			int r = session_generate(&s, ids, n, &o.gen, emit_stdout, NULL, &st, err, sizeof(err));
			free(ids);
			if (r) {
				fprintf(stderr, "mlxr: %s\n", err);
				goto out;
			}
			printf("\n");
			if (o.verbose)
				print_stats(&st);
			rc = 0;
		} else {
			convo c = { 0 };
			if (o.system)
				convo_add(&c, CHAT_ROLE_SYSTEM, o.system, strlen(o.system));
			convo_add(&c, CHAT_ROLE_USER, o.prompt, strlen(o.prompt));
			rc = turn(&s, &c, &o);
			convo_free(&c);
		}
	} else {
		chat_loop(&s, &o, o.model);
		rc = 0;
	}
out:
	free(stdin_text);
	session_close(&s);
	runopts_free(&o);
	return rc;
}
