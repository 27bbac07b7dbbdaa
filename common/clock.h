/* Monotonic wall-clock time, for timing code (benchmarks, per-layer profiles). */
#ifndef COMMON_CLOCK_H
#define COMMON_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC): only differences mean anything. */
double clock_seconds(void);

#endif
