/* tests/unit/test_release.c — release/: minisign files (sign, parse,
 * verify, tamper), versions, trusted comments, SHA256SUMS, the feed, the
 * accepted-version state, the compiled-in keys, and the journal's
 * roll-forward / roll-back on hand-made half-done installations. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "release/release.h"

static int fails;
#define CHECK(cond)                                                 \
	do {                                                        \
		if (!(cond)) {                                      \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			fails++;                                    \
		}                                                   \
	} while (0)

static rs_seckey sk;
static rs_pubkey pk;
static char err[512];

static const char *TC = "timestamp:1700000000\tfile:SHA256SUMS\tversion:1.2.3\tplatform:linux-x86_64\texpires:1800000000";

static void test_sign_verify_tamper(void)
{
	static char out[RS_SIGFILE_MAX];
	static rs_sig s;
	const char *msg = "hello release\n";
	CHECK(rs_sign(&sk, (const uint8_t *)msg, strlen(msg), "c", TC, out, sizeof out, err, sizeof err) == 0);
	CHECK(rs_sig_parse(out, strlen(out), &s, err, sizeof err) == 0);
	CHECK(s.prehashed == 1 && !strcmp(s.trusted, TC));
	CHECK(rs_sig_verify(&s, &pk, (const uint8_t *)msg, strlen(msg), err, sizeof err) == 0);
	/* another message */
	CHECK(rs_sig_verify(&s, &pk, (const uint8_t *)"hello releasE\n", 14, err, sizeof err) < 0);
	/* a flipped bit of the signature, of the global signature */
	s.sig[5] ^= 1;
	CHECK(rs_sig_verify(&s, &pk, (const uint8_t *)msg, strlen(msg), err, sizeof err) < 0);
	s.sig[5] ^= 1;
	s.global_sig[7] ^= 0x80;
	CHECK(rs_sig_verify(&s, &pk, (const uint8_t *)msg, strlen(msg), err, sizeof err) < 0 &&
	      strstr(err, "trusted comment"));
	s.global_sig[7] ^= 0x80;
	/* the trusted comment changed */
	s.trusted[strlen("timestamp:17")] = '9';
	CHECK(rs_sig_verify(&s, &pk, (const uint8_t *)msg, strlen(msg), err, sizeof err) < 0);
	s.trusted[strlen("timestamp:17")] = '0';
	/* another key id */
	s.keyid[0] ^= 1;
	CHECK(rs_sig_verify(&s, &pk, (const uint8_t *)msg, strlen(msg), err, sizeof err) < 0 && strstr(err, "another key"));
	s.keyid[0] ^= 1;
	CHECK(rs_sig_verify(&s, &pk, (const uint8_t *)msg, strlen(msg), err, sizeof err) == 0);
	/* format: trailing data, missing lines, CRLF ok, bad prefix */
	size_t n = strlen(out);
	memcpy(out + n, "x", 2);
	CHECK(rs_sig_parse(out, n + 1, &s, err, sizeof err) < 0);
	CHECK(rs_sig_parse(out, 10, &s, err, sizeof err) < 0);
	out[0] = 'U';
	CHECK(rs_sig_parse(out, n, &s, err, sizeof err) < 0);
	CHECK(rs_sig_parse("", 0, &s, err, sizeof err) < 0);
}

static void test_keys(void)
{
	char b64[57], text[4096];
	rs_pubkey k;
	rs_seckey s2;
	rs_pubkey_base64(&pk, b64);
	CHECK(b64[0] == 'R' && b64[1] == 'W' && strlen(b64) == 56);
	CHECK(rs_pubkey_parse(b64, 56, &k, err, sizeof err) == 0 && !memcmp(&k, &pk, sizeof k));
	snprintf(text, sizeof text, "untrusted comment: minisign public key X\n%s\n", b64);
	CHECK(rs_pubkey_parse(text, strlen(text), &k, err, sizeof err) == 0 && !memcmp(&k, &pk, sizeof k));
	CHECK(rs_pubkey_parse(b64, 55, &k, err, sizeof err) < 0);
	CHECK(rs_seckey_format(&sk, text, sizeof text) == 0);
	CHECK(rs_seckey_parse(text, strlen(text), &s2, err, sizeof err) == 0 && !memcmp(&s2, &sk, sizeof sk));
	/* an encrypted key is refused with a message saying so */
	char *line = strchr(text, '\n') + 1;
	uint8_t raw[158];
	size_t got;
	CHECK(sodium_base642bin(raw, sizeof raw, line, strlen(line) - 1, NULL, &got, NULL,
				sodium_base64_VARIANT_ORIGINAL) == 0 && got == 158);
	raw[2] = 'S', raw[3] = 'c';
	sodium_bin2base64(line, 213, raw, sizeof raw, sodium_base64_VARIANT_ORIGINAL);
	strcat(line, "\n");
	CHECK(rs_seckey_parse(text, strlen(text), &s2, err, sizeof err) < 0 && strstr(err, "password"));
	/* a wrong checksum */
	raw[2] = 0, raw[3] = 0, raw[130] ^= 1;
	sodium_bin2base64(line, 213, raw, sizeof raw, sodium_base64_VARIANT_ORIGINAL);
	strcat(line, "\n");
	CHECK(rs_seckey_parse(text, strlen(text), &s2, err, sizeof err) < 0);
	/* the compiled-in keys of this build: a primary and a backup */
	size_t nk;
	const rs_pubkey *tk = rs_trusted_keys(&nk);
	CHECK(tk && nk == 2 && !strcmp(rs_trusted_key_label(0), "primary") && !strcmp(rs_trusted_key_label(1), "backup"));
	CHECK(tk && memcmp(tk[0].id, tk[1].id, RS_KEYID_BYTES));
	size_t idx = 9;
	CHECK(tk && rs_key_find(tk, nk, tk[1].id, &idx) == &tk[1] && idx == 1);
	CHECK(rs_key_find(tk, nk, pk.id, NULL) == NULL);
}

