#include "rng.h"

/* splitmix64's output function: a strong 64-bit mixer (Steele, Lea, Flood 2014). */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

struct rng rng_make(uint64_t seed, enum rng_domain domain, uint64_t a, uint64_t b) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ (uint64_t)domain);
    h = mix64(h ^ a);
    h = mix64(h ^ b);
    return (struct rng){.state = h};
}

uint64_t rng_u64(struct rng *r) {
    r->state += 0x9e3779b97f4a7c15ULL;
    return mix64(r->state);
}

uint32_t rng_below(struct rng *r, uint32_t n) {
    /* Lemire's multiply-shift with rejection of the biased low range. */
    uint64_t m = (rng_u64(r) >> 32) * (uint64_t)n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (low < threshold) {
            m = (rng_u64(r) >> 32) * (uint64_t)n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

double rng_uniform(struct rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }
