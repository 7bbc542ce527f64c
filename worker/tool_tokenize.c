/* worker/tool_tokenize.c — `mlxr tokenize MODEL TEXT`: a developer verb that
 * runs the C tokenizer, so tests can compare it with Hugging Face's. It runs
 * in a sandboxed worker (worker/tool.h); the broker (broker/cmd_tokenize.c)
 * resolves MODEL to its tokenizer.json and opens the files.
 *
 *   mlxr tokenize MODEL "TEXT"           id<TAB>piece per line
 *   mlxr tokenize MODEL --ids "TEXT"     space-separated ids
 *   mlxr tokenize MODEL --file F         text from a file
 *   mlxr tokenize MODEL --special ...    recognise special tokens everywhere
 *   mlxr tokenize MODEL --decode "1 2 3" [--skip-special] [--stream]
 *   mlxr tokenize MODEL --batch F [--special]
 *       F holds NUL-separated texts; for each, three lines: its ids, the
 *       escaped tok_decode() of those ids, and the escaped concatenation of
 *       tok_stream_push() outputs (one tokenizer load for many texts).
 *
 * MODEL is a directory holding tokenizer.json, a tokenizer.json path, or
 * a store name (store_resolve). Pieces are printed with \n, \t, \r, \\ and
 * other control bytes escaped so each stays on its line. */
#include "worker/tokenizer.h"
#include "worker/tool.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void print_escaped(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n') fputs("\\n", stdout);
		else if (c == '\t') fputs("\\t", stdout);
		else if (c == '\r') fputs("\\r", stdout);
		else if (c == '\\') fputs("\\\\", stdout);
		else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
		else putchar(c);
	}
}

static int batch(const tokenizer *t, const char *b, size_t n, int special)
{
	size_t i = 0;
	while (i < n) {
		const char *e = memchr(b + i, 0, n - i);
		size_t tl = e ? (size_t)(e - (b + i)) : n - i;
		const char *text = b + i;
		unsigned char *mask = NULL;
		int *ids = NULL;
		size_t nid = 0;
		char err[256], *dec;
		size_t dl;
		i += tl + 1;
		if (special) {
			mask = malloc(tl ? tl : 1);
			if (!mask) return -1;
			memset(mask, 1, tl);
		}
		int r = tok_encode(t, text, tl, mask, &ids, &nid, err, sizeof(err));
		free(mask);
		if (r) {
			fprintf(stderr, "mlxr tokenize: %s\n", err);
			return -1;
		}
		for (size_t k = 0; k < nid; k++)
			printf(k ? " %d" : "%d", ids[k]);
		putchar('\n');
		if (tok_decode(t, ids, nid, 0, &dec, &dl)) { free(ids); return -1; }
		print_escaped(dec, dl);
		putchar('\n');
		free(dec);
		tok_stream s;
		const char *o;
		size_t ol;
		tok_stream_init(&s, t, 0);
		for (size_t k = 0; k < nid; k++) {
			if (tok_stream_push(&s, ids[k], &o, &ol)) { tok_stream_free(&s); free(ids); return -1; }
			print_escaped(o, ol);
		}
		if (tok_stream_flush(&s, &o, &ol) == 0) print_escaped(o, ol);
		putchar('\n');
		tok_stream_free(&s);
		free(ids);
	}
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: mlxr tokenize MODEL [--ids] [--special] (TEXT | --file F)\n"
			"       mlxr tokenize MODEL --decode \"ID ID ...\" [--skip-special] [--stream]\n"
			"       mlxr tokenize MODEL --batch FILE [--special]\n");
	return 2;
}