static void test_versions_and_meta(void)
{
	rs_version a, b;
	char s[24];
	CHECK(rs_version_parse("1.2.3", 5, &a) == 0 && a.v[0] == 1 && a.v[2] == 3);
	CHECK(rs_version_parse("1.10.0", 6, &b) == 0 && rs_version_cmp(&a, &b) < 0 && rs_version_cmp(&b, &a) > 0);
	CHECK(rs_version_parse("0.0.0", 5, &b) == 0 && rs_version_cmp(&b, &b) == 0);
	const char *bad[] = { "", "1", "1.2", "1.2.3.4", "01.2.3", "1..3", "1.2.x", "v1.2.3", "1.2.3-rc1", "1234567.0.0", "1.2.3 " };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(rs_version_parse(bad[i], strlen(bad[i]), &b) < 0);
	rs_version_str(&a, s);
	CHECK(!strcmp(s, "1.2.3"));

	rs_meta m, m2;
	char tc[512];
	CHECK(rs_meta_parse(TC, strlen(TC), &m, err, sizeof err) == 0);
	CHECK(m.timestamp == 1700000000 && m.expires == 1800000000 && !strcmp(m.platform, "linux-x86_64"));
	CHECK(rs_meta_format(&m, tc, sizeof tc) == 0 && !strcmp(tc, TC));
	CHECK(rs_meta_parse(tc, strlen(tc), &m2, err, sizeof err) == 0);
	const char *badtc[] = {
		"timestamp:1\tfile:SHA256SUMS\tversion:1.2.3\tplatform:p", /* no expires */
		"timestamp:1\tfile:OTHER\tversion:1.2.3\tplatform:p\texpires:2",
		"timestamp:1\tfile:SHA256SUMS\tversion:1.2.3\tversion:1.2.4\tplatform:p\texpires:2",
		"timestamp:1\tfile:SHA256SUMS\tversion:1.2.3\tplatform:p\texpires:2\textra:1",
		"timestamp:1\tfile:SHA256SUMS\tversion:1.2.3\tplatform:p\texpires:-2",
		"timestamp:1 file:SHA256SUMS",
	};
	for (size_t i = 0; i < sizeof badtc / sizeof badtc[0]; i++)
		CHECK(rs_meta_parse(badtc[i], strlen(badtc[i]), &m2, err, sizeof err) < 0);
}

static void test_policy(void)
{
	rs_release r;
	rs_version run, floor;
	memset(&r, 0, sizeof r);
	CHECK(rs_meta_parse(TC, strlen(TC), &r.meta, err, sizeof err) == 0); /* 1.2.3, expires 1800000000 */
	rs_version_parse("1.2.2", 5, &run);
	CHECK(rs_check_policy(&r, &run, NULL, "linux-x86_64", 1750000000, err, sizeof err) == 0);
	CHECK(rs_check_policy(&r, &run, NULL, "linux-aarch64", 1750000000, err, sizeof err) < 0);
	CHECK(rs_check_policy(&r, &run, NULL, "linux-x86_64", 1800000000, err, sizeof err) < 0 && strstr(err, "expired"));
	rs_version_parse("1.2.3", 5, &run);
	CHECK(rs_check_policy(&r, &run, NULL, "linux-x86_64", 1750000000, err, sizeof err) < 0);
	rs_version_parse("1.0.0", 5, &run);
	rs_version_parse("1.2.3", 5, &floor);
	CHECK(rs_check_policy(&r, &run, &floor, "linux-x86_64", 1750000000, err, sizeof err) == 0); /* equal: ok */
	rs_version_parse("1.3.0", 5, &floor);
	CHECK(rs_check_policy(&r, &run, &floor, "linux-x86_64", 1750000000, err, sizeof err) < 0 &&
	      strstr(err, "rollback"));
}

