/* tests/test_rng.h — the tests' pseudo-random numbers: Marsaglia's
 * xorshift64 (shifts 13, 7, 17), one step of a state the caller owns.
 * Each test keeps its own seed and takes its own bits of the result, so
 * the sequences its expectations were written against stay the same.
 * Reproducible by design: nothing here is for secrets. */
#ifndef MLXR_TEST_RNG_H
#define MLXR_TEST_RNG_H

#include <stdint.h>

/* Advances *s (MUST be non-zero: 0 stays 0) and returns the new state. */
static inline uint64_t test_xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

#endif
