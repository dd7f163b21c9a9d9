/* The job hand-off: a mutex, a condition variable and a growing text buffer. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/engine_job.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl/engine_clock.h"

qvl_job *qvl_job_create(qvl_engine_request *req, int32_t *ids, uint64_t *keys,
                            qvl_prefix_image *images, int64_t n_ids) {
    qvl_job *j = calloc(1, sizeof *j);
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

double qvl_job_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool qvl_job_expired(const qvl_job *j) {
    return j->deadline > 0 && qvl_job_now() >= j->deadline;
}

void qvl_job_retain(qvl_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void qvl_job_release(qvl_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    qvl_engine_request_free(j->req);
    free(j->ids);
    free(j->keys);
    free(j->images);
    free(j->text);
    free(j->tokens);
    free(j->prompt_logits);
    free(j->logprobs);
    qvl_grammar_free(j->grammar);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

bool qvl_job_append(qvl_job *j, const char *text, size_t n) {
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

bool qvl_job_add_logprob(qvl_job *j, const qvl_token_logprob *lp) {
    pthread_mutex_lock(&j->mu);
    bool ok = true;
    if (j->n_logprobs == j->cap_logprobs) {
        size_t cap = j->cap_logprobs ? 2 * j->cap_logprobs : 64;
        qvl_token_logprob *grown = realloc(j->logprobs, cap * sizeof *grown);
        if (grown) {
            j->logprobs = grown;
            j->cap_logprobs = cap;
        } else {
            ok = false;
        }
    }
    if (ok) j->logprobs[j->n_logprobs++] = *lp;
    pthread_mutex_unlock(&j->mu);
    return ok;
}

void qvl_job_set_visible(qvl_job *j, size_t visible) {
    pthread_mutex_lock(&j->mu);
    if (visible > j->visible && visible <= j->len) {
        j->visible = visible;
        if (j->text_waiters > 0) pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
}

void qvl_job_set_started(qvl_job *j, int64_t cached_tokens, double prefill_seconds) {
    pthread_mutex_lock(&j->mu);
    j->started = true;
    j->cached_tokens = cached_tokens;
    j->prefill_seconds = prefill_seconds;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void qvl_job_truncate(qvl_job *j, size_t len) {
    pthread_mutex_lock(&j->mu);
    if (len < j->len) {
        j->len = len;
        j->text[len] = '\0';
    }
    if (j->visible > j->len) j->visible = j->len;
    pthread_mutex_unlock(&j->mu);
}

void qvl_job_finish(qvl_job *j, qvl_finish how, const char *error) {
    pthread_mutex_lock(&j->mu);
    if (j->finish == QVL_JOB_RUNNING) {
        j->finish = how;
        /* Whatever is held back for a stop string that never came is final now. */
        if (how == QVL_FINISH_STOP || how == QVL_FINISH_LENGTH) j->visible = j->len;
        if (error) {
            strncpy(j->error, error, sizeof j->error - 1);
            j->error[sizeof j->error - 1] = '\0';
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static bool awaited(const qvl_job *j, qvl_job_wait_for what, size_t seen) {
    if (j->finish != QVL_JOB_RUNNING) return true;
    switch (what) {
    case QVL_WAIT_START: return j->started;
    case QVL_WAIT_TEXT: return j->visible > seen;
    case QVL_WAIT_FINISH: break;
    }
    return false;
}

void qvl_job_wait(qvl_job *j, qvl_job_wait_for what, size_t seen, int timeout_ms) {
    const struct timespec until = qvl_monotonic_in_ms(timeout_ms);
    pthread_mutex_lock(&j->mu);
    if (what == QVL_WAIT_TEXT) j->text_waiters++;
    while (!awaited(j, what, seen)) {
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT) break;
    }
    if (what == QVL_WAIT_TEXT) j->text_waiters--;
    pthread_mutex_unlock(&j->mu);
}

void qvl_engine_request_free(qvl_engine_request *r) {
    if (!r) return;
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_pictures; i++) qvl_picture_free(&r->pictures[i]);
    free(r->pictures);
    for (size_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    free(r->grammar);
    free(r->grammar_trigger);
    free(r->bias);
    free(r);
}
