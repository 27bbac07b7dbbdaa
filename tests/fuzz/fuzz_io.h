/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c): the readers under test take paths, so
 * each input goes to a file in a private temporary directory first. */
#ifndef TESTS_FUZZ_IO_H
#define TESTS_FUZZ_IO_H

#include <stddef.h>
#include <stdint.h>

/* The private directory (created on first use, removed at exit). */
const char *fuzz_dir(void);
/* Writes n bytes to DIR/name and returns that path (a static buffer per name slot 0..7). */
const char *fuzz_file(int slot, const char *name, const uint8_t *data, size_t n);
/* Aborts (a crash libFuzzer reports, with the input) when an error message is not one
 * non-empty line. */
void fuzz_check_message(const char *msg);
/* Writes one seed file DIR/name. */
void fuzz_write_seed(const char *dir, const char *name, const uint8_t *data, size_t n);

/* Each target defines these. fuzz_init runs once before any input (LLVMFuzzerInitialize, in
 * fuzz_io.c); then, with FUZZ_WRITE_SEEDS=DIR in the environment, fuzz_write_seeds writes the
 * target's seed corpus into DIR and the program exits. */
void fuzz_init(void);
void fuzz_write_seeds(const char *dir);

#endif
