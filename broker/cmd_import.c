/* broker/cmd_import.c — `mlxr import [options] FILE.gguf [NAME]`.
 *
 * Converts a GGUF file into an MLX model directory at <store>/models/NAME
 * (NAME defaults to local/<file stem>) or at --output DIR. Everything is
 * written into a hidden sibling temporary directory that is renamed into
 * place at the end, so a failure (or a malformed file) never leaves a
 * partial model directory: the temporary directory is removed.
 *
 * The GGUF file is untrusted: it is parsed only inside a sandboxed
 * importer worker (mlxr-worker --role importer), which receives it as a
 * read-only descriptor and writes the four output files through
 * descriptors this broker opened in the staging directory. The broker then
 * validates the result like any model (config.json, safetensors headers,
 * every tensor against the config, the tokenizer's JSON) before it enters
 * the store.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/cmds.h"
#include "broker/store.h"
#include "broker/wclient.h"
#include "common/modelfiles.h"
#include "common/json.h"
#include "worker/model.h"
#include "worker/import.h"

#define PATHMAX 4096

static void usage(FILE *f)
{
	fprintf(f, "usage: mlxr import [--bits N] [--group-size N] [--output DIR] [--force] FILE.gguf [NAME]\n"
		   "  converts a GGUF file into an MLX model in the store (NAME defaults to local/<file stem>)\n"
		   "  --bits N        bits for requantized tensors: 2, 3, 4, 5, 6, 8 (default 4)\n"
		   "  --group-size N  group size for requantized tensors: 32, 64, 128 (default 64)\n"
		   "  --output DIR    write the model directory to DIR instead of the store\n"
		   "  --force         replace an existing model\n"
		   "  Q4_1 and Q8_0 tensors are converted exactly (4 / 8 bits, group size 32).\n");
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p) ? -1 : 0;
}

static void rm_tree(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* mkdir -p of every component of dir (not the last if skip_last). */
static int mkdirs(char *dir, int skip_last)
{
	size_t n = strlen(dir);
	for (size_t i = 1; i <= n; i++) {
		if (dir[i] != '/' && dir[i] != 0)
			continue;
		if (dir[i] == 0 && skip_last)
			break;
		char c = dir[i];
		dir[i] = 0;
		int r = mkdir(dir, 0755);
		int e = errno;
		dir[i] = c;
		if (r && e != EEXIST)
			return -1;
	}
	return 0;
}

static int parse_int(const char *s, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < 0 || v > 1024)
		return -1;
	*out = (int)v;
	return 0;
}

