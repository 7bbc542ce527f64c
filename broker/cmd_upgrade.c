/* broker/cmd_upgrade.c — `mlxr upgrade [--check]`: install the latest
 * signed release over the running one (release/release.h has the trust
 * model and the crash-consistency design).
 *
 * Steps: GET {MLXR_RELEASES_URL}/latest (the fetcher); download SHA256SUMS
 * and SHA256SUMS.sig into $MLXR_HOME/upgrade/staging (the fetcher writes
 * through fds this process opened); verify them here, in the broker, which
 * has no network; then download the three binaries, each bound to its
 * signed SHA-256; stop the fetcher; verify the whole staged release again
 * from disk (signature, version policy, expiry, every SHA-256); record the
 * accepted version; replace the installed binaries (rs_install). Any
 * failure leaves the installation as it was and removes the staging
 * directory.
 *
 * Developer path: `mlxr upgrade --from-dir DIR` takes an already downloaded
 * release directory (what `make release` writes to dist/) instead of the
 * feed, and runs every check above on it; it exists for tests and for
 * installing a release copied by hand.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "broker/cmds.h"
#include "broker/fclient.h"
#include "broker/store.h"
#include "common/version.h"
#include "release/release.h"

/* The project's release feed: a GitHub-releases-shaped API base; the feed
 * document is {base}/latest. MLXR_RELEASES_URL overrides it (a mirror, or
 * the tests' local HTTPS server); the keys that decide what is installed
 * cannot be overridden. */
#define MLXR_RELEASES_URL_DEFAULT "https://api.github.com/repos/mlxr/mlxr/releases"

static void usage(FILE *f)
{
	fprintf(f, "usage: mlxr upgrade [--check]\n"
		   "  --check          only report whether a newer signed release exists\n"
		   "  --from-dir DIR   (developer) install the release in DIR (SHA256SUMS, SHA256SUMS.sig,\n"
		   "                   binaries) instead of downloading; every check still runs\n"
		   "Feed: $MLXR_RELEASES_URL/latest (default " MLXR_RELEASES_URL_DEFAULT ").\n");
}

static void fmt_time(int64_t t, char buf[40])
{
	time_t tt = (time_t)t;
	struct tm tm;
	if (!gmtime_r(&tt, &tm) || !strftime(buf, 40, "%Y-%m-%d %H:%M UTC", &tm))
		snprintf(buf, 40, "%lld", (long long)t);
}

/* Removes the regular files in dir and dir itself (staging only holds what
 * this command created). */
static void rm_staging(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	rmdir(dir);
}

