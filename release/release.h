/* release/release.h — signed releases: minisign files, SHA256SUMS, the
 * release feed, version policy, and the crash-consistent replacement of the
 * installed binaries behind `mlxr upgrade`.
 *
 * Trust model. What `mlxr upgrade` downloads (the feed JSON, SHA256SUMS,
 * SHA256SUMS.sig, the binaries) is hostile until checked here, in the broker,
 * after the fetcher (the only process with network) has finished:
 *  1. SHA256SUMS.sig is a minisign signature (Ed25519, libsodium) by one of
 *     the public keys compiled into this binary (release/keys.c), chosen by
 *     key id; both the signature over SHA256SUMS and the global signature
 *     over signature || trusted comment MUST verify.
 *  2. The trusted comment names the file, the version, the platform and an
 *     expiry: the signed version MUST be newer than the running one and not
 *     lower than the highest version this installation ever accepted
 *     (rs_state_*: no rollback, no replay); the expiry MUST not have passed
 *     (no freeze: a mirror cannot keep serving an old signed release
 *     forever). Whatever the feed says about the version is only a hint.
 *  3. Every binary's SHA-256 (crypto_hash_sha256) MUST equal its line in
 *     the signed SHA256SUMS (compared with sodium_memcmp).
 *  4. rs_install re-hashes each new file after writing and fsyncing it next
 *     to the installed one, and only then swaps all of them (journal, below).
 *
 * File formats are minisign's (https://jedisct1.github.io/minisign/), so a
 * user can check a release by hand with `minisign -V`:
 *   public key:  "untrusted comment: ..." line, then base64("Ed" || key id[8]
 *                || Ed25519 public key[32]);
 *   signature:   "untrusted comment: ..." line, base64(alg[2] || key id[8] ||
 *                sig[64]) where alg "ED" signs BLAKE2b-512(file) and legacy
 *                "Ed" the file itself, "trusted comment: TEXT" line,
 *                base64(Ed25519 over sig[64] || TEXT);
 *   secret key:  minisign's unencrypted form (`minisign -G -W`): "Ed", kdf
 *                "\0\0", "B2", salt/ops/mem (zero), key id, sk[64],
 *                BLAKE2b-256 checksum.
 * All parsers here are pure functions over (pointer, length), bounded, and
 * fuzzed (fuzz/minisign_fuzzer.c, sums_fuzzer.c, feed_fuzzer.c).
 *
 * Errors: every function returns 0 (or a documented value) and, on -1,
 * writes one line into err (caller-owned, may be NULL when errlen is 0).
 */
#ifndef MLXR_RELEASE_H
#define MLXR_RELEASE_H

#include <stddef.h>
#include <stdint.h>

#define RS_KEYID_BYTES 8
#define RS_PK_BYTES 32
#define RS_SK_BYTES 64
#define RS_SIG_BYTES 64
/* minisign's own bound on a trusted comment (TRUSTEDCOMMENTMAXBYTES). */
#define RS_TRUSTED_MAX 8192
/* A signature file is 4 short lines + the trusted comment. */
#define RS_SIGFILE_MAX (RS_TRUSTED_MAX + 4096)
/* SHA256SUMS: one line per file, a release has a handful. */
#define RS_SUMS_MAX_FILE (64 * 1024)
#define RS_SUMS_MAX 64
#define RS_NAME_MAX 64
/* The feed: GitHub's /releases/latest with its release notes is tens of KB. */
#define RS_FEED_MAX (1024 * 1024)
#define RS_URL_MAX 2048
/* A binary bigger than this is not ours (ours are a few MB). */
#define RS_BINARY_MAX ((uint64_t)512 * 1024 * 1024)

/* The files of a release, in the order they are replaced. The broker
 * (`mlxr`) is last, so an interrupted swap leaves the old broker, which
 * finishes the swap at its next start (rs_recover). */
#define RS_NFILES 3
extern const char *const rs_files[RS_NFILES]; /* "mlxr-worker", "mlxr-fetcher", "mlxr" */
#define RS_SUMS_NAME "SHA256SUMS"
#define RS_SIG_NAME "SHA256SUMS.sig"

/* ---- keys and signatures (release/minisign.c) ---- */
typedef struct {
	uint8_t id[RS_KEYID_BYTES]; /* minisign key number, little-endian */
	uint8_t pk[RS_PK_BYTES];
} rs_pubkey;

typedef struct {
	uint8_t id[RS_KEYID_BYTES];
	uint8_t sk[RS_SK_BYTES]; /* libsodium form: seed[32] || pk[32] */
} rs_seckey;

typedef struct {
	int prehashed;                 /* 1: "ED" (BLAKE2b-512 of the file); 0: "Ed" */
	uint8_t keyid[RS_KEYID_BYTES];
	uint8_t sig[RS_SIG_BYTES];
	char trusted[RS_TRUSTED_MAX + 1]; /* trusted comment, NUL-terminated */
	size_t trusted_len;
	uint8_t global_sig[RS_SIG_BYTES];
} rs_sig;

