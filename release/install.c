/* release/install.c — replaces the installed binaries, all of them or none,
 * across crashes (design: release/release.h, "replacing the installed
 * binaries").
 *
 * Why a journal and not a symlink swap: the installed layout stays three
 * plain files (what `make release` ships and a user copies into place),
 * and /proc/self/exe keeps naming the real install directory. rename(2) is
 * atomic per name only, so the set is made atomic by the commit record:
 * before the journal exists nothing installed has changed; once it exists
 * every new file is complete and verified on disk, and whoever runs next
 * (the upgrade itself, or any `mlxr` start) rolls forward. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "release/release.h"

#define JOURNAL ".mlxr-upgrade.journal"
#define JOURNAL_TMP ".mlxr-upgrade.journal.tmp"
#define JOURNAL_MAX 4096
#define JOURNAL_MAGIC "mlxr-upgrade-journal 1"

void rs_hook(int n)
{
#ifdef MLXR_RELEASE_TEST
	/* Test builds only: stop here so the test can kill -9 this process at
	 * exactly this point of the replacement. */
	const char *s = getenv("MLXR_UPGRADE_STOP_AT");
	if (s && atoi(s) == n) {
		fprintf(stderr, "upgrade-hook: stopped at %d\n", n);
		fflush(stderr);
		for (;;)
			pause();
	}
#else
	(void)n;
#endif
}

static void tmp_name(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, ".%s.upgrade-new", name);
}

static void prev_name(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s.prev", name);
}