static void test_sums_and_feed(void)
{
	static rs_sums s;
	const char *h = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
	char buf[1024];
	snprintf(buf, sizeof buf, "%s  mlxr\n%s *mlxr-worker\n", h, h);
	CHECK(rs_sums_parse(buf, strlen(buf), &s, err, sizeof err) == 0 && s.n == 2);
	CHECK(rs_sums_find(&s, "mlxr-worker") && !rs_sums_find(&s, "mlxr-fetcher") && s.e[0].sha256[0] == 0xe3);
	const char *badnames[] = { "../x", ".hidden", "a/b", "a b", "", "a\\b" };
	for (size_t i = 0; i < sizeof badnames / sizeof badnames[0]; i++) {
		snprintf(buf, sizeof buf, "%s  %s\n", h, badnames[i]);
		CHECK(rs_sums_parse(buf, strlen(buf), &s, err, sizeof err) < 0);
	}
	snprintf(buf, sizeof buf, "%s  mlxr\n%s  mlxr\n", h, h);
	CHECK(rs_sums_parse(buf, strlen(buf), &s, err, sizeof err) < 0); /* twice */
	snprintf(buf, sizeof buf, "%s  mlxr", h);
	CHECK(rs_sums_parse(buf, strlen(buf), &s, err, sizeof err) < 0); /* no LF */
	snprintf(buf, sizeof buf, "%.63s  mlxr\n", h);
	CHECK(rs_sums_parse(buf, strlen(buf), &s, err, sizeof err) < 0);

	static rs_feed f;
	const char *ok = "{\"tag_name\":\"v1.2.3\",\"body\":\"x\",\"assets\":[{\"name\":\"mlxr\",\"size\":5,"
			 "\"browser_download_url\":\"https://h/d/mlxr\"},{\"name\":\"notes.txt\",\"size\":-1},"
			 "{\"name\":\"SHA256SUMS\",\"size\":0,\"browser_download_url\":\"https://h/d/S\"}]}";
	CHECK(rs_feed_parse(ok, strlen(ok), &f, err, sizeof err) == 0);
	CHECK(f.have_version && f.version.v[1] == 2 && f.nassets == 2);
	CHECK(rs_feed_asset(&f, "mlxr") && rs_feed_asset(&f, "mlxr")->size == 5 && !rs_feed_asset(&f, "notes.txt"));
#define DUP_ASSET                                                                                         \
	"{\"tag_name\":\"v1\",\"assets\":[{\"name\":\"mlxr\",\"size\":1,\"browser_download_url\":\"https://a\"}," \
	"{\"name\":\"mlxr\",\"size\":1,\"browser_download_url\":\"https://b\"}]}"
	const char *bad[] = {
		"[]", "{\"assets\":[]}", "{\"tag_name\":\"v1\"}",
		"{\"tag_name\":\"v1\",\"assets\":[{\"name\":\"mlxr\",\"size\":1,\"browser_download_url\":\"http://h/x\"}]}",
		"{\"tag_name\":\"v1\",\"assets\":[{\"name\":\"mlxr\",\"size\":1,\"browser_download_url\":\"https://h/x y\"}]}",
		"{\"tag_name\":\"v1\",\"assets\":[{\"name\":\"mlxr\",\"browser_download_url\":\"https://h/x\"}]}",
		DUP_ASSET,
		"{\"tag_name\":\"v 1\",\"assets\":[]}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(rs_feed_parse(bad[i], strlen(bad[i]), &f, err, sizeof err) < 0);
	CHECK(rs_feed_parse("{\"tag_name\":\"nightly\",\"assets\":[]}", 34, &f, err, sizeof err) == 0 &&
	      !f.have_version);
}

static void test_state(const char *dir)
{
	char path[512];
	rs_state st;
	rs_version v;
	uint8_t id2[RS_KEYID_BYTES] = { 9 };
	snprintf(path, sizeof path, "%s/accepted", dir);
	CHECK(rs_state_load(path, &st, err, sizeof err) == 0 && st.n == 0 && rs_state_floor(&st) == NULL);
	rs_version_parse("1.0.1", 5, &v);
	CHECK(rs_state_record(path, &st, pk.id, &v, err, sizeof err) == 0);
	rs_version_parse("1.0.0", 5, &v);
	CHECK(rs_state_record(path, &st, pk.id, &v, err, sizeof err) == 0); /* never lowered */
	rs_version_parse("0.9.0", 5, &v);
	CHECK(rs_state_record(path, &st, id2, &v, err, sizeof err) == 0);
	CHECK(rs_state_load(path, &st, err, sizeof err) == 0 && st.n == 2);
	char s[24];
	rs_version_str(rs_state_floor(&st), s);
	CHECK(!strcmp(s, "1.0.1"));
	FILE *f = fopen(path, "w");
	fputs("0000000000000009 1.0\n", f);
	fclose(f);
	CHECK(rs_state_load(path, &st, err, sizeof err) < 0);
	CHECK(rs_state_parse("0000000000000009 1.0.0\n0000000000000009 1.0.1\n", 46, &st, err, sizeof err) < 0);
}

/* ---- the journal ---- */
static void put(const char *dir, const char *name, const char *content)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	fputs(content, f);
	fclose(f);
}

static int has(const char *dir, const char *name, const char *content)
{
	char p[512], buf[256] = "";
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "r");
	if (!f)
		return content == NULL;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	return content && !strcmp(buf, content);
}

static void hex(const char *s, char out[65])
{
	uint8_t h[32];
	crypto_hash_sha256(h, (const uint8_t *)s, strlen(s));
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
}

/* A journal for the swap old-X -> new-X of rs_files, with the installation
 * in state: files [0, done) already swapped. */
static void half_done(const char *dir, int done)
{
	char j[2048], a[65], b[65];
	size_t len = (size_t)snprintf(j, sizeof j, "mlxr-upgrade-journal 1\nversion 2.0.0\n");
	for (int i = 0; i < RS_NFILES; i++) {
		char o[64], n[64], t[96];
		snprintf(o, sizeof o, "old-%s", rs_files[i]);
		snprintf(n, sizeof n, "new-%s", rs_files[i]);
		hex(n, a);
		hex(o, b);
		len += (size_t)snprintf(j + len, sizeof j - len, "file %s %s %s\n", rs_files[i], a, b);
		snprintf(t, sizeof t, ".%s.upgrade-new", rs_files[i]);
		if (i < done) {
			put(dir, rs_files[i], n);
			char p[96];
			snprintf(p, sizeof p, "%s.prev", rs_files[i]);
			put(dir, p, o);
		} else {
			put(dir, rs_files[i], o);
			put(dir, t, n);
		}
	}
	snprintf(j + len, sizeof j - len, "end\n");
	put(dir, ".mlxr-upgrade.journal", j);
}

static void test_recovery(const char *dir)
{
	char msg[512];
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(rs_recover(fd, msg, sizeof msg) == 0); /* nothing to do */
	for (int done = 0; done <= RS_NFILES; done++) {
		half_done(dir, done);
		CHECK(rs_recover(fd, msg, sizeof msg) == 1);
		for (int i = 0; i < RS_NFILES; i++) {
			char n[64], t[96];
			snprintf(n, sizeof n, "new-%s", rs_files[i]);
			snprintf(t, sizeof t, ".%s.upgrade-new", rs_files[i]);
			CHECK(has(dir, rs_files[i], n) && has(dir, t, NULL));
		}
		CHECK(has(dir, ".mlxr-upgrade.journal", NULL));
	}
	/* an altered temporary: roll back to the complete old set */
	half_done(dir, 1);
	put(dir, ".mlxr.upgrade-new", "tampered");
	CHECK(rs_recover(fd, msg, sizeof msg) == 2);
	for (int i = 0; i < RS_NFILES; i++) {
		char o[64];
		snprintf(o, sizeof o, "old-%s", rs_files[i]);
		CHECK(has(dir, rs_files[i], o));
	}
	CHECK(has(dir, ".mlxr-upgrade.journal", NULL) && has(dir, ".mlxr.upgrade-new", NULL));
	/* a corrupt journal: left alone, error */
	put(dir, ".mlxr-upgrade.journal", "mlxr-upgrade-journal 1\nversion 2\n");
	CHECK(rs_recover(fd, msg, sizeof msg) < 0);
	unlinkat(fd, ".mlxr-upgrade.journal", 0);
	close(fd);
}

int main(void)
{
	char dir[] = "/tmp/mlxr-test-release-XXXXXX";
	if (sodium_init() < 0 || !mkdtemp(dir))
		return 1;
	rs_keypair(&sk, &pk);
	test_sign_verify_tamper();
	test_keys();
	test_versions_and_meta();
	test_policy();
	test_sums_and_feed();
	test_state(dir);
	test_recovery(dir);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		fails++;
	printf("test_release: %s (%d failures)\n", fails ? "FAIL" : "ok", fails);
	return fails ? 1 : 0;
}
