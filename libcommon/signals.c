#include "signals.h"

#include "log.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t pending;

static void on_signal(int sig)
{
    if (pending) {
        static const char msg[] = ": second signal, stopping now without a checkpoint\n";
        const char *p = ds_prog();
        ssize_t r = write(2, p, strlen(p));
        r = write(2, msg, sizeof msg - 1);
        (void)r;
        _exit(128 + sig);
    }
    pending = sig;
}

int ds_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SIGHUP: a closed terminal or ssh session stops the run as SIGTERM does, with a checkpoint */
    if (sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL) || sigaction(SIGHUP, &sa, NULL))
        return ds_err("cannot install signal handlers: %s", strerror(errno));
    /* A reader of stderr that went away (`| head`, a dead tee) ends the printing, not the
     * run: writes then fail with EPIPE, which the messages ignore. */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int ds_signals_pending(void) { return pending; }
