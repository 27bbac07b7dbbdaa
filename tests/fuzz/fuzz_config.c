/* libFuzzer target: the resume check (config_compare in model/config.c, over io/json.c) on a
 * hostile settings record, as a checkpoint's "config" metadata would hold it: the input is the
 * JSON text. It is compared with both recipes' defaults; each comparison must match or name one
 * difference on one line; never a crash or a sanitizer report. Seeds (FUZZ_WRITE_SEEDS=DIR):
 * both recipes' own records. */
#include "../../model/config.h"
#include "fuzz_io.h"

#include <stdlib.h>
#include <string.h>

void fuzz_write_seeds(const char *dir) {
    const char *models[] = {"airbench94", "workshop-cnn"};
    for (int i = 0; i < 2; i++) {
        struct train_config c;
        config_defaults(&c);
        config_recipe(&c, models[i]);
        struct strbuf b = {0};
        config_to_json(&c, &b);
        fuzz_write_seed(dir, models[i], (const uint8_t *)b.s, b.len);
        strbuf_free(&b);
    }
}

void fuzz_init(void) {}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0; /* the metadata value is a C string */
    const char *models[] = {"airbench94", "workshop-cnn"};
    for (int i = 0; i < 2; i++) {
        struct train_config c;
        config_defaults(&c);
        config_recipe(&c, models[i]);
        struct err e = {""};
        if (config_compare(&c, text, &e) != 0) fuzz_check_message(e.msg);
    }
    free(text);
    return 0;
}
