/* A byte counter under a mutex, and a condition variable for those waiting for room. */
#define _POSIX_C_SOURCE 200809L

#include "serve_budget.h"

#include <time.h>

#include "qvl/engine_clock.h"

bool serve_budget_init(serve_budget *b, int64_t cap_bytes) {
    b->cap = cap_bytes;
    b->used = 0;
    b->waiting = 0;
    b->closed = false;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return false;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* timed waits immune to clock changes */
    bool ok = pthread_mutex_init(&b->mu, NULL) == 0;
    if (ok && pthread_cond_init(&b->cv, &ca) != 0) {
        pthread_mutex_destroy(&b->mu);
        ok = false;
    }
    pthread_condattr_destroy(&ca);
    return ok;
}

void serve_budget_destroy(serve_budget *b) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

serve_budget_result serve_budget_reserve(serve_budget *b, int64_t bytes, bool (*give_up)(void *),
                                         void *arg, int poll_ms) {
    if (bytes > b->cap) return SERVE_BUDGET_TOO_LARGE;
    pthread_mutex_lock(&b->mu);
    serve_budget_result rc = SERVE_BUDGET_OK;
    bool counted = false; /* in b->waiting */
    for (;;) {
        if (b->closed) {
            rc = SERVE_BUDGET_CLOSED;
            break;
        }
        if (b->used + bytes <= b->cap) break;
        if (!counted) {
            b->waiting++;
            counted = true;
        }
        /* give_up looks at a socket and may take other locks: asked without ours. */
        if (give_up) {
            pthread_mutex_unlock(&b->mu);
            const bool stop = give_up(arg);
            pthread_mutex_lock(&b->mu);
            if (stop) {
                rc = SERVE_BUDGET_GAVE_UP;
                break;
            }
            if (b->closed || b->used + bytes <= b->cap) continue; /* changed meanwhile */
        }
        struct timespec until = qvl_monotonic_in_ms(poll_ms);
        pthread_cond_timedwait(&b->cv, &b->mu, &until);
    }
    if (counted) b->waiting--;
    if (rc == SERVE_BUDGET_OK) b->used += bytes;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void serve_budget_release(serve_budget *b, int64_t bytes) {
    if (bytes <= 0) return;
    pthread_mutex_lock(&b->mu);
    b->used -= bytes;
    if (b->used < 0) b->used = 0; /* cannot happen with matched calls; never go negative */
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void serve_budget_close(serve_budget *b) {
    pthread_mutex_lock(&b->mu);
    b->closed = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

bool serve_budget_closed(serve_budget *b) {
    pthread_mutex_lock(&b->mu);
    bool closed = b->closed;
    pthread_mutex_unlock(&b->mu);
    return closed;
}

void serve_budget_usage(serve_budget *b, int64_t *used, int *waiting) {
    pthread_mutex_lock(&b->mu);
    *used = b->used;
    *waiting = b->waiting;
    pthread_mutex_unlock(&b->mu);
}
