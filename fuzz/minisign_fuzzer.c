/* fuzz/minisign_fuzzer.c — release/minisign.c and release/meta.c on
 * arbitrary bytes: rs_sig_parse, rs_pubkey_parse, rs_seckey_parse,
 * rs_meta_parse, rs_sig_verify, and release/state.c's rs_state_parse.
 *
 * The first byte picks the parser; the rest is the file.
 * Checked (release.h contract):
 *  - no memory error, leak or UB; nothing read outside the exact-size copy;
 *  - an accepted signature: trusted_len <= RS_TRUSTED_MAX, trusted is
 *    NUL-terminated at trusted_len with no NUL, CR or LF inside; signing the
 *    same trusted comment with a fixed key and parsing the result gives the
 *    same comment back, and that signature verifies; verifying the fuzzed
 *    signature itself against the fixed key is exercised for memory safety;
 *  - an accepted public key re-encodes (rs_pubkey_base64) to a line that
 *    parses to the same key;
 *  - an accepted trusted comment re-formats to a comment that parses to the
 *    same values;
 *  - an accepted version string prints back to the same bytes. */
#include <string.h>

#include <sodium.h>

#include "fuzz/fuzz.h"
#include "release/release.h"

static rs_seckey sk;
static rs_pubkey pk;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	uint8_t seed[32] = { 1, 2, 3 };
	if (sodium_init() < 0)
		abort();
	memset(sk.id, 0x42, RS_KEYID_BYTES);
	crypto_sign_seed_keypair(pk.pk, sk.sk, seed);
	memcpy(pk.id, sk.id, RS_KEYID_BYTES);
	return 0;
}

static rs_sig sig, sig2;
static char out[RS_SIGFILE_MAX + 1024];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int sel = data[0] % 6;
	size--;
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size);
	char err[256];
	switch (sel) {
	case 0:
		if (rs_sig_parse(buf, size, &sig, err, sizeof err) == 0) {
			FUZZ_CHECK(sig.trusted_len <= RS_TRUSTED_MAX && sig.trusted[sig.trusted_len] == 0, "trusted");
			FUZZ_CHECK(!memchr(sig.trusted, '\n', sig.trusted_len) && !memchr(sig.trusted, '\r', sig.trusted_len) &&
					   strlen(sig.trusted) == sig.trusted_len,
				   "control byte in trusted comment");
			/* verification must be safe on anything parsed */
			(void)rs_sig_verify(&sig, &pk, (const uint8_t *)buf, size, err, sizeof err);
			/* re-signing round trip */
			FUZZ_CHECK(rs_sign(&sk, (const uint8_t *)buf, size, "fuzz", sig.trusted, out, sizeof out, err,
					   sizeof err) == 0,
				   "sign: %s", err);
			FUZZ_CHECK(rs_sig_parse(out, strlen(out), &sig2, err, sizeof err) == 0, "reparse: %s", err);
			FUZZ_CHECK(sig2.trusted_len == sig.trusted_len && !memcmp(sig2.trusted, sig.trusted, sig.trusted_len),
				   "trusted comment changed");
			FUZZ_CHECK(rs_sig_verify(&sig2, &pk, (const uint8_t *)buf, size, err, sizeof err) == 0,
				   "own signature: %s", err);
		}
		break;
	case 1: {
		rs_pubkey k, k2;
		char b64[57];
		if (rs_pubkey_parse(buf, size, &k, err, sizeof err) == 0) {
			rs_pubkey_base64(&k, b64);
			FUZZ_CHECK(rs_pubkey_parse(b64, strlen(b64), &k2, err, sizeof err) == 0 && !memcmp(&k, &k2, sizeof k),
				   "pubkey round trip");
		}
		break;
	}
	case 2: {
		rs_seckey s;
		(void)rs_seckey_parse(buf, size, &s, err, sizeof err);
		break;
	}
	case 3: {
		rs_meta m, m2;
		char tc[512];
		if (rs_meta_parse(buf, size, &m, err, sizeof err) == 0) {
			FUZZ_CHECK(rs_meta_format(&m, tc, sizeof tc) == 0, "format");
			FUZZ_CHECK(rs_meta_parse(tc, strlen(tc), &m2, err, sizeof err) == 0, "reparse: %s", err);
			FUZZ_CHECK(m.timestamp == m2.timestamp && m.expires == m2.expires &&
					   !rs_version_cmp(&m.version, &m2.version) && !strcmp(m.platform, m2.platform),
				   "meta round trip");
		}
		break;
	}
	case 4: {
		rs_version v;
		char s[24];
		if (rs_version_parse(buf, size, &v) == 0) {
			rs_version_str(&v, s);
			FUZZ_CHECK(strlen(s) == size && !memcmp(s, buf, size), "version prints back differently");
		}
		break;
	}
	case 5: {
		static rs_state st;
		if (rs_state_parse(buf, size, &st, err, sizeof err) == 0)
			FUZZ_CHECK(st.n <= RS_STATE_MAX, "state n");
		break;
	}
	}
	free(buf);
	return 0;
}
