/* broker/cmd_pull.c — `mlxr pull ORG/REPO [--revision REV] [--force]` and
 * pull_model() (run/serve --pull).
 *
 * Steps: the Hub API gives the revision's commit (GET
 * /api/models/REPO/revision/REV: "sha") and its files with sizes and, for LFS
 * files, SHA-256 (GET /api/models/REPO/tree/SHA?recursive=1: [{type, path,
 * size, lfs: {oid, size}}]); config.json comes first, and an architecture
 * the engine cannot run is refused before any weight is downloaded (--force
 * downloads anyway). Files are fetched from REPO/resolve/SHA/PATH (pinned
 * to the commit, so every file is of one revision) into the staging
 * directory <store>/models/ORG/.REPO.pull/ — a hidden sibling of the
 * destination, on the same filesystem, so the final rename is atomic — by
 * the sandboxed fetcher, through descriptors opened here.
 *
 * Resume: each partial file keeps the ETag of the response it came from
 * (".NAME.etag", written before the first body byte); the next pull asks
 * the resolve URL again (CDN links expire) with Range + If-Range. A
 * different commit restarts the staging directory.
 *
 * Trust: the fetcher's output is checked here (size, SHA-256 with
 * libsodium); a file that fails is deleted, the pull fails, and nothing
 * enters the store. The complete directory is validated with model_load
 * (config, every safetensors header, every tensor against the config, the
 * tokenizer's JSON) before the rename into place.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "broker/cmds.h"
#include "broker/fclient.h"
#include "broker/store.h"
#include "common/json.h"
#include "common/modelfiles.h"
#include "worker/model.h"

#define PATHMAX 4096
#define PULL_MAX_FILES 512       /* the largest MLX repos have ~100 shards */
#define API_MAX (16u << 20)      /* tree listing: ~200 bytes per file */
#define SMALL_MAX (64u << 20)    /* tokenizer.json of a 256k vocab: ~30 MB */

typedef struct {
	char path[256];
	uint64_t size;
	int lfs;
	uint8_t sha256[32];
} pull_file;

typedef struct {
	const char *name;
	double t0, last;
	uint64_t start;
	int tty, quiet;
} progress_st;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void human(char *b, size_t n, double v)
{
	const char *u[] = { "B", "KB", "MB", "GB", "TB" };
	int i = 0;
	while (v >= 1000 && i < 4)
		v /= 1000, i++;
	snprintf(b, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
	progress_st *p = arg;
	if (p->quiet || !p->tty)
		return;
	double t = now_s();
	if (t - p->last < 0.1 && done != total)
		return;
	p->last = t;
	char d[32], tt[32], sp[32], eta[32] = "";
	double el = t - p->t0, rate = el > 0 ? (double)(done - (done > p->start ? p->start : done)) / el : 0;
	human(d, sizeof(d), (double)done);
	human(tt, sizeof(tt), (double)total);
	human(sp, sizeof(sp), rate);
	int width = 24, fill = total ? (int)((double)done / (double)total * width) : 0;
	if (fill > width)
		fill = width;
	if (total && rate > 0 && done < total) {
		unsigned s = (unsigned)((double)(total - done) / rate);
		snprintf(eta, sizeof(eta), " ETA %u:%02u", s / 60, s % 60);
	}
	char bar[32];
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '-';
	bar[width] = 0;
	fprintf(stderr, "\r\033[Kpulling %-28.28s [%s] %s/%s %s/s%s", p->name, bar, d, tt, sp, eta);
	fflush(stderr);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p) ? -1 : 0;
}

static void rm_tree(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int mkdirs(char *dir)
{
	size_t n = strlen(dir);
	for (size_t i = 1; i <= n; i++) {
		if (dir[i] != '/' && dir[i] != 0)
			continue;
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

/* Files mlxr needs from a repository: configuration, tokenizer, weights. */
static int wanted(const char *p)
{
	static const char *names[] = { "config.json", "tokenizer.json", "tokenizer_config.json",
				       "special_tokens_map.json", "generation_config.json", "tokenizer.model",
				       "chat_template.jinja", "chat_template.json", "added_tokens.json",
				       "model.safetensors.index.json", NULL };
	for (int i = 0; names[i]; i++)
		if (!strcmp(p, names[i]))
			return 1;
	size_t n = strlen(p);
	return n > 12 && !strcmp(p + n - 12, ".safetensors");
}

/* A top-level file name we may create: [A-Za-z0-9._-], not hidden. */
static int safe_name(const char *p)
{
	if (!*p || *p == '.' || strlen(p) >= 200)
		return 0;
	for (; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
		      *p == '_' || *p == '-'))
			return 0;
	return 1;
}

/* Percent-encodes a revision (a branch may contain '/'). */
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

static int api_error(int status, const char *name, const char *what, const char *ferr, char *err, size_t errlen)
{
	if (status == 401 || status == 403)
		snprintf(err, errlen,
			 "%s: access denied (HTTP %d) — the repository is gated or private: accept its terms on the Hub "
			 "and set HF_TOKEN (or log in with `hf auth login`)",
			 name, status);
	else if (status == 404)
		snprintf(err, errlen, "%s: %s not found on the Hub (HTTP 404)", name, what);
	else if (status > 0)
		snprintf(err, errlen, "%s: %s: HTTP %d", name, what, status);
	else
		snprintf(err, errlen, "%s: %s: %s", name, what, ferr);
	return -1;
}

/* GET an API URL into a JSON document. */
static int api_json(const char *url, const char *name, const char *what, json_doc *d, char *err, size_t errlen)
{
	char *body;
	size_t len;
	char ferr[1024];
	int st = fclient_get(url, API_MAX, &body, &len, ferr, sizeof(ferr));
	if (st != 200) {
		free(body);
		return api_error(st, name, what, ferr, err, errlen);
	}
	char jerr[160];
	int rc = json_parse(body, len, d, jerr, sizeof(jerr));
	free(body);
	if (rc)
		snprintf(err, errlen, "%s: %s: the Hub's answer is not JSON (%s)", name, what, jerr);
	return rc;
}

static int hex32(const char *s, uint8_t out[32])
{
	size_t bl;
	return strlen(s) == 64 && sodium_hex2bin(out, 32, s, 64, NULL, &bl, NULL) == 0 && bl == 32 ? 0 : -1;
}

static int list_files(const json_value *arr, pull_file **out, int *n, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	if (!arr || arr->type != JSON_ARRAY) {
		snprintf(err, errlen, "the Hub's file list is not an array");
		return -1;
	}
	pull_file *f = calloc(PULL_MAX_FILES, sizeof(*f));
	if (!f)
		return -1;
	int k = 0;
	for (uint32_t i = 0; i < arr->n; i++) {
		const json_value *e = json_at(arr, i);
		const char *type = NULL, *path = NULL;
		int64_t size = 0;
		if (json_get_str(e, "type", &type) || strcmp(type, "file") || json_get_str(e, "path", &path) ||
		    !wanted(path))
			continue;
		if (!safe_name(path)) {
			snprintf(err, errlen, "the Hub lists an unsafe file name");
			free(f);
			return -1;
		}
		if (k == PULL_MAX_FILES) {
			snprintf(err, errlen, "more than %d model files", PULL_MAX_FILES);
			free(f);
			return -1;
		}
		if (json_get_int(e, "size", &size) || size < 0) {
			snprintf(err, errlen, "%s: the Hub lists no size", path);
			free(f);
			return -1;
		}
		pull_file *p = &f[k++];
		snprintf(p->path, sizeof(p->path), "%s", path);
		p->size = (uint64_t)size;
		const json_value *lfs = json_get(e, "lfs");
		if (lfs) {
			const char *oid;
			int64_t ls;
			if (json_get_str(lfs, "oid", &oid) || hex32(oid, p->sha256) || json_get_int(lfs, "size", &ls) ||
			    ls < 0) {
				snprintf(err, errlen, "%s: malformed LFS entry (oid must be a SHA-256)", path);
				free(f);
				return -1;
			}
			p->lfs = 1;
			p->size = (uint64_t)ls;
		}
	}
	*out = f;
	*n = k;
	return 0;
}

typedef struct {
	int dfd;
	const char *name;
} etag_ctx;

typedef struct {
	progress_st pr;
	etag_ctx ec;
} dl_ctx;

static void on_head(void *arg, const char *etag, uint64_t start, uint64_t total)
{
	dl_ctx *c = arg;
	(void)total;
	c->pr.start = start;
	char side[300];
	snprintf(side, sizeof(side), ".%s.etag", c->ec.name);
	int fd = openat(c->ec.dfd, side, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, etag, strlen(etag)) < 0) {
			/* best effort: without it a resume sends no If-Range */
		}
		close(fd);
	}
}

static volatile sig_atomic_t g_in_pull;

static void on_sigint(int sig)
{
	(void)sig;
	static const char m[] = "\nmlxr: pull interrupted; the partial download is kept: run the same command to resume\n";
	if (write(2, m, sizeof(m) - 1) < 0) {
	}
	_exit(130);
}

