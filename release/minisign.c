/* release/minisign.c — minisign public keys, signatures and (unencrypted)
 * secret keys, verified and made with libsodium. Formats: release/release.h
 * and minisign's src/minisign.h (SigStruct, PubkeyStruct, SeckeyStruct). */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "release/release.h"

#define PK_RAW (2 + RS_KEYID_BYTES + RS_PK_BYTES)               /* 42 */
#define SIG_RAW (2 + RS_KEYID_BYTES + RS_SIG_BYTES)             /* 74 */
#define SK_RAW (2 + 2 + 2 + 32 + 8 + 8 + RS_KEYID_BYTES + RS_SK_BYTES + 32) /* 158 */
#define UNTRUSTED_PREFIX "untrusted comment: "
#define TRUSTED_PREFIX "trusted comment: "
/* minisign's COMMENTMAXBYTES: the untrusted comment line is at most this. */
#define UNTRUSTED_MAX 1024

static void seterr(char *err, size_t errlen, const char *msg)
{
	if (errlen)
		snprintf(err, errlen, "%s", msg);
}

void rs_keyid_hex(const uint8_t id[RS_KEYID_BYTES], char buf[17])
{
	static const char hx[] = "0123456789ABCDEF";
	/* minisign prints the key number as a little-endian uint64 */
	for (int i = 0; i < RS_KEYID_BYTES; i++) {
		uint8_t b = id[RS_KEYID_BYTES - 1 - i];
		buf[2 * i] = hx[b >> 4];
		buf[2 * i + 1] = hx[b & 15];
	}
	buf[16] = 0;
}

/* One line of [p, end): *line/len without the "\n" or "\r\n"; *next after
 * it. -1 when there is no line ending (last == 0) — the final line may lack
 * one when last != 0. */
static int next_line(const char **p, const char *end, const char **line, size_t *len, int last)
{
	const char *s = *p;
	const char *nl = memchr(s, '\n', (size_t)(end - s));
	if (!nl) {
		if (!last || s == end)
			return -1;
		nl = end;
	}
	*line = s;
	*len = (size_t)(nl - s);
	if (*len && s[*len - 1] == '\r')
		(*len)--;
	*p = nl < end ? nl + 1 : end;
	return 0;
}

/* Exact base64 (original alphabet, padded) of want bytes. */
static int b64_exact(const char *s, size_t n, uint8_t *out, size_t want)
{
	size_t got = 0;
	const char *b64_end = NULL;
	if (n != sodium_base64_ENCODED_LEN(want, sodium_base64_VARIANT_ORIGINAL) - 1)
		return -1;
	if (sodium_base642bin(out, want, s, n, NULL, &got, &b64_end, sodium_base64_VARIANT_ORIGINAL) != 0)
		return -1;
	return got == want && b64_end == s + n ? 0 : -1;
}

static int has_prefix(const char *s, size_t n, const char *pre)
{
	size_t k = strlen(pre);
	return n >= k && !memcmp(s, pre, k);
}

/* Printable text for a comment: no control bytes except tab, valid UTF-8
 * (checked loosely: bytes >= 0x80 are allowed only in well-formed
 * sequences), no NUL. */
static int comment_ok(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		unsigned c = u[i];
		size_t k;
		if (c < 0x80) {
			if ((c < 0x20 && c != '\t') || c == 0x7f)
				return 0;
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			k = 1;
		else if (c >= 0xe0 && c <= 0xef)
			k = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			k = 3;
		else
			return 0;
		if (k > n - i - 1)
			return 0;
		for (size_t j = 1; j <= k; j++)
			if ((u[i + j] & 0xc0) != 0x80)
				return 0;
		i += k + 1;
	}
	return 1;
}

