/* release/keys.c — the public keys `mlxr upgrade` trusts, compiled in.
 *
 * They come from one source file, release/trusted_keys.inc by default
 * (written by mlxr-keygen), one RS_TRUSTED_KEY(label, base64) line per key:
 * the primary key first, then the backup. A test build names another file
 * with the make variable RELEASE_KEYS; there is deliberately no flag or
 * environment variable that changes the keys of a built binary. */
#include <stddef.h>

#include "release/release.h"

#ifndef MLXR_RELEASE_KEYS
#define MLXR_RELEASE_KEYS "release/trusted_keys.inc"
#endif

#define RS_TRUSTED_KEY(label, b64) { label, b64 },
static const struct {
	const char *label;
	const char *b64; /* minisign public key line, as `minisign -P` takes it */
} key_src[] = {
#include MLXR_RELEASE_KEYS
};
#undef RS_TRUSTED_KEY

#define NKEYS (sizeof key_src / sizeof key_src[0])
static rs_pubkey keys[NKEYS];
static int parsed; /* 0: not yet; 1: ok; -1: a compiled-in key is malformed */

const rs_pubkey *rs_trusted_keys(size_t *n)
{
	if (!parsed) {
		parsed = 1;
		for (size_t i = 0; i < NKEYS; i++) {
			const char *s = key_src[i].b64;
			size_t len = 0;
			while (s[len])
				len++;
			if (rs_pubkey_parse(s, len, &keys[i], NULL, 0) < 0)
				parsed = -1;
		}
	}
	*n = parsed == 1 ? NKEYS : 0;
	return parsed == 1 ? keys : NULL;
}

const char *rs_trusted_key_label(size_t i)
{
	return i < NKEYS ? key_src[i].label : "?";
}
