#include "fuzz_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];
static char paths[8][128];

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", dir);
}

const char *fuzz_dir(void) {
    if (dir[0]) return dir;
    /* In memory where the machine has a tmpfs at /dev/shm: every execution writes its input
     * to a file and reads it back, and a disk-backed /tmp costs time per execution. */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/cifar10-fuzz.XXXXXX", base);
    if (!mkdtemp(dir)) abort();
    atexit(remove_dir);
    return dir;
}

const char *fuzz_file(int slot, const char *name, const uint8_t *data, size_t n) {
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(paths[slot], "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) abort();
    return paths[slot];
}

void fuzz_check_message(const char *msg) {
    int control = 0;
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++) control |= *c < 0x20 || *c == 0x7f;
    if (!msg[0] || control) {
        fprintf(stderr, "fuzz: error message not one line: '%s'\n", msg);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    const char *seeds = getenv("FUZZ_WRITE_SEEDS");
    if (seeds) {
        fuzz_write_seeds(seeds);
        exit(0);
    }
    return 0;
}

void fuzz_write_seed(const char *d, const char *name, const uint8_t *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write seed %s\n", p);
        exit(1);
    }
}
