/* fuzz/feed_fuzzer.c — release/feed.c rs_feed_parse (the release feed
 * JSON, GitHub's release object) on arbitrary bytes.
 *
 * Checked (release.h contract): no memory error, leak or UB; an accepted
 * feed has a printable-ASCII tag; at most RS_FEED_ASSETS assets, each one of
 * SHA256SUMS, SHA256SUMS.sig, mlxr, mlxr-worker, mlxr-fetcher, each once,
 * with an https:// URL of printable ASCII without spaces and a size of at
 * most RS_BINARY_MAX; have_version only when the tag is [v]X.Y.Z. */
#include <string.h>

#include "fuzz/fuzz.h"
#include "release/release.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static rs_feed f;

static int ours(const char *n)
{
	if (!strcmp(n, RS_SUMS_NAME) || !strcmp(n, RS_SIG_NAME))
		return 1;
	for (int i = 0; i < RS_NFILES; i++)
		if (!strcmp(n, rs_files[i]))
			return 1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	char err[256];
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (rs_feed_parse(buf, size, &f, err, sizeof err) == 0) {
		size_t tl = strlen(f.tag);
		FUZZ_CHECK(tl >= 1 && tl < sizeof f.tag, "tag");
		for (size_t i = 0; i < tl; i++)
			FUZZ_CHECK(f.tag[i] > ' ' && f.tag[i] < 0x7f, "tag char");
		if (f.have_version) {
			const char *v = f.tag[0] == 'v' ? f.tag + 1 : f.tag;
			rs_version x;
			FUZZ_CHECK(rs_version_parse(v, strlen(v), &x) == 0 && !rs_version_cmp(&x, &f.version), "version");
		}
		FUZZ_CHECK(f.nassets <= RS_FEED_ASSETS, "nassets");
		for (size_t i = 0; i < f.nassets; i++) {
			const rs_asset *a = &f.assets[i];
			FUZZ_CHECK(ours(a->name), "asset name %s", a->name);
			for (size_t j = 0; j < i; j++)
				FUZZ_CHECK(strcmp(a->name, f.assets[j].name), "duplicate asset");
			FUZZ_CHECK(!strncmp(a->url, "https://", 8), "url scheme");
			for (const char *p = a->url; *p; p++)
				FUZZ_CHECK(*p > ' ' && *p < 0x7f, "url char");
			FUZZ_CHECK(a->size <= RS_BINARY_MAX, "size");
		}
	}
	free(buf);
	return 0;
}
