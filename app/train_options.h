/* cifar10-train's command line: its usage text (the recipes' defaults printed from their tables,
 * config_print_recipes) and the parsing of its flags into a struct train_config. */
#ifndef APP_TRAIN_OPTIONS_H
#define APP_TRAIN_OPTIONS_H

#include "../common/err.h"
#include "../model/config.h"

/* Fills c from argv: the recipe of --model (the last one given), then every other flag over it.
 * Returns 0, or an exit status: 2 with the one-line reason in e (a bad flag or value, no DATA),
 * or -1 for --help and --version (printed by rank 0 only). */
int train_options_parse(int argc, char **argv, struct train_config *c, int rank, struct err *e);

#endif