/* Key id as minisign prints it: 16 upper-case hex digits of the
 * little-endian number. buf >= 17 bytes. */
void rs_keyid_hex(const uint8_t id[RS_KEYID_BYTES], char buf[17]);

/* A public key: the whole minisign .pub file (comment line + base64 line)
 * or the base64 line alone (what `minisign -P` takes). */
int rs_pubkey_parse(const char *text, size_t len, rs_pubkey *out, char *err, size_t errlen);
/* The base64 line of a public key (56 chars + NUL). */
void rs_pubkey_base64(const rs_pubkey *k, char buf[57]);

/* A signature file (4 lines; "\r\n" accepted; nothing after line 4). The
 * trusted comment must be printable UTF-8 or tab (it is shown to users). */
int rs_sig_parse(const char *text, size_t len, rs_sig *out, char *err, size_t errlen);
/* Both signatures of s over msg with key k (whose id must equal s's).
 * 0 only when both verify. */
int rs_sig_verify(const rs_sig *s, const rs_pubkey *k, const uint8_t *msg, size_t len, char *err, size_t errlen);
/* Signs msg (pre-hashed "ED", like minisign >= 0.11) and writes the whole
 * signature file into out (NUL-terminated). 0, or -1 if cap is too small or
 * the comments are invalid. */
int rs_sign(const rs_seckey *sk, const uint8_t *msg, size_t len, const char *untrusted, const char *trusted,
	    char *out, size_t cap, char *err, size_t errlen);

/* Secret key files (unencrypted minisign form only: a key encrypted with a
 * password is refused with a message saying so). */
int rs_seckey_parse(const char *text, size_t len, rs_seckey *out, char *err, size_t errlen);
int rs_seckey_format(const rs_seckey *sk, char *out, size_t cap);
/* A fresh key pair with a random key id. */
void rs_keypair(rs_seckey *sk, rs_pubkey *pk);
void rs_seckey_pub(const rs_seckey *sk, rs_pubkey *pk);

/* ---- trusted keys compiled into this binary (release/keys.c) ---- */
/* The keys `mlxr upgrade` trusts (primary first, then backup). *names gets
 * "primary"/"backup" labels. The set comes from the file named by the make
 * variable RELEASE_KEYS (default release/trusted_keys.inc). */
const rs_pubkey *rs_trusted_keys(size_t *n);
const char *rs_trusted_key_label(size_t i);
/* The key of id among keys[0..n), or NULL; *idx gets its index. */
const rs_pubkey *rs_key_find(const rs_pubkey *keys, size_t n, const uint8_t id[RS_KEYID_BYTES], size_t *idx);

/* ---- versions and the trusted comment (release/meta.c) ---- */
typedef struct {
	uint32_t v[3]; /* major, minor, patch */
} rs_version;

/* "MAJOR.MINOR.PATCH": digits only, no leading zeros, each <= 999999. */
int rs_version_parse(const char *s, size_t n, rs_version *v);
int rs_version_cmp(const rs_version *a, const rs_version *b); /* <0, 0, >0 */
void rs_version_str(const rs_version *v, char buf[24]);

/* The trusted comment `make release` signs, tab-separated key:value pairs,
 * each exactly once, no others:
 *   timestamp:UNIX  file:SHA256SUMS  version:X.Y.Z  platform:P  expires:UNIX */
typedef struct {
	int64_t timestamp;
	int64_t expires;
	rs_version version;
	char platform[32];
} rs_meta;
int rs_meta_parse(const char *tc, size_t n, rs_meta *m, char *err, size_t errlen);
/* Writes the trusted comment for these values into buf. 0, or -1. */
int rs_meta_format(const rs_meta *m, char *buf, size_t cap);

/* ---- SHA256SUMS (release/sums.c) ---- */
typedef struct {
	char name[RS_NAME_MAX + 1];
	uint8_t sha256[32];
} rs_sum;
typedef struct {
	rs_sum e[RS_SUMS_MAX];
	size_t n;
} rs_sums;
/* sha256sum's output: each line "HEX64" SP (SP | '*') NAME LF; names are
 * [A-Za-z0-9._+-], at most RS_NAME_MAX, not starting with '.', each once. */
int rs_sums_parse(const char *buf, size_t len, rs_sums *out, char *err, size_t errlen);
const rs_sum *rs_sums_find(const rs_sums *s, const char *name);

/* ---- the release feed (release/feed.c) ---- */
/* GitHub's release object (GET {base}/latest): "tag_name" and "assets":
 * [{"name", "size", "browser_download_url"}]. Only the assets named in
 * RS_SUMS_NAME, RS_SIG_NAME and rs_files are kept; each at most once. */