int rs_pubkey_parse(const char *text, size_t len, rs_pubkey *out, char *err, size_t errlen)
{
	const char *p = text, *end = text + len, *line;
	size_t n;
	uint8_t raw[PK_RAW];
	if (!text || len > 4096) {
		seterr(err, errlen, "public key: too long");
		return -1;
	}
	if (next_line(&p, end, &line, &n, 1) < 0) {
		seterr(err, errlen, "public key: empty");
		return -1;
	}
	if (has_prefix(line, n, UNTRUSTED_PREFIX)) {
		if (n > UNTRUSTED_MAX || !comment_ok(line, n)) {
			seterr(err, errlen, "public key: bad comment line");
			return -1;
		}
		if (next_line(&p, end, &line, &n, 1) < 0) {
			seterr(err, errlen, "public key: no key line after the comment");
			return -1;
		}
	}
	if (p != end) {
		seterr(err, errlen, "public key: unexpected data after the key line");
		return -1;
	}
	if (b64_exact(line, n, raw, sizeof raw) < 0) {
		seterr(err, errlen, "public key: the key line is not base64 of 42 bytes");
		return -1;
	}
	if (raw[0] != 'E' || raw[1] != 'd') {
		seterr(err, errlen, "public key: algorithm is not Ed25519 (\"Ed\")");
		return -1;
	}
	memcpy(out->id, raw + 2, RS_KEYID_BYTES);
	memcpy(out->pk, raw + 2 + RS_KEYID_BYTES, RS_PK_BYTES);
	return 0;
}

void rs_pubkey_base64(const rs_pubkey *k, char buf[57])
{
	uint8_t raw[PK_RAW] = { 'E', 'd' };
	memcpy(raw + 2, k->id, RS_KEYID_BYTES);
	memcpy(raw + 2 + RS_KEYID_BYTES, k->pk, RS_PK_BYTES);
	sodium_bin2base64(buf, 57, raw, sizeof raw, sodium_base64_VARIANT_ORIGINAL);
}

int rs_sig_parse(const char *text, size_t len, rs_sig *out, char *err, size_t errlen)
{
	const char *p = text, *end = text + len, *line;
	size_t n;
	uint8_t raw[SIG_RAW];
	if (!text || len > RS_SIGFILE_MAX) {
		seterr(err, errlen, "signature: file too long");
		return -1;
	}
	/* line 1: untrusted comment (minisign requires the prefix) */
	if (next_line(&p, end, &line, &n, 0) < 0 || !has_prefix(line, n, UNTRUSTED_PREFIX) || n > UNTRUSTED_MAX ||
	    !comment_ok(line, n)) {
		seterr(err, errlen, "signature: line 1 is not an \"untrusted comment: \" line");
		return -1;
	}
	/* line 2: algorithm, key id, signature */
	if (next_line(&p, end, &line, &n, 0) < 0 || b64_exact(line, n, raw, sizeof raw) < 0) {
		seterr(err, errlen, "signature: line 2 is not base64 of 74 bytes");
		return -1;
	}
	if (raw[0] == 'E' && raw[1] == 'D')
		out->prehashed = 1;
	else if (raw[0] == 'E' && raw[1] == 'd')
		out->prehashed = 0;
	else {
		seterr(err, errlen, "signature: unknown algorithm (neither \"ED\" nor \"Ed\")");
		return -1;
	}
	memcpy(out->keyid, raw + 2, RS_KEYID_BYTES);
	memcpy(out->sig, raw + 2 + RS_KEYID_BYTES, RS_SIG_BYTES);
	/* line 3: trusted comment */
	if (next_line(&p, end, &line, &n, 0) < 0 || !has_prefix(line, n, TRUSTED_PREFIX)) {
		seterr(err, errlen, "signature: line 3 is not a \"trusted comment: \" line");
		return -1;
	}
	line += strlen(TRUSTED_PREFIX);
	n -= strlen(TRUSTED_PREFIX);
	if (n > RS_TRUSTED_MAX || !comment_ok(line, n)) {
		seterr(err, errlen, "signature: trusted comment too long or not printable");
		return -1;
	}
	memcpy(out->trusted, line, n);
	out->trusted[n] = 0;
	out->trusted_len = n;
	/* line 4: global signature; nothing may follow */
	if (next_line(&p, end, &line, &n, 1) < 0 || b64_exact(line, n, out->global_sig, RS_SIG_BYTES) < 0) {
		seterr(err, errlen, "signature: line 4 is not base64 of 64 bytes");
		return -1;
	}
	if (p != end) {
		seterr(err, errlen, "signature: unexpected data after line 4");
		return -1;
	}
	return 0;
}

