/* broker/cmd_run.c — `mlxr run MODEL [PROMPT]`: a one-shot answer streamed
 * to stdout, or an interactive chat (libedit) when no prompt is given.
 * Flags follow Ollama's where they exist. The model runs in the worker
 * (broker/wclient.h); this file only talks to the person. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "broker/cmds.h"
#include "broker/runopts.h"
#include "broker/fclient.h"
#include "broker/store.h"
#include "broker/wclient.h"
#include "common/utf8.h"

static volatile sig_atomic_t g_cancel;

static void on_sigint(int sig)
{
	(void)sig;
	g_cancel = 1;
}

static void catch_sigint(void)
{
	struct sigaction sa = { 0 };
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: Ctrl-C interrupts reads */
}

/* The conversation, owned by the CLI; the worker reuses its KV cache for
 * the prefix each turn shares with the previous one. */
typedef struct {
	wc_msg *m;
	size_t n, cap;
} convo;

static int convo_add(convo *c, wc_role role, const char *t, size_t n)
{
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 8;
		wc_msg *m = realloc(c->m, nc * sizeof(*m));
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

typedef struct {
	char *buf; /* the answer, kept for the conversation (as generated) */
	size_t n, cap;
	int in_reasoning;
	utf8_hold hold; /* a character split across events, until complete */
	int tty;        /* stdout is a terminal: print_text cleans */
	wc_event end;
} turn_out;

/* The model's text to stdout. On a terminal the worker is untrusted and a
 * model can generate any byte (ESC included), so only well-formed UTF-8
 * without control characters is written, '\n' and '\t' aside; the rest
 * becomes U+FFFD (common/utf8.h). A character split across events waits
 * in t->hold; final writes out what is still held. Into a pipe or a file
 * the bytes go as generated (as `ls` and `git` quote only for a terminal),
 * so scripts get exactly what the model produced, CR LF included. The HTTP
 * API gets the bytes as generated (JSON-escaped), so the cleaning is here,
 * not in wc_event_unpack. */
static void print_text(turn_out *t, const char *s, size_t n, int final)
{
	char out[UTF8_CLEAN_MAX(1024)];
	if (!t->tty) {
		fwrite(s, 1, n, stdout);
		return;
	}
	do {
		size_t k = n < 1024 ? n : 1024;
		fwrite(out, 1, utf8_clean(&t->hold, s, k, final && k == n, UTF8_KEEP_NL_TAB | UTF8_REPL_FFFD, out),
		       stdout);
		s += k;
		n -= k;
	} while (n);
}

static int on_event(void *arg, const wc_event *ev)
{
	turn_out *t = arg;
	if (ev->type == WC_EV_REASONING || ev->type == WC_EV_TEXT) {
		int r = ev->type == WC_EV_REASONING;
		if (r != t->in_reasoning && t->tty)
			fputs(r ? "\033[2m" : "\033[0m", stdout); /* thinking dimmed */
		if (!r && t->in_reasoning && !t->tty)
			fputs("\n\n", stdout);
		t->in_reasoning = r;
		print_text(t, ev->text, ev->len, 0);
		fflush(stdout);
		if (!r) {
			if (t->n + ev->len + 1 > t->cap) {
				size_t nc = (t->n + ev->len + 1) * 2;
				char *b = realloc(t->buf, nc);
				if (!b)
					return 1;
				t->buf = b;
				t->cap = nc;
			}
			memcpy(t->buf + t->n, ev->text, ev->len);
			t->n += ev->len;
		}
	} else if (ev->type == WC_EV_END) {
		t->end = *ev;
	}
	return g_cancel != 0;
}

static void print_stats(const wc_event *st)
{
	fprintf(stderr, "\nprompt:   %zu tokens (%zu prefilled) in %.3f s, %.1f tok/s\n", st->prompt_tokens,
		st->prefilled, st->prefill_s, st->prefill_s > 0 ? st->prefilled / st->prefill_s : 0.0);
	fprintf(stderr, "generate: %zu tokens in %.3f s, %.1f tok/s\n", st->completion_tokens, st->decode_s,
		st->decode_s > 0 ? st->completion_tokens / st->decode_s : 0.0);
	fprintf(stderr, "time to first token: %.3f s\n", st->ttft_s);
}

/* One turn: the conversation (or the raw prompt) to an answer on stdout.
 * A chat turn's answer is appended to the conversation. */
static int turn(wclient *w, convo *c, run_opts *o, const char *raw_prompt)
{
	wc_request r = o->req;
	wc_error e;
	turn_out t = { 0 };
	t.tty = isatty(1);
	if (raw_prompt) {
		r.prompt = raw_prompt;
		r.prompt_len = strlen(raw_prompt);
	} else {
		r.msgs = c->m;
		r.n_msgs = c->n;
		r.no_think = o->no_think;
		r.trim = 1;
	}
	g_cancel = 0;
	int rc = wclient_generate(w, &r, on_event, &t, &e);
	print_text(&t, "", 0, 1);
	if (t.in_reasoning && t.tty)
		fputs("\033[0m", stdout);
	if (rc) {
		fprintf(stderr, "mlxr: %s\n", e.msg);
		free(t.buf);
		return 1;
	}
	printf("\n");
	if (t.end.finish == WC_FINISH_CONTEXT)
		fprintf(stderr, "mlxr: context full after %zu tokens (raise --ctx)\n", t.end.completion_tokens);
	if (o->verbose)
		print_stats(&t.end);
	if (!raw_prompt)
		convo_add(c, WC_ROLE_ASSISTANT, t.buf ? t.buf : "", t.n);
	free(t.buf);
	return 0;
}

static void show_info(wclient *w, const run_opts *o, const char *name)
{
	const wclient_info *i = wclient_info_get(w);
	printf("  model        %s\n  architecture %s\n  parameters   %d layers, hidden %d, %d heads (%d kv), vocab %d\n",
	       name, i->model_type, i->n_layers, i->hidden, i->n_heads, i->n_kv_heads, i->vocab);
	printf("  chat format  %s%s\n  context      %d\n", i->chat_format, i->chat_ok ? "" : " (fallback)", i->ctx);
	printf("  temperature %g  top_k %d  top_p %g  min_p %g  repeat_penalty %g  seed %llu  think %s\n",
	       o->req.temperature, o->req.top_k, o->req.top_p, o->req.min_p, o->req.repeat_penalty,
	       (unsigned long long)o->req.seed, o->no_think ? "off" : "on");
}

static void set_system(convo *c, const char *text)
{
	convo tmp = { 0 };
	convo_add(&tmp, WC_ROLE_SYSTEM, text, strlen(text));
	for (size_t i = 0; i < c->n; i++)
		if (c->m[i].role != WC_ROLE_SYSTEM)
			convo_add(&tmp, c->m[i].role, c->m[i].text, c->m[i].len);
	convo_free(c);
	*c = tmp;
}

static void chat_loop(wclient *w, run_opts *o, const char *name)
{
	convo c = { 0 };
	catch_sigint();
	if (o->system)
		convo_add(&c, WC_ROLE_SYSTEM, o->system, strlen(o->system));
	using_history();
	printf("mlxr chat with %s — /? for help, /bye to leave\n", name);
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
			char err[200];
			if (!strcmp(t, "/?") || !strcmp(t, "/help")) {
				printf("  /set temperature F | top_k N | top_p F | min_p F | repeat_penalty F | seed N | num_predict N\n"
				       "  /set system TEXT    /set think | nothink    /set verbose | quiet\n"
				       "  /show               /clear (forget the conversation)    /bye\n");
			} else if (!strcmp(t, "/clear")) {
				convo_free(&c);
				if (o->system)
					convo_add(&c, WC_ROLE_SYSTEM, o->system, strlen(o->system));
				printf("Cleared the conversation.\n");
			} else if (!strcmp(t, "/show")) {
				show_info(w, o, name);
			} else if (!strncmp(t, "/set system ", 12)) {
				set_system(&c, t + 12);
				printf("Set system message.\n");
			} else if (!strncmp(t, "/set ", 5)) {
				if (runopts_set(o, t + 5, err, sizeof(err)))
					printf("%s\n", err);
				else
					printf("Set '%s'.\n", t + 5);
			} else {
				printf("Unknown command '%s'. Type /? for help.\n", t);
			}
			free(line);
			continue;
		}
		convo_add(&c, WC_ROLE_USER, t, strlen(t));
		free(line);
		if (turn(w, &c, o, NULL) && c.n && c.m[c.n - 1].role == WC_ROLE_USER)
			convo_drop(&c, c.n - 1); /* the failed message stays out of the history */
	}
	convo_free(&c);
}