typedef struct {
	char name[RS_NAME_MAX + 1];
	char url[RS_URL_MAX + 1]; /* https://, printable ASCII */
	uint64_t size;
} rs_asset;
#define RS_FEED_ASSETS (RS_NFILES + 2)
typedef struct {
	char tag[64];     /* printable ASCII */
	int have_version; /* tag parsed as [v]X.Y.Z */
	rs_version version;
	rs_asset assets[RS_FEED_ASSETS];
	size_t nassets;
} rs_feed;
int rs_feed_parse(const char *buf, size_t len, rs_feed *f, char *err, size_t errlen);
const rs_asset *rs_feed_asset(const rs_feed *f, const char *name);

/* ---- verification of a staged release (release/verify.c) ---- */
typedef struct {
	rs_meta meta;
	rs_sig sig;
	size_t key_index;  /* which trusted key signed */
	rs_sums sums;
	uint8_t sha256[RS_NFILES][32]; /* of rs_files[i], from the signed sums */
} rs_release;

/* Reads RS_SUMS_NAME and RS_SIG_NAME from dirfd, verifies the signature with
 * keys[0..n) and parses the trusted comment and the sums (every rs_files
 * name must be listed). Checks no version policy. */
int rs_verify_sums(int dirfd, const rs_pubkey *keys, size_t nkeys, rs_release *r, char *err, size_t errlen);
/* The policy: file is SHA256SUMS, platform equals ours, version > running
 * and >= floor (floor may be NULL: nothing accepted yet), now < expires. */
int rs_check_policy(const rs_release *r, const rs_version *running, const rs_version *floor, const char *platform,
		    int64_t now, char *err, size_t errlen);
/* Every rs_files[i] in dirfd is a regular file of at most RS_BINARY_MAX
 * bytes whose SHA-256 equals the signed one. */
int rs_verify_files(int dirfd, const rs_release *r, char *err, size_t errlen);
/* SHA-256 of an open file from offset 0 (streaming). *size gets its size. */
int rs_sha256_fd(int fd, uint8_t out[32], uint64_t *size, char *err, size_t errlen);

/* ---- accepted versions, per key id (release/state.c) ---- */
/* $MLXR_HOME/upgrade/accepted: lines "KEYID VERSION\n". A missing file is
 * empty; a malformed one is an error (never silently reset: that would
 * reopen rollback). rs_state_floor gives the highest version accepted under
 * any key (a backup key must not be a way back to an older release). */
#define RS_STATE_MAX 16
typedef struct {
	uint8_t id[RS_STATE_MAX][RS_KEYID_BYTES];
	rs_version v[RS_STATE_MAX];
	size_t n;
} rs_state;
int rs_state_load(const char *path, rs_state *s, char *err, size_t errlen);
int rs_state_parse(const char *buf, size_t len, rs_state *s, char *err, size_t errlen);
const rs_version *rs_state_floor(const rs_state *s);
/* Raises id's record to v (never lowers it) and writes the file atomically
 * (temporary + fsync + rename + directory fsync). */
int rs_state_record(const char *path, rs_state *s, const uint8_t id[RS_KEYID_BYTES], const rs_version *v, char *err,
		    size_t errlen);

/* ---- replacing the installed binaries (release/install.c) ----
 *
 * Crash consistency by journal, roll-forward: (1) each new file is written
 * to ".NAME.upgrade-new" in the install directory, fsynced, read back and
 * hashed; (2) the directory is fsynced and the journal
 * ".mlxr-upgrade.journal" (version, each name with its new and old SHA-256)
 * is written atomically — the commit point; (3) per file, NAME is hard-linked
 * to NAME.prev and the new file renamed over NAME; (4) directory fsync,
 * journal removed, directory fsync. A crash before (2) leaves the old files
 * untouched (the temporaries are removed by the next upgrade); a crash after
 * (2) is completed by rs_recover, which every `mlxr` start runs when a
 * journal exists: each name either already holds its new hash or its
 * temporary (with the new hash) is renamed over it. If a temporary is
 * missing or wrong (never by a crash; only by outside tampering), recovery
 * rolls the changed names back from NAME.prev instead. Both take an
 * exclusive flock on the install directory. */
int rs_install(int instfd, int srcfd, const rs_release *r, char *err, size_t errlen);
/* 0: nothing to do; 1: an interrupted upgrade was completed; 2: it was
 * rolled back; 3: another process holds the lock (left alone); -1: error. */
int rs_recover(int instfd, char *msg, size_t msglen);
/* Removes leftover temporaries when no journal exists (under the lock). */
void rs_clean_temps(int instfd);
/* The directory of the running executable. 0 or -1. */
int rs_self_dir(char *buf, size_t len);

/* Test builds only (make RELEASE_TEST=1): rs_hook(n) stops the process at
 * numbered points of rs_install when MLXR_UPGRADE_STOP_AT=n, so tests can
 * kill -9 it there; a no-op in other builds. */
void rs_hook(int n);

#endif