int rs_sig_verify(const rs_sig *s, const rs_pubkey *k, const uint8_t *msg, size_t len, char *err, size_t errlen)
{
	uint8_t h[crypto_generichash_BYTES_MAX];
	uint8_t gm[RS_SIG_BYTES + RS_TRUSTED_MAX];
	if (sodium_init() < 0) {
		seterr(err, errlen, "libsodium failed to initialise");
		return -1;
	}
	if (sodium_memcmp(s->keyid, k->id, RS_KEYID_BYTES) != 0) {
		seterr(err, errlen, "signature: made by another key");
		return -1;
	}
	if (s->prehashed) {
		crypto_generichash(h, sizeof h, msg, len, NULL, 0);
		msg = h;
		len = sizeof h;
	}
	if (crypto_sign_verify_detached(s->sig, msg, len, k->pk) != 0) {
		seterr(err, errlen, "signature: does not verify (the file was modified or not signed by this key)");
		return -1;
	}
	memcpy(gm, s->sig, RS_SIG_BYTES);
	memcpy(gm + RS_SIG_BYTES, s->trusted, s->trusted_len);
	if (crypto_sign_verify_detached(s->global_sig, gm, RS_SIG_BYTES + s->trusted_len, k->pk) != 0) {
		seterr(err, errlen, "signature: the trusted comment's signature does not verify (comment modified)");
		return -1;
	}
	return 0;
}

int rs_sign(const rs_seckey *sk, const uint8_t *msg, size_t len, const char *untrusted, const char *trusted,
	    char *out, size_t cap, char *err, size_t errlen)
{
	uint8_t h[crypto_generichash_BYTES_MAX];
	uint8_t raw[SIG_RAW] = { 'E', 'D' };
	uint8_t gm[RS_SIG_BYTES + RS_TRUSTED_MAX];
	uint8_t gsig[RS_SIG_BYTES];
	char b1[sodium_base64_ENCODED_LEN(SIG_RAW, sodium_base64_VARIANT_ORIGINAL)];
	char b2[sodium_base64_ENCODED_LEN(RS_SIG_BYTES, sodium_base64_VARIANT_ORIGINAL)];
	size_t tl = strlen(trusted);
	if (sodium_init() < 0) {
		seterr(err, errlen, "libsodium failed to initialise");
		return -1;
	}
	if (tl > RS_TRUSTED_MAX || !comment_ok(trusted, tl) ||
	    strlen(untrusted) + strlen(UNTRUSTED_PREFIX) > UNTRUSTED_MAX || !comment_ok(untrusted, strlen(untrusted))) {
		seterr(err, errlen, "sign: comment too long or not printable");
		return -1;
	}
	crypto_generichash(h, sizeof h, msg, len, NULL, 0);
	memcpy(raw + 2, sk->id, RS_KEYID_BYTES);
	crypto_sign_detached(raw + 2 + RS_KEYID_BYTES, NULL, h, sizeof h, sk->sk);
	memcpy(gm, raw + 2 + RS_KEYID_BYTES, RS_SIG_BYTES);
	memcpy(gm + RS_SIG_BYTES, trusted, tl);
	crypto_sign_detached(gsig, NULL, gm, RS_SIG_BYTES + tl, sk->sk);
	sodium_bin2base64(b1, sizeof b1, raw, sizeof raw, sodium_base64_VARIANT_ORIGINAL);
	sodium_bin2base64(b2, sizeof b2, gsig, sizeof gsig, sodium_base64_VARIANT_ORIGINAL);
	int k = snprintf(out, cap, UNTRUSTED_PREFIX "%s\n%s\n" TRUSTED_PREFIX "%s\n%s\n", untrusted, b1, trusted, b2);
	sodium_memzero(h, sizeof h);
	if (k < 0 || (size_t)k >= cap) {
		seterr(err, errlen, "sign: output buffer too small");
		return -1;
	}
	return 0;
}

/* minisign's key checksum: BLAKE2b-256(sig_alg || key id || sk). */
static void sk_checksum(const rs_seckey *sk, uint8_t out[32])
{
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, 32);
	crypto_generichash_update(&st, (const uint8_t *)"Ed", 2);
	crypto_generichash_update(&st, sk->id, RS_KEYID_BYTES);
	crypto_generichash_update(&st, sk->sk, RS_SK_BYTES);
	crypto_generichash_final(&st, out, 32);
}

