/* SIGINT for qvl run (run_interrupt.h). The handler only sets a flag the decoding loop reads
 * per token, or, on the second press, calls _exit (async-signal-safe; stdio buffers are not
 * flushed, which a user pressing twice does not wait for). */
#define _POSIX_C_SOURCE 200809L

#include "run_interrupt.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t pressed;

static void on_sigint(int sig) {
    (void)sig;
    if (pressed) _exit(RUN_EXIT_INTERRUPTED);
    pressed = 1;
}

void run_interrupt_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
}

bool run_interrupted(void *user) {
    (void)user;
    return pressed != 0;
}