static int mkdir_p(const char *path)
{
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return -1;
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(buf, 0700) < 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	return mkdir(buf, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* Downloads one feed asset into staging/name, bound to size (from the feed;
 * a lie only fails the download) and, when known, the signed SHA-256. */
static int fetch_asset(const rs_feed *f, int stfd, const char *name, uint64_t max, const uint8_t *sha256, char *err,
		       size_t errlen)
{
	char e2[512];
	const rs_asset *a = rs_feed_asset(f, name);
	if (!a) {
		snprintf(err, errlen, "the release feed lists no %s for release %s", name, f->tag);
		return -1;
	}
	if (a->size > max) {
		snprintf(err, errlen, "the release feed gives %s a size of %llu bytes, more than the %llu allowed", name,
			 (unsigned long long)a->size, (unsigned long long)max);
		return -1;
	}
	int fd = openat(stfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "staging %s: %s", name, strerror(errno));
		return -1;
	}
	int r = fclient_download(a->url, fd, 0, a->size, sha256, NULL, NULL, e2, sizeof e2);
	close(fd);
	if (r < 0) {
		snprintf(err, errlen, "downloading %s: %s", name, e2);
		return -1;
	}
	return 0;
}

/* The complete check of a release directory: signature by a compiled-in
 * key, trusted comment, version policy, expiry, every SHA-256. */
static int verify_dir(int dirfd, const rs_version *running, const rs_version *floor, rs_release *r, char *err,
		      size_t errlen)
{
	size_t nkeys;
	const rs_pubkey *keys = rs_trusted_keys(&nkeys);
	if (!keys) {
		snprintf(err, errlen, "this build's compiled-in release keys are malformed");
		return -1;
	}
	if (rs_verify_sums(dirfd, keys, nkeys, r, err, errlen) < 0)
		return -1;
	if (rs_check_policy(r, running, floor, mlxr_platform, (int64_t)time(NULL), err, errlen) < 0)
		return -1;
	return rs_verify_files(dirfd, r, err, errlen);
}

static void describe(const rs_release *r, const char *prefix)
{
	char v[24], kid[17], exp[40];
	rs_version_str(&r->meta.version, v);
	rs_keyid_hex(r->sig.keyid, kid);
	fmt_time(r->meta.expires, exp);
	printf("%s%s (signed by the %s key %s; signature valid until %s)\n", prefix, v,
	       rs_trusted_key_label(r->key_index), kid, exp);
}

void upgrade_recover_at_start(char **argv)
{
	char dir[4096], self[4200], msg[512];
	if (rs_self_dir(dir, sizeof dir) < 0)
		return;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	int r = rs_recover(fd, msg, sizeof msg);
	close(fd);
	if (r < 0)
		fprintf(stderr, "mlxr: an upgrade of %s was interrupted and could not be finished: %s\n", dir, msg);
	if (r != 1 && r != 2)
		return;
	fprintf(stderr, "mlxr: %s in %s\n", msg, dir);
	/* This process may be the binary the recovery just replaced: run the
	 * command with the mlxr now installed, so broker, worker and fetcher
	 * are always of one release. No loop: the journal is gone. */
	if (snprintf(self, sizeof self, "%s/mlxr", dir) < (int)sizeof self) {
		fflush(NULL);
		execv(self, argv);
		fprintf(stderr, "mlxr: re-running %s: %s\n", self, strerror(errno));
	}
}

int cmd_upgrade(int argc, char **argv)
{
	int check = 0, rc = 1;
	const char *from_dir = NULL;
	char home[3072], updir[3200], lockp[3300], statep[3300], staging[3300], instdir[4096];
	char err[1024], url[RS_URL_MAX + 64];
	int lockfd = -1, instfd = -1, stfd = -1, staged = 0;
	rs_version running;
	rs_state state;
	rs_release r;
	rs_feed feed;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--check"))
			check = 1;
		else if (!strcmp(argv[i], "--from-dir") && i + 1 < argc)
			from_dir = argv[++i];
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (rs_version_parse(mlxr_version, strlen(mlxr_version), &running) < 0) {
		fprintf(stderr, "mlxr upgrade: this build's version '%s' is not X.Y.Z\n", mlxr_version);
		return 1;
	}
	if (store_home(home, sizeof home) < 0 || snprintf(updir, sizeof updir, "%s/upgrade", home) >= (int)sizeof updir) {
		fprintf(stderr, "mlxr upgrade: MLXR_HOME is too long\n");
		return 1;
	}
	snprintf(lockp, sizeof lockp, "%s/lock", updir);
	snprintf(statep, sizeof statep, "%s/accepted", updir);
	snprintf(staging, sizeof staging, "%s/staging", updir);
	if (mkdir_p(updir) < 0) {
		fprintf(stderr, "mlxr upgrade: creating %s: %s\n", updir, strerror(errno));
		return 1;
	}
	lockfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "mlxr upgrade: another mlxr upgrade is running (%s)\n", lockp);
		goto out;
	}
	if (rs_state_load(statep, &state, err, sizeof err) < 0) {
		fprintf(stderr, "mlxr upgrade: %s\n", err);
		goto out;
	}
	if (rs_self_dir(instdir, sizeof instdir) < 0 ||
	    (instfd = open(instdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "mlxr upgrade: cannot open the install directory of this mlxr\n");
		goto out;
	}
	if (!check && access(instdir, W_OK) < 0) {
		fprintf(stderr, "mlxr upgrade: %s is not writable by this user; run mlxr upgrade as its owner\n",
			instdir);
		goto out;
	}
	const rs_version *floor = rs_state_floor(&state);

	if (from_dir) {
		stfd = open(from_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (stfd < 0) {
			fprintf(stderr, "mlxr upgrade: %s: %s\n", from_dir, strerror(errno));
			goto out;
		}
	} else {
		const char *base = getenv("MLXR_RELEASES_URL");
		char *body = NULL;
		size_t blen = 0;
		if (!base || !*base)
			base = MLXR_RELEASES_URL_DEFAULT;
		size_t bl = strlen(base);
		while (bl && base[bl - 1] == '/')
			bl--;
		if (bl > RS_URL_MAX) {
			fprintf(stderr, "mlxr upgrade: MLXR_RELEASES_URL is too long\n");
			goto out;
		}
		snprintf(url, sizeof url, "%.*s/latest", (int)bl, base);
		int status = fclient_get(url, RS_FEED_MAX, &body, &blen, err, sizeof err);
		if (status < 0) {
			fprintf(stderr, "mlxr upgrade: release feed %s: %s\n", url, err);
			goto out;
		}
		if (status != 200) {
			fprintf(stderr, "mlxr upgrade: release feed %s: HTTP status %d\n", url, status);
			free(body);
			goto out;
		}
		int pr = rs_feed_parse(body, blen, &feed, err, sizeof err);
		free(body);
		if (pr < 0) {
			fprintf(stderr, "mlxr upgrade: %s (%s)\n", err, url);
			goto out;
		}
		rm_staging(staging); /* what an interrupted run left */
		if (mkdir(staging, 0700) < 0 || (stfd = open(staging, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			fprintf(stderr, "mlxr upgrade: creating %s: %s\n", staging, strerror(errno));
			goto out;
		}
		staged = 1;
		if (fetch_asset(&feed, stfd, RS_SUMS_NAME, RS_SUMS_MAX_FILE, NULL, err, sizeof err) < 0 ||
		    fetch_asset(&feed, stfd, RS_SIG_NAME, RS_SIGFILE_MAX, NULL, err, sizeof err) < 0) {
			fprintf(stderr, "mlxr upgrade: %s\n", err);
			goto out;
		}
		size_t nkeys;
		const rs_pubkey *keys = rs_trusted_keys(&nkeys);
		if (!keys) {
			fprintf(stderr, "mlxr upgrade: this build's compiled-in release keys are malformed\n");
			goto out;
		}
		if (rs_verify_sums(stfd, keys, nkeys, &r, err, sizeof err) < 0) {
			fprintf(stderr, "mlxr upgrade: refused: %s\n", err);
			goto out;
		}
		if (feed.have_version && rs_version_cmp(&feed.version, &r.meta.version) != 0) {
			char v[24];
			rs_version_str(&r.meta.version, v);
			fprintf(stderr,
				"mlxr upgrade: warning: the feed says %s but the signed release is %s; the signed "
				"version counts\n",
				feed.tag, v);
		}
	}

	/* Up to date is the common answer, not an error, once it is signed and
	 * fresh. */
	if (!from_dir && rs_version_cmp(&r.meta.version, &running) == 0 &&
	    (int64_t)time(NULL) < r.meta.expires && !strcmp(r.meta.platform, mlxr_platform)) {
		printf("mlxr %s is up to date\n", mlxr_version);
		rc = 0;
		goto out;
	}
	if (check) {
		if (from_dir) {
			if (verify_dir(stfd, &running, floor, &r, err, sizeof err) < 0) {
				fprintf(stderr, "mlxr upgrade: refused: %s\n", err);
				goto out;
			}
		} else if (rs_check_policy(&r, &running, floor, mlxr_platform, (int64_t)time(NULL), err, sizeof err) <
			   0) {
			fprintf(stderr, "mlxr upgrade: refused: %s\n", err);
			goto out;
		}
		printf("mlxr %s is installed in %s\n", mlxr_version, instdir);
		describe(&r, "update available: ");
		rc = 0;
		goto out;
	}
	if (!from_dir) {
		if (rs_check_policy(&r, &running, floor, mlxr_platform, (int64_t)time(NULL), err, sizeof err) < 0) {
			fprintf(stderr, "mlxr upgrade: refused: %s\n", err);
			goto out;
		}
		for (int i = 0; i < RS_NFILES; i++) {
			const rs_asset *a = rs_feed_asset(&feed, rs_files[i]);
			if (a)
				fprintf(stderr, "downloading %s (%llu bytes)\n", rs_files[i],
					(unsigned long long)a->size);
			if (fetch_asset(&feed, stfd, rs_files[i], RS_BINARY_MAX, r.sha256[i], err, sizeof err) < 0) {
				fprintf(stderr, "mlxr upgrade: %s\n", err);
				goto out;
			}
		}
		fclient_stop(); /* from here on, no process of this upgrade has network */
	}
	/* Everything again, from the bytes on disk. */
	if (verify_dir(stfd, &running, floor, &r, err, sizeof err) < 0) {
		fprintf(stderr, "mlxr upgrade: refused: %s\n", err);
		goto out;
	}
	/* Record first: a crash after this leaves the same version installable
	 * (equal to the floor), never an older one. */
	if (rs_state_record(statep, &state, r.sig.keyid, &r.meta.version, err, sizeof err) < 0) {
		fprintf(stderr, "mlxr upgrade: %s\n", err);
		goto out;
	}
	if (rs_install(instfd, stfd, &r, err, sizeof err) < 0) {
		fprintf(stderr, "mlxr upgrade: %s\n", err);
		goto out;
	}
	{
		char v[24];
		rs_version_str(&r.meta.version, v);
		printf("mlxr upgraded %s -> %s in %s (previous binaries kept as *.prev)\n", mlxr_version, v, instdir);
	}
	rc = 0;
out:
	fclient_stop();
	if (stfd >= 0)
		close(stfd);
	if (staged)
		rm_staging(staging);
	if (instfd >= 0)
		close(instfd);
	if (lockfd >= 0)
		close(lockfd);
	return rc;
}
