/* The job hand-off: a mutex, a condition variable and a growing text buffer. */
#define _POSIX_C_SOURCE 200809L

#include "serve_job.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_clock.h"

serve_job *serve_job_create(serve_request *req, int32_t *ids, uint64_t *keys,
                            serve_prefix_image *images, int64_t n_ids) {
    serve_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* timed waits immune to clock changes */
    if (pthread_mutex_init(&j->mu, NULL) != 0) {
        pthread_condattr_destroy(&ca);
        free(j);
        return NULL;
    }
    if (pthread_cond_init(&j->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&j->mu);
        free(j);
        return NULL;
    }
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->req = req;
    j->ids = ids;
    j->keys = keys;
    j->images = images;
    j->n_ids = n_ids;
    atomic_init(&j->cancel, false);
    return j;
}

double serve_job_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool serve_job_expired(const serve_job *j) {
    return j->deadline > 0 && serve_job_now() >= j->deadline;
}

void serve_job_retain(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void serve_job_release(serve_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    serve_request_free(j->req);
    free(j->ids);
    free(j->keys);
    free(j->images);
    free(j->text);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

bool serve_job_append(serve_job *j, const char *text, size_t n) {
    pthread_mutex_lock(&j->mu);
    bool ok = true;
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1) cap *= 2;
        char *grown = realloc(j->text, cap);
        if (grown) {
            j->text = grown;
            j->cap = cap;
        } else {
            ok = false;
        }
    }
    if (ok) {
        memcpy(j->text + j->len, text, n);
        j->len += n;
        j->text[j->len] = '\0';
    }
    pthread_mutex_unlock(&j->mu);
    return ok;
}

void serve_job_set_visible(serve_job *j, size_t visible) {
    pthread_mutex_lock(&j->mu);
    if (visible > j->visible && visible <= j->len) {
        j->visible = visible;
        if (j->text_waiters > 0) pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
}

void serve_job_set_started(serve_job *j, int64_t cached_tokens) {
    pthread_mutex_lock(&j->mu);
    j->started = true;
    j->cached_tokens = cached_tokens;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void serve_job_truncate(serve_job *j, size_t len) {
    pthread_mutex_lock(&j->mu);
    if (len < j->len) {
        j->len = len;
        j->text[len] = '\0';
    }
    if (j->visible > j->len) j->visible = j->len;
    pthread_mutex_unlock(&j->mu);
}

void serve_job_finish(serve_job *j, serve_finish how, const char *error) {
    pthread_mutex_lock(&j->mu);
    if (j->finish == SERVE_RUNNING) {
        j->finish = how;
        /* Whatever is held back for a stop string that never came is final now. */
        if (how == SERVE_FINISH_STOP || how == SERVE_FINISH_LENGTH) j->visible = j->len;
        if (error) {
            strncpy(j->error, error, sizeof j->error - 1);
            j->error[sizeof j->error - 1] = '\0';
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static bool awaited(const serve_job *j, serve_wait_for what, size_t seen) {
    if (j->finish != SERVE_RUNNING) return true;
    switch (what) {
    case SERVE_WAIT_START: return j->started;
    case SERVE_WAIT_TEXT: return j->visible > seen;
    case SERVE_WAIT_FINISH: break;
    }
    return false;
}

void serve_job_wait(serve_job *j, serve_wait_for what, size_t seen, int timeout_ms) {
    const struct timespec until = serve_monotonic_in_ms(timeout_ms);
    pthread_mutex_lock(&j->mu);
    if (what == SERVE_WAIT_TEXT) j->text_waiters++;
    while (!awaited(j, what, seen)) {
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT) break;
    }
    if (what == SERVE_WAIT_TEXT) j->text_waiters--;
    pthread_mutex_unlock(&j->mu);
}