/* Piped standard input is the prompt, as with `ollama run`. */
static char *read_stdin(void)
{
	size_t cap = 4096, n = 0, r;
	char *b = malloc(cap);
	while (b && (r = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
		n += r;
		if (n + 1 == cap) {
			char *t = cap < (64u << 20) ? realloc(b, cap * 2) : NULL;
			if (!t) {
				fprintf(stderr, "mlxr: run: standard input larger than 64 MB\n");
				free(b);
				return NULL;
			}
			b = t;
			cap *= 2;
		}
	}
	if (b)
		b[n] = 0;
	return b;
}

int cmd_run(int argc, char **argv)
{
	run_opts o;
	char err[1024], dir[4096];
	int rc = 1;
	runopts_defaults(&o);
	err[0] = 0;
	int want_pull = pull_strip_flag(&argc, argv); /* --pull: fetch a missing org/repo without asking */
	if (runopts_parse(&o, argc, argv, err, sizeof(err)) || !o.model) {
		if (err[0])
			fprintf(stderr, "mlxr: run: %s\n", err);
		fprintf(stderr, "%s", RUNOPTS_USAGE("run MODEL [PROMPT]"));
		runopts_free(&o);
		return 2;
	}
	if (store_resolve(o.model, dir, sizeof(dir), err, sizeof(err)) &&
	    pull_offer(o.model, want_pull, dir, sizeof(dir), err, sizeof(err))) {
		fprintf(stderr, "mlxr: %s\n", err);
		runopts_free(&o);
		return 1;
	}
	wclient *w;
	wc_error e;
	wclient_opts wo = { o.ctx, o.sealed, o.no_sandbox };
	if (wclient_start(&w, dir, &wo, &e)) {
		fprintf(stderr, "mlxr: %s: %s\n", o.model, e.msg);
		runopts_free(&o);
		return 1;
	}
	const wclient_info *info = wclient_info_get(w);
	if (!info->chat_ok && !o.raw)
		fprintf(stderr, "mlxr: note: %s; using plain ChatML\n", info->chat_note[0] ? info->chat_note : "unknown chat template");
	char *stdin_text = NULL;
	if (!o.prompt && !isatty(0)) {
		if (!(stdin_text = read_stdin()))
			goto out;
		o.prompt = stdin_text;
	}
	if (o.prompt) {
		catch_sigint();
		convo c = { 0 };
		if (!o.raw) {
			if (o.system)
				convo_add(&c, WC_ROLE_SYSTEM, o.system, strlen(o.system));
			convo_add(&c, WC_ROLE_USER, o.prompt, strlen(o.prompt));
		}
		rc = turn(w, &c, &o, o.raw ? o.prompt : NULL);
		convo_free(&c);
	} else {
		chat_loop(w, &o, o.model);
		rc = 0;
	}
out:
	free(stdin_text);
	wclient_stop(w);
	runopts_free(&o);
	return rc;
}
