/* The monotonic clock the server's timed waits use (pthread condition variables are set to
 * CLOCK_MONOTONIC where they wait with a timeout, so wall-clock jumps never end a wait). */
#ifndef QVL_ENGINE_CLOCK_H
#define QVL_ENGINE_CLOCK_H

#include <time.h>

/* The monotonic time `ms` milliseconds from now, as pthread_cond_timedwait takes it. */
static inline struct timespec qvl_monotonic_in_ms(int ms) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

#endif