int tool_tokenize(int argc, char **argv)
{
	const char *model = NULL, *text = NULL, *file = NULL, *decode = NULL, *bfile = NULL;
	int ids_only = 0, special = 0, skip = 0, stream = 0, rc = 1;
	char err[512];
	char *json = NULL, *fbuf = NULL;
	size_t jlen = 0, tlen = 0;
	tokenizer *t = NULL;
	int *ids = NULL;
	size_t n = 0;
	unsigned char *mask = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ids")) ids_only = 1;
		else if (!strcmp(argv[i], "--special")) special = 1;
		else if (!strcmp(argv[i], "--skip-special")) skip = 1;
		else if (!strcmp(argv[i], "--stream")) stream = 1;
		else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
		else if (!strcmp(argv[i], "--decode") && i + 1 < argc) decode = argv[++i];
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc) bfile = argv[++i];
		else if (argv[i][0] == '-' && argv[i][1] == '-') return usage();
		else if (!model) model = argv[i];
		else if (!text) text = argv[i];
		else return usage();
	}
	if (!model || (!text && !file && !decode && !bfile) || (text && file))
		return usage();
	/* model: the tokenizer.json path the broker resolved and opened */
	if (tool_read(model, (size_t)512 << 20, &json, &jlen)) {
		fprintf(stderr, "mlxr tokenize: %s: %s\n", model, strerror(errno));
		return 1;
	}
	if (tok_load(&t, json, jlen, err, sizeof(err))) {
		fprintf(stderr, "mlxr tokenize: %s: %s\n", model, err);
		goto done;
	}
	free(json);
	json = NULL;

	if (bfile) {
		if (tool_read(bfile, (size_t)1 << 30, &fbuf, &tlen)) {
			fprintf(stderr, "mlxr tokenize: %s: %s\n", bfile, strerror(errno));
			goto done;
		}
		rc = batch(t, fbuf, tlen, special) ? 1 : 0;
		goto done;
	}
	if (decode) {
		size_t cap = 0;
		const char *p = decode;
		for (;;) {
			while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t') p++;
			if (!*p) break;
			char *end;
			errno = 0;
			long v = strtol(p, &end, 10);
			if (end == p || errno || v < INT_MIN || v > INT_MAX) {
				fprintf(stderr, "mlxr tokenize: --decode: bad id near '%.16s'\n", p);
				goto done;
			}
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				int *ni = realloc(ids, cap * sizeof(int));
				if (!ni) goto done;
				ids = ni;
			}
			ids[n++] = (int)v;
			p = end;
		}
		if (stream) {
			/* One line per push: the text each id completed. */
			tok_stream s;
			const char *o;
			size_t ol;
			tok_stream_init(&s, t, skip);
			for (size_t i = 0; i < n; i++) {
				if (tok_stream_push(&s, ids[i], &o, &ol)) { tok_stream_free(&s); goto done; }
				print_escaped(o, ol);
				putchar('\n');
			}
			if (tok_stream_flush(&s, &o, &ol)) { tok_stream_free(&s); goto done; }
			print_escaped(o, ol);
			putchar('\n');
			tok_stream_free(&s);
		} else {
			char *o;
			size_t ol;
			if (tok_decode(t, ids, n, skip, &o, &ol)) {
				fprintf(stderr, "mlxr tokenize: out of memory\n");
				goto done;
			}
			fwrite(o, 1, ol, stdout);
			free(o);
		}
		rc = 0;
		goto done;
	}

	if (file) {
		if (tool_read(file, (size_t)1 << 30, &fbuf, &tlen)) {
			fprintf(stderr, "mlxr tokenize: %s: %s\n", file, strerror(errno));
			goto done;
		}
		text = fbuf;
	} else {
		tlen = strlen(text);
	}
	if (special) {
		mask = malloc(tlen ? tlen : 1);
		if (!mask) goto done;
		memset(mask, 1, tlen);
	}
	if (tok_encode(t, text, tlen, mask, &ids, &n, err, sizeof(err))) {
		fprintf(stderr, "mlxr tokenize: %s\n", err);
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		if (ids_only) {
			printf(i ? " %d" : "%d", ids[i]);
			continue;
		}
		size_t pl = 0;
		const char *pc = tok_piece(t, ids[i], &pl);
		printf("%d\t", ids[i]);
		if (pc) print_escaped(pc, pl);
		putchar('\n');
	}
	if (ids_only) putchar('\n');
	rc = 0;
done:
	if (fflush(stdout)) rc = 1;
	free(json);
	free(fbuf);
	free(ids);
	free(mask);
	tok_free(t);
	return rc;
}
