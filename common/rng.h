/* Deterministic random numbers. Everything random in training is a pure function of
 * (seed, purpose, epoch, index), so results never depend on the rank count, on which rank
 * handles an image, or on how far a resumed run got before it was killed. */
#ifndef COMMON_RNG_H
#define COMMON_RNG_H

#include <stdint.h>

/* Domain tags keep streams for different purposes independent. */
enum rng_domain { RNG_INIT = 1, RNG_PERMUTE = 2, RNG_AUGMENT = 3, RNG_RUN_ID = 4, RNG_FLIP = 5 };

struct rng {
    uint64_t state; /* splitmix64 counter */
};

/* A stream keyed by (seed, domain, a, b). */
struct rng rng_make(uint64_t seed, enum rng_domain domain, uint64_t a, uint64_t b);
uint64_t rng_u64(struct rng *r);
/* Uniform integer in [0, n), n >= 1, without modulo bias. */
uint32_t rng_below(struct rng *r, uint32_t n);
/* Uniform double in [0, 1) with 53 random bits. */
double rng_uniform(struct rng *r);

#endif