/* Downloads one file into dfd/f->path, resuming a partial one. */
static int pull_one(const char *base, const char *name, const char *sha, const pull_file *f, int dfd, int quiet,
		    int tty, char *err, size_t errlen)
{
	int fd = openat(dfd, f->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		snprintf(err, errlen, "%s: creating %s: %s", name, f->path, strerror(errno));
		return -1;
	}
	struct stat sb;
	fstat(fd, &sb);
	char verr[256];
	const uint8_t *h = f->lfs ? f->sha256 : NULL;
	/* Complete already (an earlier pull)? Verified, never trusted. */
	if ((uint64_t)sb.st_size == f->size && !fclient_verify(fd, f->size, h, verr, sizeof(verr))) {
		close(fd);
		if (!quiet)
			fprintf(stderr, "%s: already downloaded\n", f->path);
		return 0;
	}
	int resume = sb.st_size > 0 && (uint64_t)sb.st_size < f->size;
	char etag[300] = "", side[300];
	snprintf(side, sizeof(side), ".%s.etag", f->path);
	if (resume) {
		int sfd = openat(dfd, side, O_RDONLY | O_CLOEXEC);
		if (sfd >= 0) {
			ssize_t k = read(sfd, etag, sizeof(etag) - 1);
			etag[k > 0 ? k : 0] = 0;
			close(sfd);
		}
	}
	char url[4096];
	snprintf(url, sizeof(url), "%s/%s/resolve/%s/%s", base, name, sha, f->path);
	dl_ctx c;
	memset(&c, 0, sizeof(c));
	c.pr.name = f->path;
	c.pr.t0 = c.pr.last = now_s();
	c.pr.tty = tty;
	c.pr.quiet = quiet;
	c.ec.dfd = dfd;
	c.ec.name = f->path;
	fclient_opts o;
	memset(&o, 0, sizeof(o));
	o.resume = resume;
	o.if_range = etag[0] ? etag : NULL;
	o.expected_size = f->size;
	o.sha256 = h;
	o.max_bytes = f->size ? f->size : 1;
	o.progress = on_progress;
	o.head = on_head;
	o.arg = &c;
	int status = 0;
	o.http_status = &status;
	if (!quiet && !tty) {
		char hs[32];
		human(hs, sizeof(hs), (double)f->size);
		fprintf(stderr, "pulling %s (%s)%s\n", f->path, hs, resume ? ", resuming" : "");
	}
	char ferr[1024];
	int rc = fclient_download_ex(url, fd, &o, ferr, sizeof(ferr));
	if (!quiet && tty)
		fprintf(stderr, "\n");
	if (rc) {
		/* A file that arrived complete but wrong is deleted (a retry starts
		 * it over); an interrupted one is kept to resume. */
		struct stat now;
		if (fstat(fd, &now) == 0 && (uint64_t)now.st_size >= f->size) {
			unlinkat(dfd, f->path, 0);
			unlinkat(dfd, side, 0);
		}
		close(fd);
		if (status)
			return api_error(status, name, f->path, ferr, err, errlen);
		snprintf(err, errlen, "%s: %s: %s", name, f->path, ferr);
		return -1;
	}
	fsync(fd);
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* as cmd_import.c: the next read caches large folios */
	close(fd);
	unlinkat(dfd, side, 0);
	if (!quiet && !tty) {
		double el = now_s() - c.pr.t0;
		char hs[32];
		human(hs, sizeof(hs), (double)f->size);
		fprintf(stderr, "%s: done, %s in %.1f s\n", f->path, hs, el);
	}
	return 0;
}

int pull_model(const char *name, const char *revision, int force, int quiet, char *err, size_t errlen)
{
	char models[3072], dest[PATHMAX], stage[PATHMAX], url[4096], rev[512], sha[512];
	json_doc d = { 0 };
	pull_file *files = NULL;
	int nfiles = 0, rc = -1, dfd = -1;
	int tty = isatty(2);
	if (store_check_name(name, err, errlen))
		return -1;
	if (!revision)
		revision = "main";
	if (strlen(revision) > 200) {
		snprintf(err, errlen, "revision too long");
		return -1;
	}
	const char *base = fclient_endpoint();
	if (store_models_dir(models, sizeof(models))) {
		snprintf(err, errlen, "store path too long");
		return -1;
	}
	const char *slash = strchr(name, '/');
	if (strlen(name) > 512) {
		snprintf(err, errlen, "name too long");
		return -1;
	}
	snprintf(dest, sizeof(dest), "%s/%.512s", models, name);
	snprintf(stage, sizeof(stage), "%s/%.*s/.%.256s.pull", models, (int)(slash - name) & 255, name, slash + 1);

	/* 1. Revision → commit. */
	enc(rev, sizeof(rev), revision);
	snprintf(url, sizeof(url), "%s/api/models/%s/revision/%s", base, name, rev);
	if (api_json(url, name, "revision", &d, err, errlen))
		return -1;
	const char *s = NULL;
	if (json_get_str(d.root, "sha", &s) == 0 && strlen(s) == 40 && strspn(s, "0123456789abcdef") == 40)
		snprintf(sha, sizeof(sha), "%s", s);
	else
		snprintf(sha, sizeof(sha), "%s", rev);
	json_free(&d);

	/* 2. Files with sizes and SHA-256. */
	snprintf(url, sizeof(url), "%s/api/models/%s/tree/%s?recursive=1", base, name, sha);
	if (api_json(url, name, "file list", &d, err, errlen))
		return -1;
	char lerr[256];
	if (list_files(d.root, &files, &nfiles, lerr, sizeof(lerr))) {
		snprintf(err, errlen, "%s: %s", name, lerr);
		goto fail;
	}
	int cfg = -1, nst = 0;
	for (int i = 0; i < nfiles; i++) {
		if (!strcmp(files[i].path, "config.json"))
			cfg = i;
		nst += strstr(files[i].path, ".safetensors") && !strstr(files[i].path, ".index.json");
	}
	if (cfg < 0 || !nst) {
		snprintf(err, errlen, "%s: not an MLX model repository (no config.json or no *.safetensors)", name);
		goto fail;
	}

	/* 3. Staging directory (a different commit starts it over). */
	char stmp[PATHMAX];
	snprintf(stmp, sizeof(stmp), "%s", stage);
	if (mkdirs(stmp)) {
		snprintf(err, errlen, "creating %s: %s", stage, strerror(errno));
		goto fail;
	}
	dfd = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		snprintf(err, errlen, "%s: %s", stage, strerror(errno));
		goto fail;
	}
	char prev[512] = "";
	int rfd = openat(dfd, ".revision", O_RDONLY | O_CLOEXEC);
	if (rfd >= 0) {
		ssize_t k = read(rfd, prev, sizeof(prev) - 1);
		prev[k > 0 ? k : 0] = 0;
		close(rfd);
	}
	if (strcmp(prev, sha)) {
		close(dfd);
		rm_tree(stage);
		snprintf(stmp, sizeof(stmp), "%s", stage);
		if (mkdirs(stmp) || (dfd = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			snprintf(err, errlen, "creating %s: %s", stage, strerror(errno));
			goto fail;
		}
		rfd = openat(dfd, ".revision", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (rfd < 0 || write(rfd, sha, strlen(sha)) != (ssize_t)strlen(sha)) {
			if (rfd >= 0)
				close(rfd);
			snprintf(err, errlen, "writing %s/.revision: %s", stage, strerror(errno));
			goto fail;
		}
		close(rfd);
	}
	if (!quiet)
		fprintf(stderr, "pulling %s (revision %.12s, %d files)\n", name, sha, nfiles);

	/* 4. config.json first: refuse an architecture we cannot run before
	 * downloading weights. */
	if (pull_one(base, name, sha, &files[cfg], dfd, quiet, tty, err, errlen))
		goto fail;
	{
		char cpath[PATHMAX + 16], cerr[512];
		snprintf(cpath, sizeof(cpath), "%s/config.json", stage);
		FILE *cf = fopen(cpath, "re");
		char *cj = NULL;
		size_t cn = 0;
		if (cf) {
			cj = malloc(files[cfg].size + 1);
			if (cj)
				cn = fread(cj, 1, files[cfg].size, cf);
			fclose(cf);
		}
		model_config mc;
		int bad = !cj || model_config_parse(&mc, cj, cn, cerr, sizeof(cerr));
		if (!cj)
			snprintf(cerr, sizeof(cerr), "config.json: unreadable");
		free(cj);
		if (!bad)
			model_config_free(&mc);
		if (bad && !force) {
			snprintf(err, errlen, "%s: this engine cannot run it: %s (--force downloads it anyway)", name, cerr);
			goto fail;
		}
		if (bad && !quiet)
			fprintf(stderr, "warning: %s: %s (downloading anyway: --force)\n", name, cerr);
		if (bad)
			force = 2; /* skip the final validation's refusal */
	}

	/* 5. Everything else; on Ctrl-C the partial file stays for a resume. */
	struct sigaction sa, old_sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, &old_sa);
	g_in_pull = 1;
	for (int i = 0; i < nfiles; i++) {
		if (i == cfg)
			continue;
		if (pull_one(base, name, sha, &files[i], dfd, quiet, tty, err, errlen)) {
			sigaction(SIGINT, &old_sa, NULL);
			goto fail;
		}
	}
	sigaction(SIGINT, &old_sa, NULL);
	g_in_pull = 0;
	fclient_stop();

	/* 6. Validate the whole directory like any model, then install. */
	unlinkat(dfd, ".revision", 0);
	if (force != 2) {
		model m;
		char verr[1024];
		if (model_load(&m, stage, verr, sizeof(verr))) {
			snprintf(err, errlen, "%s: the downloaded model does not validate: %s", name, verr);
			rm_tree(stage);
			goto fail;
		}
		model_free(&m);
	}
	char old[PATHMAX + 32];
	snprintf(old, sizeof(old), "%s.old-%ld", stage, (long)getpid());
	struct stat sb;
	int had_old = 0;
	if (lstat(dest, &sb) == 0) {
		if (rename(dest, old)) {
			snprintf(err, errlen, "moving the old %s aside: %s", dest, strerror(errno));
			goto fail;
		}
		had_old = 1;
	}
	if (rename(stage, dest)) {
		snprintf(err, errlen, "renaming into %s: %s", dest, strerror(errno));
		if (had_old)
			rename(old, dest);
		goto fail;
	}
	if (had_old)
		rm_tree(old);
	rc = 0;
fail:
	g_in_pull = 0;
	if (dfd >= 0)
		close(dfd);
	free(files);
	json_free(&d);
	fclient_stop();
	return rc;
}