int rs_seckey_parse(const char *text, size_t len, rs_seckey *out, char *err, size_t errlen)
{
	const char *p = text, *end = text + len, *line;
	size_t n;
	uint8_t raw[SK_RAW], chk[32], zero[32] = { 0 };
	uint8_t pk[RS_PK_BYTES], sk2[RS_SK_BYTES];
	int rc = -1;
	if (sodium_init() < 0 || !text || len > 4096) {
		seterr(err, errlen, "secret key: unreadable");
		return -1;
	}
	if (next_line(&p, end, &line, &n, 1) < 0 || !has_prefix(line, n, UNTRUSTED_PREFIX) ||
	    next_line(&p, end, &line, &n, 1) < 0 || p != end || b64_exact(line, n, raw, sizeof raw) < 0) {
		seterr(err, errlen, "secret key: not a minisign secret key file");
		goto fail;
	}
	if (raw[0] != 'E' || raw[1] != 'd' || raw[4] != 'B' || raw[5] != '2') {
		seterr(err, errlen, "secret key: algorithm is not Ed25519/BLAKE2b");
		goto fail;
	}
	if (raw[2] != 0 || raw[3] != 0) {
		seterr(err, errlen, "secret key: encrypted with a password; mlxr-sign takes an unencrypted key "
				    "(minisign -G -W, or release/tools keygen)");
		goto fail;
	}
	memcpy(out->id, raw + 54, RS_KEYID_BYTES);
	memcpy(out->sk, raw + 54 + RS_KEYID_BYTES, RS_SK_BYTES);
	/* minisign 0.11 leaves the checksum of an unencrypted key zero; when it
	 * is set, it must match. */
	sk_checksum(out, chk);
	if (sodium_memcmp(raw + 126, zero, 32) != 0 && sodium_memcmp(raw + 126, chk, 32) != 0) {
		seterr(err, errlen, "secret key: checksum mismatch");
		goto fail;
	}
	/* the embedded public half must be the one the seed gives */
	crypto_sign_seed_keypair(pk, sk2, out->sk);
	if (sodium_memcmp(sk2, out->sk, RS_SK_BYTES) != 0) {
		seterr(err, errlen, "secret key: inconsistent (public half does not match the seed)");
		goto fail;
	}
	rc = 0;
fail:
	sodium_memzero(raw, sizeof raw);
	sodium_memzero(sk2, sizeof sk2);
	if (rc)
		sodium_memzero(out, sizeof *out);
	return rc;
}

int rs_seckey_format(const rs_seckey *sk, char *out, size_t cap)
{
	uint8_t raw[SK_RAW] = { 'E', 'd', 0, 0, 'B', '2' };
	char b[sodium_base64_ENCODED_LEN(SK_RAW, sodium_base64_VARIANT_ORIGINAL)];
	memcpy(raw + 54, sk->id, RS_KEYID_BYTES);
	memcpy(raw + 54 + RS_KEYID_BYTES, sk->sk, RS_SK_BYTES);
	sk_checksum(sk, raw + 126);
	sodium_bin2base64(b, sizeof b, raw, sizeof raw, sodium_base64_VARIANT_ORIGINAL);
	int k = snprintf(out, cap, UNTRUSTED_PREFIX "minisign secret key (unencrypted, mlxr release)\n%s\n", b);
	sodium_memzero(raw, sizeof raw);
	sodium_memzero(b, sizeof b);
	return k < 0 || (size_t)k >= cap ? -1 : 0;
}

void rs_keypair(rs_seckey *sk, rs_pubkey *pk)
{
	if (sodium_init() < 0)
		return;
	randombytes_buf(sk->id, RS_KEYID_BYTES);
	crypto_sign_keypair(pk->pk, sk->sk);
	memcpy(pk->id, sk->id, RS_KEYID_BYTES);
}

void rs_seckey_pub(const rs_seckey *sk, rs_pubkey *pk)
{
	memcpy(pk->id, sk->id, RS_KEYID_BYTES);
	memcpy(pk->pk, sk->sk + 32, RS_PK_BYTES);
}

const rs_pubkey *rs_key_find(const rs_pubkey *keys, size_t n, const uint8_t id[RS_KEYID_BYTES], size_t *idx)
{
	for (size_t i = 0; i < n; i++)
		if (!memcmp(keys[i].id, id, RS_KEYID_BYTES)) {
			if (idx)
				*idx = i;
			return &keys[i];
		}
	return NULL;
}
