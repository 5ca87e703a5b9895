/* rng.h - the unit tests' deterministic random numbers (splitmix64): the
 * same sequence on every run and machine, so a failing case reproduces.
 * Each test file that includes it has its own state; rng_state may be
 * reset to RNG_SEED to replay a sequence. */
#ifndef TEST_RNG_H
#define TEST_RNG_H

#include <stdint.h>

#define RNG_SEED 0x9e3779b97f4a7c15ull

static uint64_t rng_state = RNG_SEED;

static inline uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif
