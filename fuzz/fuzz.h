/* fuzz/fuzz.h — shared by the libFuzzer harnesses (fuzz/<target>_fuzzer.c).
 *
 * Each harness calls the production function on the fuzzed bytes and, where
 * the contract promises something checkable, checks it with FUZZ_CHECK:
 * a broken promise aborts, so libFuzzer records the input as a crash just as
 * it does a sanitizer report. Harnesses never print on the normal path. */
#ifndef MLXR_FUZZ_H
#define MLXR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond, ...)                                                     \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s: ", __FILE__, \
				__LINE__, #cond);                                 \
			fprintf(stderr, __VA_ARGS__);                             \
			fprintf(stderr, "\n");                                    \
			abort();                                                  \
		}                                                                 \
	} while (0)

/* Directory holding fuzz/ (seed tokenizers, templates): compiled in by the
 * Makefile, overridable at run time with MLXR_FUZZ_DIR. */
#ifndef MLXR_FUZZ_DIR
#define MLXR_FUZZ_DIR "fuzz"
#endif

static inline const char *fuzz_dir(void)
{
	const char *d = getenv("MLXR_FUZZ_DIR");
	return d && *d ? d : MLXR_FUZZ_DIR;
}

/* Reads a whole small file into a malloc'd NUL-terminated buffer; aborts
 * when missing (a harness without its fixed inputs would fuzz nothing). */
static inline char *fuzz_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "fuzz: cannot open %s (set MLXR_FUZZ_DIR to the repository's fuzz/)\n", path);
		abort();
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
		abort();
	fclose(f);
	b[n] = 0;
	*len = (size_t)n;
	return b;
}

#endif