int pull_strip_flag(int *argc, char **argv)
{
	int k = 0, found = 0;
	for (int i = 0; i < *argc; i++) {
		if (i > 0 && !strcmp(argv[i], "--pull"))
			found = 1;
		else
			argv[k++] = argv[i];
	}
	argv[k] = NULL;
	*argc = k;
	return found;
}

int pull_offer(const char *name, int auto_pull, char *dir, size_t dirlen, char *err, size_t errlen)
{
	char cerr[256];
	struct stat sb;
	/* Only a Hub name that is not a local path. */
	if (name[0] == '.' || name[0] == '/' || stat(name, &sb) == 0 || store_check_name(name, cerr, sizeof(cerr)))
		return -1;
	if (!auto_pull) {
		if (!isatty(0) || !isatty(2)) {
			size_t n = strlen(err);
			snprintf(err + n, errlen - n, " (add --pull to download it from the Hub, or run `mlxr pull %s`)", name);
			return -1;
		}
		fprintf(stderr, "%s is not installed. Pull it from %s? [y/N] ", name, fclient_endpoint());
		fflush(stderr);
		char line[16];
		if (!fgets(line, sizeof(line), stdin) || (line[0] != 'y' && line[0] != 'Y'))
			return -1;
	}
	if (pull_model(name, NULL, 0, 0, err, errlen))
		return -1;
	return store_resolve(name, dir, dirlen, err, errlen);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: mlxr pull ORG/REPO [--revision REV] [--force] [--quiet]\n"
		   "  downloads an MLX model from the Hugging Face Hub ($HF_ENDPOINT) into the store\n"
		   "  --revision REV  branch, tag or commit (default main)\n"
		   "  --force         download even when this engine cannot run the architecture\n"
		   "  --quiet         no progress output\n"
		   "  HF_TOKEN (or the Hugging Face token file) is sent to the Hub's host only.\n");
}

int cmd_pull(int argc, char **argv)
{
	const char *name = NULL, *rev = NULL;
	int force = 0, quiet = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--revision") && i + 1 < argc)
			rev = argv[++i];
		else if (!strcmp(argv[i], "--force"))
			force = 1;
		else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q"))
			quiet = 1;
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' || name) {
			usage(stderr);
			return 2;
		} else
			name = argv[i];
	}
	if (!name) {
		usage(stderr);
		return 2;
	}
	char err[2048];
	if (pull_model(name, rev, force, quiet, err, sizeof(err))) {
		fprintf(stderr, "mlxr: pull: %s\n", err);
		return 1;
	}
	char dir[PATHMAX];
	store_models_dir(dir, sizeof(dir));
	printf("pulled %s into %s/%s\n", name, dir, name);
	return 0;
}
