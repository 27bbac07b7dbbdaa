/* libFuzzer target: model and checkpoint files (io/safetensors.c, io/json.c,
 * io/checkpoint.c) on hostile input: the input is the file. It is read as a checkpoint of the
 * tests' small network (momentum, lookahead averages, per-rank running statistics, the
 * mid-epoch position), as a model file, for its network name and its input metadata; a file
 * that reads is then checked against the default settings (the resume check). Every call must
 * return its result or one line of error; never a crash, a sanitizer report or a multi-line
 * message. Seeds (FUZZ_WRITE_SEEDS=DIR): a mid-epoch checkpoint of 2 ranks and a model file. */
#include "../../io/checkpoint.h"
#include "../../model/config.h"
#include "../test_nets.h"
#include "fuzz_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct model M;

void fuzz_write_seeds(const char *dir) {
    struct model_state s = checkpoint_state_alloc(&M, STATE_MOMENTUM | STATE_LOOKAHEAD);
    model_get_state(&M, s.params, s.momentum, s.buffers);
    model_get_state(&M, s.ema_params, NULL, s.ema_buffers);
    s.ranks = 2;
    s.rank_buffers = calloc(2 * M.nbuffers + 1, sizeof(float));
    s.rank_ema_buffers = calloc(2 * M.nbuffers + 1, sizeof(float));
    struct train_config c;
    config_defaults(&c);
    struct strbuf cfg = {0};
    config_to_json(&c, &cfg);
    struct run_info info = {.kind = "checkpoint",
                            .run_id = "seed",
                            .epochs_completed = 1,
                            .global_step = 9,
                            .step_in_epoch = 3,
                            .steps_per_epoch = 6,
                            .epoch_loss = 1.5,
                            .epoch_correct = 7};
    snprintf(info.config, sizeof info.config, "%s", cfg.s);
    char p[512];
    struct err e;
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir);
    if (checkpoint_write(p, &M, &s, &info, &e) != 0) abort();
    snprintf(info.kind, sizeof info.kind, "model");
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (checkpoint_write(p, &M, &s, &info, &e) != 0) abort();
    strbuf_free(&cfg);
    checkpoint_state_free(&s);
}

void fuzz_init(void) {
    model_init(&M, &test_net, kernels_cpu(), 1, 1);
    model_lookahead_init(&M);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "file.safetensors", data, size);
    struct err e = {""};
    struct run_info info;
    struct model_state s = checkpoint_state_alloc(&M, STATE_MOMENTUM | STATE_LOOKAHEAD);
    if (checkpoint_read(path, &M, &s, &info, &e) == 0) {
        struct train_config c;
        config_defaults(&c);
        if (config_compare(&c, info.config, &e) != 0) fuzz_check_message(e.msg);
    } else {
        fuzz_check_message(e.msg);
    }
    checkpoint_state_free(&s);
    struct model_state m = checkpoint_state_alloc(&M, 0);
    if (checkpoint_read(path, &M, &m, &info, &e) != 0) fuzz_check_message(e.msg);
    checkpoint_state_free(&m);
    if (!checkpoint_net(path, &e)) fuzz_check_message(e.msg);
    if (checkpoint_check_input(path, &e) != 0) fuzz_check_message(e.msg);
    return 0;
}
