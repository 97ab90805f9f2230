/* testhook: knobs the test suite turns through the environment, so that a property that
 * depends on timing (an input pipeline slower than the network, a signal that lands while a
 * run is still going) holds by construction on any machine, under any load.
 *
 * As git's GIT_TEST_* variables, they are read by the tools users run, not by a special
 * build: the tests exercise the very binaries that ship. Unset, each is off and costs a
 * branch. Every variable named DS_TESTHOOK_* is read once, at option parsing (ds_cli_parse):
 * an unknown name or a malformed value is an error before any work starts, and each one set
 * is announced as a warning, so nobody runs under one unawares. (DS_TEST_* names belong to
 * the test scripts, which the tools never read.)
 *
 *   DS_TESTHOOK_READ_DELAY_MS=N     every image a loader worker reads (dstrain, dseval) takes
 *                                   N ms longer (0-10000), and no batch is read ahead: the
 *                                   training loop waits at least batch x N ms for each one
 *   DS_TESTHOOK_PAUSE_AFTER_STEP=N  dstrain: once global step N is done (logged, its
 *                                   checkpoint and epoch end written when due), wait for
 *                                   SIGINT or SIGTERM, then stop as for that signal
 *   DS_TESTHOOK_PAUSE_BEFORE_EXIT=1 dstrain or dspack, its work done and written, waits for a
 *                                   signal before it exits (a kill then always finds it alive)
 *   DS_TESTHOOK_NAN_VAL_EPOCH=N     dstrain: the validation after epoch N scores each rank's first
 *                                   image from NaN logits, as a model gone non-finite would give */
#ifndef DS_TESTHOOK_H
#define DS_TESTHOOK_H

#include <stdint.h>

typedef struct {
    int64_t read_delay_ms;     /* DS_TESTHOOK_READ_DELAY_MS (0-10000); 0: off */
    int64_t pause_after_step;  /* DS_TESTHOOK_PAUSE_AFTER_STEP; 0: off */
    int64_t pause_before_exit; /* DS_TESTHOOK_PAUSE_BEFORE_EXIT (0 or 1); 0: off */
    int64_t nan_val_epoch;     /* DS_TESTHOOK_NAN_VAL_EPOCH; 0: off */
} ds_test_hooks;

/* Reads every DS_TESTHOOK_* variable (once; later calls return the first answer): 0, or -1 with a
 * message naming the variable. Announces each hook that is set. */
int ds_test_hooks_init(void);
/* The hooks in effect (all off until ds_test_hooks_init has succeeded). */
const ds_test_hooks *ds_test_hooks_get(void);
/* Says "test hook: <what>; waiting for a signal" and returns once SIGINT or SIGTERM has
 * arrived (ds_signals_install's flag), or is ended by the signal where no handler is set. */
void ds_test_pause(const char *what);

#endif
