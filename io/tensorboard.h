/* A run's scalars as TensorBoard event files, written by rank 0 of cifar10-train beside (not
 * instead of) the metrics file, for TensorBoard reading the run's directory while it grows.
 *
 * The file format is TensorFlow's: TFRecord framing (uint64 length, masked CRC-32C of the length,
 * the data, masked CRC-32C of the data; little-endian) around `Event` protocol buffers
 * (tensorflow/core/util/event.proto): the first gives file_version "brain.Event:2"; then one
 * SessionLog START; then summaries of simple_value scalars and one text summary (the text
 * plugin's string tensor) with the run's settings.
 *
 * Each open writes a new file, events.out.tfevents.SECONDS.HOST.PID, in DIR (created if missing).
 * Its SessionLog START carries the first step this process logs (0 on a fresh start, the
 * checkpoint's global step + 1 on a resume), and TensorBoard drops every point it has read at or
 * past that step: on a resume, what the killed run logged past its checkpoint; on a fresh start,
 * whatever an earlier run left in the directory.
 *
 * Scalars, at the global step (optimizer steps done) of the record:
 *   train/loss, train/learning_rate, train/images_per_s          per logged step
 *   epoch/epoch, epoch/train_loss, epoch/train_accuracy,
 *   epoch/test_accuracy (when measured), epoch/images_per_s      per epoch
 *   final/test_accuracy                                          after the final (TTA) score
 * Records are flushed when written; epoch and final records are also fsynced. */
#ifndef IO_TENSORBOARD_H
#define IO_TENSORBOARD_H

#include "../common/err.h"
#include "metrics.h"

#include <stdio.h>

struct tensorboard {
    FILE *f; /* NULL: off, closed, or stopped after a write error */
    char *path;
};

/* Creates DIR if needed and a new event file in it; writes the file version, the START at
 * `first_step` and the text `settings` (markdown) at that step. Returns 0, or -1 with
 * "PATH: what is wrong" in e. */
int tensorboard_open(struct tensorboard *tb, const char *dir, long first_step, const char *settings,
                     struct err *e);

/* Append the scalars of one record. On a write error: -1 with e set, and the file is closed
 * (later calls do nothing): a full disk costs the event file, not the training. */
int tensorboard_step(struct tensorboard *tb, const struct metrics_step *r, struct err *e);
int tensorboard_epoch(struct tensorboard *tb, const struct metrics_epoch *r, struct err *e);
int tensorboard_final(struct tensorboard *tb, long global_step, double test_accuracy, struct err *e);

void tensorboard_close(struct tensorboard *tb);

#endif