int cmd_import(int argc, char **argv)
{
	gguf_import_opts o = { 4, 64 };
	const char *file = NULL, *name = NULL, *output = NULL;
	int force = 0, no_sandbox = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--force")) {
			force = 1;
		} else if (!strcmp(a, "--no-sandbox")) {
			no_sandbox = 1;
		} else if (!strcmp(a, "--bits") || !strcmp(a, "--group-size") || !strcmp(a, "--output")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "mlxr: import: %s needs a value\n", a);
				return 2;
			}
			const char *v = argv[++i];
			if (!strcmp(a, "--output")) {
				output = v;
			} else if (parse_int(v, !strcmp(a, "--bits") ? &o.bits : &o.group_size)) {
				fprintf(stderr, "mlxr: import: %s '%s' is not a number\n", a, v);
				return 2;
			}
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "mlxr: import: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		} else if (!file) {
			file = a;
		} else if (!name) {
			name = a;
		} else {
			fprintf(stderr, "mlxr: import: too many arguments\n");
			usage(stderr);
			return 2;
		}
	}
	if (!file) {
		usage(stderr);
		return 2;
	}
	if (!mlx_quant_supported(o.bits, o.group_size)) {
		fprintf(stderr, "mlxr: import: --bits must be 2, 3, 4, 5, 6 or 8 and --group-size 32, 64 or 128\n");
		return 2;
	}
	if (output && name) {
		fprintf(stderr, "mlxr: import: give either NAME or --output, not both\n");
		return 2;
	}

	char err[512] = "", dest[PATHMAX], tmp[PATHMAX + 64], old[PATHMAX + 64], defname[256];
	if (!output) {
		if (!name) {
			const char *b = strrchr(file, '/');
			b = b ? b + 1 : file;
			size_t n = strlen(b);
			if (n > 5 && !strcmp(b + n - 5, ".gguf"))
				n -= 5;
			snprintf(defname, sizeof(defname), "local/%.*s", (int)(n > 200 ? 200 : n), b);
			name = defname;
		}
		if (store_check_name(name, err, sizeof(err))) {
			fprintf(stderr, "mlxr: import: %s\n", err);
			return 2;
		}
		char models[PATHMAX];
		if (store_models_dir(models, sizeof(models)) ||
		    snprintf(dest, sizeof(dest), "%s/%s", models, name) >= (int)sizeof(dest)) {
			fprintf(stderr, "mlxr: import: the store path is too long\n");
			return 1;
		}
	} else {
		size_t n = strlen(output);
		while (n > 1 && output[n - 1] == '/')
			n--;
		if (n == 0 || n >= sizeof(dest)) {
			fprintf(stderr, "mlxr: import: bad --output path\n");
			return 2;
		}
		memcpy(dest, output, n);
		dest[n] = 0;
	}

	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "mlxr: import: %s: %s\n", file, strerror(errno));
		return 1;
	}
	struct stat sb;
	if (lstat(dest, &sb) == 0 && !force) {
		fprintf(stderr, "mlxr: import: %s: %s already exists (--force replaces it)\n", file, dest);
		close(fd);
		return 1;
	}
	/* Temporary and old directories are hidden siblings of dest. */
	const char *slash = strrchr(dest, '/');
	int plen = slash ? (int)(slash - dest) : 0;
	const char *base = slash ? slash + 1 : dest;
	snprintf(tmp, sizeof(tmp), "%.*s%s.%s.import-%ld", plen, dest, slash ? "/" : "", base, (long)getpid());
	snprintf(old, sizeof(old), "%.*s%s.%s.old-%ld", plen, dest, slash ? "/" : "", base, (long)getpid());
	if (mkdirs(dest, 1) || mkdir(tmp, 0755)) {
		fprintf(stderr, "mlxr: import: %s: creating %s: %s\n", file, tmp, strerror(errno));
		close(fd);
		return 1;
	}
	int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "mlxr: import: %s: %s: %s\n", file, tmp, strerror(errno));
		rmdir(tmp);
		close(fd);
		return 1;
	}
	static const char *names[4] = { "model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json" };
	int outs[4] = { -1, -1, -1, -1 }, rc = 0;
	for (int i = 0; i < 4 && !rc; i++)
		if ((outs[i] = openat(dfd, names[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
			rc = -1, snprintf(err, sizeof(err), "creating %s: %s", names[i], strerror(errno));
	char summary[256] = "";
	wc_error we;
	if (rc == 0 && wclient_import(fd, outs, o.bits, o.group_size, no_sandbox, summary, sizeof(summary), &we))
		rc = -1, snprintf(err, sizeof(err), "%s", we.msg);
	close(fd);
	/* fsync, then drop the written pages from the page cache: written
	 * pages are cached in small folios, and the worker maps the weights in
	 * 2 MiB pages only where the page cache holds large ones, which the
	 * first read after this builds (README, "Weights in memory"). */
	for (int i = 0; i < 4; i++) {
		if (outs[i] < 0)
			continue;
		int bad = fsync(outs[i]);
		(void)posix_fadvise(outs[i], 0, 0, POSIX_FADV_DONTNEED);
		if (bad + close(outs[i]) && rc == 0)
			rc = -1, snprintf(err, sizeof(err), "writing %s: %s", names[i], strerror(errno));
	}
	if (rc == 0 && fsync(dfd))
		rc = -1, snprintf(err, sizeof(err), "fsync: %s", strerror(errno));
	close(dfd);
	/* The importer's output is validated like any model before it enters
	 * the store. */
	if (rc == 0) {
		model m;
		mf_files f;
		if (model_load(&m, tmp, err, sizeof(err))) {
			rc = -1;
		} else {
			model_free(&m);
			if (mf_read(tmp, &f, err, sizeof(err))) {
				rc = -1;
			} else {
				json_doc d;
				char jerr[160];
				const mf_buf *js[2] = { &f.tokenizer, &f.tok_config };
				for (int i = 0; i < 2 && rc == 0; i++) {
					if (!js[i]->p || json_parse(js[i]->p, js[i]->n, &d, jerr, sizeof(jerr)))
						rc = -1, snprintf(err, sizeof(err), "%s: %s", names[2 + i], js[i]->p ? jerr : "missing");
					else
						json_free(&d);
				}
				mf_free(&f);
			}
		}
		if (rc)
			snprintf(err + strlen(err), sizeof(err) - strlen(err), " (in the importer's output)");
	}
	if (rc) {
		rm_tree(tmp);
		fprintf(stderr, "mlxr: import: %s: %s\n", file, err);
		return 1;
	}
	gguf_import_stats st;
	memset(&st, 0, sizeof(st));
	unsigned long long t[4] = { 0 };
	char arch[32] = "?";
	if (sscanf(summary, "%31[^\t]\t%llu\t%llu\t%llu\t%llu", arch, &t[0], &t[1], &t[2], &t[3]) == 5) {
		snprintf(st.arch, sizeof(st.arch), "%s", arch);
		st.tensors = t[0];
		st.exact = t[1];
		st.requantized = t[2];
		st.dense = t[3];
	}
	int had_old = 0;
	if (lstat(dest, &sb) == 0) {
		if (rename(dest, old)) {
			fprintf(stderr, "mlxr: import: %s: moving the old %s aside: %s\n", file, dest, strerror(errno));
			rm_tree(tmp);
			return 1;
		}
		had_old = 1;
	}
	if (rename(tmp, dest)) {
		fprintf(stderr, "mlxr: import: %s: renaming into %s: %s\n", file, dest, strerror(errno));
		if (had_old)
			rename(old, dest);
		rm_tree(tmp);
		return 1;
	}
	if (had_old)
		rm_tree(old);
	printf("imported %s (%s) into %s: %llu tensors, %llu exact, %llu requantized to %d-bit group %d, %llu unquantized\n",
	       file, st.arch, dest, (unsigned long long)st.tensors, (unsigned long long)st.exact,
	       (unsigned long long)st.requantized, o.bits, o.group_size, (unsigned long long)st.dense);
	return 0;
}
