/* signals: a graceful stop on SIGINT, SIGTERM and SIGHUP (SIGPIPE ignored).
 *
 * The first signal only sets a flag: the training loop finishes its step, writes a
 * checkpoint and exits with a message. A second signal ends the process at once (exit
 * status 128 + signal, as a shell reports a killed process). */
#ifndef DS_SIGNALS_H
#define DS_SIGNALS_H

/* Installs the handlers. */
int ds_signals_install(void);
/* The signal that asked to stop (SIGINT, SIGTERM, SIGHUP), or 0. */
int ds_signals_pending(void);

#endif