/* SHA-256 of name under dirfd. 1 present (out set), 0 absent, -1 error. */
static int hash_at(int dirfd, const char *name, uint8_t out[32], mode_t *mode)
{
	struct stat st;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || rs_sha256_fd(fd, out, NULL, NULL, 0) < 0) {
		close(fd);
		return -1;
	}
	if (mode)
		*mode = st.st_mode & 0777;
	close(fd);
	return 1;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t k = write(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static void hex32(const uint8_t h[32], char out[65])
{
	static const char hx[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hx[h[i] >> 4];
		out[2 * i + 1] = hx[h[i] & 15];
	}
	out[64] = 0;
}

static int unhex32(const char *s, uint8_t out[32])
{
	for (int i = 0; i < 64; i++) {
		char c = s[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			return -1;
		if (i & 1)
			out[i / 2] = (uint8_t)(out[i / 2] << 4 | v);
		else
			out[i / 2] = (uint8_t)v;
	}
	return 0;
}

/* ---- the journal ---- */
typedef struct {
	char version[24];
	uint8_t new_sha[RS_NFILES][32];
	uint8_t old_sha[RS_NFILES][32];
	int old_present[RS_NFILES];
} journal;

static int journal_format(const journal *j, char *out, size_t cap)
{
	size_t len = 0;
	int k = snprintf(out, cap, JOURNAL_MAGIC "\nversion %s\n", j->version);
	if (k < 0 || (size_t)k >= cap)
		return -1;
	len = (size_t)k;
	for (int i = 0; i < RS_NFILES; i++) {
		char a[65], b[65];
		hex32(j->new_sha[i], a);
		hex32(j->old_sha[i], b);
		k = snprintf(out + len, cap - len, "file %s %s %s\n", rs_files[i], a, j->old_present[i] ? b : "-");
		if (k < 0 || (size_t)k >= cap - len)
			return -1;
		len += (size_t)k;
	}
	k = snprintf(out + len, cap - len, "end\n");
	if (k < 0 || (size_t)k >= cap - len)
		return -1;
	return (int)(len + (size_t)k);
}

/* Strict: exactly what journal_format writes. */
static int journal_parse(char *buf, size_t len, journal *j)
{
	char *save = NULL, *line;
	int n = 0;
	buf[len] = 0;
	if (strlen(buf) != len || len == 0 || buf[len - 1] != '\n')
		return -1;
	memset(j, 0, sizeof *j);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
		if (n == 0) {
			if (strcmp(line, JOURNAL_MAGIC))
				return -1;
		} else if (n == 1) {
			rs_version v;
			if (strncmp(line, "version ", 8) || rs_version_parse(line + 8, strlen(line + 8), &v) < 0)
				return -1;
			rs_version_str(&v, j->version);
		} else if (n >= 2 && n < 2 + RS_NFILES) {
			int i = n - 2;
			size_t nl = strlen(rs_files[i]);
			char *p = line;
			if (strncmp(p, "file ", 5) || strncmp(p + 5, rs_files[i], nl) || p[5 + nl] != ' ')
				return -1;
			p += 6 + nl;
			if (strlen(p) < 66 || unhex32(p, j->new_sha[i]) < 0 || p[64] != ' ')
				return -1;
			p += 65;
			if (!strcmp(p, "-"))
				j->old_present[i] = 0;
			else if (strlen(p) == 64 && unhex32(p, j->old_sha[i]) == 0)
				j->old_present[i] = 1;
			else
				return -1;
		} else if (n == 2 + RS_NFILES) {
			if (strcmp(line, "end"))
				return -1;
		} else {
			return -1;
		}
	}
	return n == 3 + RS_NFILES ? 0 : -1;
}

/* Writes the journal atomically: the commit point of an upgrade. */
static int journal_write(int instfd, const journal *j, char *err, size_t errlen)
{
	char buf[JOURNAL_MAX];
	int len = journal_format(j, buf, sizeof buf);
	int fd = openat(instfd, JOURNAL_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (len < 0 || fd < 0 || write_all(fd, buf, (size_t)len) < 0 || fsync(fd) < 0) {
		snprintf(err, errlen, "writing the upgrade journal: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		unlinkat(instfd, JOURNAL_TMP, 0);
		return -1;
	}
	close(fd);
	if (renameat(instfd, JOURNAL_TMP, instfd, JOURNAL) < 0 || fsync(instfd) < 0) {
		snprintf(err, errlen, "committing the upgrade journal: %s", strerror(errno));
		unlinkat(instfd, JOURNAL_TMP, 0);
		return -1;
	}
	return 0;
}

/* 1 and j filled when a journal exists, 0 when none, -1 when unreadable. */
static int journal_read(int instfd, journal *j)
{
	char buf[JOURNAL_MAX + 1];
	size_t got = 0;
	int fd = openat(instfd, JOURNAL, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	for (;;) {
		ssize_t k = read(fd, buf + got, JOURNAL_MAX - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
		if (got == JOURNAL_MAX)
			break;
	}
	close(fd);
	return journal_parse(buf, got, j) == 0 ? 1 : -1;
}

/* NAME.prev := the current NAME (a hard link: the old inode stays). */
static int keep_prev(int instfd, const char *name)
{
	char prev[RS_NAME_MAX + 8];
	prev_name(prev, sizeof prev, name);
	if (unlinkat(instfd, prev, 0) < 0 && errno != ENOENT)
		return -1;
	return linkat(instfd, name, instfd, prev, 0);
}

/* ---- recovery ---- */
enum { F_DONE, F_PENDING, F_BAD };

static int recover_locked(int instfd, char *msg, size_t msglen)
{
	journal j;
	int st[RS_NFILES], any_bad = 0;
	int r = journal_read(instfd, &j);
	if (r == 0)
		return 0;
	if (r < 0) {
		snprintf(msg, msglen, "the upgrade journal %s is unreadable or corrupt; the installation was left as it is",
			 JOURNAL);
		return -1;
	}
	/* Classify every file before touching any. */
	for (int i = 0; i < RS_NFILES; i++) {
		char tmp[RS_NAME_MAX + 16];
		uint8_t h[32], t[32];
		tmp_name(tmp, sizeof tmp, rs_files[i]);
		int hn = hash_at(instfd, rs_files[i], h, NULL);
		int ht = hash_at(instfd, tmp, t, NULL);
		if (hn < 0 || ht < 0) {
			snprintf(msg, msglen, "recovery: cannot read %s: %s", rs_files[i], strerror(errno));
			return -1;
		}
		if (ht == 1 && sodium_memcmp(t, j.new_sha[i], 32) == 0 &&
		    ((hn == 1 && j.old_present[i] && sodium_memcmp(h, j.old_sha[i], 32) == 0) ||
		     (hn == 0 && !j.old_present[i]) || (hn == 1 && sodium_memcmp(h, j.new_sha[i], 32) == 0)))
			st[i] = F_PENDING;
		else if (ht == 0 && hn == 1 && sodium_memcmp(h, j.new_sha[i], 32) == 0)
			st[i] = F_DONE;
		else
			st[i] = F_BAD, any_bad = 1;
	}
	if (!any_bad) {
		/* Roll forward: the journal promises every new file is complete. */
		for (int i = 0; i < RS_NFILES; i++) {
			char tmp[RS_NAME_MAX + 16];
			uint8_t h[32];
			if (st[i] != F_PENDING)
				continue;
			tmp_name(tmp, sizeof tmp, rs_files[i]);
			if (hash_at(instfd, rs_files[i], h, NULL) == 1 && j.old_present[i] &&
			    sodium_memcmp(h, j.old_sha[i], 32) == 0 && keep_prev(instfd, rs_files[i]) < 0)
				goto io_fail;
			if (renameat(instfd, tmp, instfd, rs_files[i]) < 0)
				goto io_fail;
		}
		if (fsync(instfd) < 0 || unlinkat(instfd, JOURNAL, 0) < 0 || fsync(instfd) < 0)
			goto io_fail;
		snprintf(msg, msglen, "completed an interrupted upgrade to %s", j.version);
		return 1;
	}
	/* Something no crash produces (a temporary missing or altered): put
	 * back every name that already holds its new file from NAME.prev. */
	for (int i = 0; i < RS_NFILES; i++) {
		char tmp[RS_NAME_MAX + 16], prev[RS_NAME_MAX + 8];
		uint8_t h[32], p[32];
		tmp_name(tmp, sizeof tmp, rs_files[i]);
		prev_name(prev, sizeof prev, rs_files[i]);
		if (hash_at(instfd, rs_files[i], h, NULL) == 1 && sodium_memcmp(h, j.new_sha[i], 32) == 0) {
			if (!j.old_present[i]) {
				if (unlinkat(instfd, rs_files[i], 0) < 0)
					goto io_fail;
			} else if (hash_at(instfd, prev, p, NULL) == 1 && sodium_memcmp(p, j.old_sha[i], 32) == 0) {
				if (renameat(instfd, prev, instfd, rs_files[i]) < 0)
					goto io_fail;
			} else {
				snprintf(msg, msglen,
					 "recovery: %s is new but its .prev is not the old file; the journal %s was kept",
					 rs_files[i], JOURNAL);
				return -1;
			}
		}
		unlinkat(instfd, tmp, 0);
	}
	if (fsync(instfd) < 0 || unlinkat(instfd, JOURNAL, 0) < 0 || fsync(instfd) < 0)
		goto io_fail;
	snprintf(msg, msglen, "rolled back an interrupted upgrade to %s (its new files were missing or altered)",
		 j.version);
	return 2;
io_fail:
	snprintf(msg, msglen, "recovery of an interrupted upgrade failed: %s (the journal %s was kept; run again)",
		 strerror(errno), JOURNAL);
	return -1;
}

int rs_recover(int instfd, char *msg, size_t msglen)
{
	if (flock(instfd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			return 3;
		snprintf(msg, msglen, "lock: %s", strerror(errno));
		return -1;
	}
	int r = recover_locked(instfd, msg, msglen);
	flock(instfd, LOCK_UN);
	return r;
}

void rs_clean_temps(int instfd)
{
	for (int i = 0; i < RS_NFILES; i++) {
		char tmp[RS_NAME_MAX + 16];
		tmp_name(tmp, sizeof tmp, rs_files[i]);
		unlinkat(instfd, tmp, 0);
	}
	unlinkat(instfd, JOURNAL_TMP, 0);
}

/* Copies srcfd's name into a fresh temporary under instfd; fsyncs it. */
static int stage_one(int instfd, int srcfd, const char *name, mode_t mode, char *err, size_t errlen)
{
	char tmp[RS_NAME_MAX + 16];
	uint8_t buf[1 << 16];
	tmp_name(tmp, sizeof tmp, name);
	int in = openat(srcfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int out = openat(instfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700);
	if (in < 0 || out < 0) {
		snprintf(err, errlen, "%s: %s", in < 0 ? name : tmp, strerror(errno));
		goto fail;
	}
	for (;;) {
		ssize_t k = read(in, buf, sizeof buf);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			snprintf(err, errlen, "reading %s: %s", name, strerror(errno));
			goto fail;
		}
		if (k == 0)
			break;
		if (write_all(out, buf, (size_t)k) < 0) {
			snprintf(err, errlen, "writing %s: %s", tmp, strerror(errno));
			goto fail;
		}
	}
	if (fchmod(out, mode) < 0 || fsync(out) < 0) {
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
		goto fail;
	}
	close(in);
	close(out);
	return 0;
fail:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return -1;
}

int rs_install(int instfd, int srcfd, const rs_release *r, char *err, size_t errlen)
{
	journal j;
	mode_t mode[RS_NFILES];
	char msg[256];
	int rc = -1;
	if (flock(instfd, LOCK_EX | LOCK_NB) < 0) {
		snprintf(err, errlen, "another mlxr upgrade is running on this installation");
		return -1;
	}
	int rec = recover_locked(instfd, msg, sizeof msg);
	if (rec != 0) {
		snprintf(err, errlen, "%s; nothing else was changed: run `mlxr upgrade` again", msg);
		goto out;
	}
	rs_clean_temps(instfd);
	rs_hook(1);
	memset(&j, 0, sizeof j);
	rs_version_str(&r->meta.version, j.version);
	for (int i = 0; i < RS_NFILES; i++) {
		mode[i] = 0755;
		int h = hash_at(instfd, rs_files[i], j.old_sha[i], &mode[i]);
		if (h < 0) {
			snprintf(err, errlen, "reading the installed %s: %s", rs_files[i], strerror(errno));
			goto out;
		}
		j.old_present[i] = h;
		memcpy(j.new_sha[i], r->sha256[i], 32);
	}
	/* 1. New files next to the old ones, each fsynced. */
	for (int i = 0; i < RS_NFILES; i++) {
		if (stage_one(instfd, srcfd, rs_files[i], mode[i], err, errlen) < 0)
			goto clean;
		rs_hook(2 + i);
	}
	/* 2. Read back from the install directory and hash again: what will be
	 * renamed into place is exactly what was signed. */
	for (int i = 0; i < RS_NFILES; i++) {
		char tmp[RS_NAME_MAX + 16];
		uint8_t h[32];
		tmp_name(tmp, sizeof tmp, rs_files[i]);
		if (hash_at(instfd, tmp, h, NULL) != 1 || sodium_memcmp(h, r->sha256[i], 32) != 0) {
			snprintf(err, errlen, "%s: the copy written to the install directory does not match its signed "
					      "SHA-256",
				 rs_files[i]);
			goto clean;
		}
	}
	if (fsync(instfd) < 0) {
		snprintf(err, errlen, "fsync of the install directory: %s", strerror(errno));
		goto clean;
	}
	rs_hook(5);
	/* 3. Commit. */
	if (journal_write(instfd, &j, err, errlen) < 0)
		goto clean;
	rs_hook(6);
	/* 4. Swap, broker last (rs_files order). */
	for (int i = 0; i < RS_NFILES; i++) {
		char tmp[RS_NAME_MAX + 16], prev[RS_NAME_MAX + 8];
		tmp_name(tmp, sizeof tmp, rs_files[i]);
		prev_name(prev, sizeof prev, rs_files[i]);
		if (unlinkat(instfd, prev, 0) < 0 && errno != ENOENT)
			goto swap_fail;
		rs_hook(7 + 3 * i);
		if (j.old_present[i] && linkat(instfd, rs_files[i], instfd, prev, 0) < 0)
			goto swap_fail;
		rs_hook(8 + 3 * i);
		if (renameat(instfd, tmp, instfd, rs_files[i]) < 0)
			goto swap_fail;
		rs_hook(9 + 3 * i);
	}
	if (fsync(instfd) < 0)
		goto swap_fail;
	rs_hook(16);
	if (unlinkat(instfd, JOURNAL, 0) < 0 || fsync(instfd) < 0)
		goto swap_fail;
	rs_hook(17);
	rc = 0;
	goto out;
swap_fail:
	/* After the commit point the only way is forward: recovery finishes
	 * (or, if it cannot, rolls back) what the swap started. */
	snprintf(err, errlen, "replacing the binaries: %s", strerror(errno));
	if (recover_locked(instfd, msg, sizeof msg) > 0)
		snprintf(err + strlen(err), errlen - strlen(err), "; %s", msg);
	goto out;
clean:
	rs_clean_temps(instfd);
	fsync(instfd);
out:
	flock(instfd, LOCK_UN);
	return rc;
}

int rs_self_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	if (n <= 0 || (size_t)n >= len - 1)
		return -1;
	buf[n] = 0;
	char *slash = strrchr(buf, '/');
	if (!slash)
		return -1;
	if (slash == buf)
		slash[1] = 0;
	else
		*slash = 0;
	return 0;
}
