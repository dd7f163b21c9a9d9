/* Progress line and timings summary for qvl run/chat (run_progress.h). */
#define _POSIX_C_SOURCE 200809L

#include "run_progress.h"
#include "memory_report.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "qvl/registry.h"

/* Redraw period: often enough to look alive, rarely enough to cost nothing. */
#define REDRAW_NS 250000000L

struct run_progress {
    bool enabled;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_running; /* a ticker exists for the current step */
    bool stop;
    bool shown; /* a line is on the screen */
    char label[160];
    double t0;
};

double run_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

run_progress *run_progress_create(bool enabled) {
    run_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->enabled = enabled;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    return p;
}

bool run_progress_on(const run_progress *p) { return p && p->enabled; }

/* Called with mu held. "\r" + erase-line keeps it on one terminal line. */
static void draw(const run_progress *p) {
    fprintf(stderr, "\r\033[K%s ... %.1f s", p->label, run_now_seconds() - p->t0);
    fflush(stderr);
}

static void *ticker(void *arg) {
    run_progress *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += REDRAW_NS;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (!p->stop) draw(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void run_progress_end(run_progress *p) {
    if (!run_progress_on(p)) return;
    pthread_mutex_lock(&p->mu);
    bool running = p->thread_running, shown = p->shown;
    p->stop = true;
    p->shown = false;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (running) pthread_join(p->thread, NULL);
    p->thread_running = false;
    if (!shown) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

void run_progress_begin(run_progress *p, const char *fmt, ...) {
    if (!run_progress_on(p)) return;
    run_progress_end(p);
    pthread_mutex_lock(&p->mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->label, sizeof p->label, fmt, ap);
    va_end(ap);
    p->t0 = run_now_seconds();
    p->stop = false;
    draw(p); /* at once: a short step still says what it is doing */
    p->shown = true;
    p->thread_running = pthread_create(&p->thread, NULL, ticker, p) == 0;
    pthread_mutex_unlock(&p->mu);
}

/* The label of the step shown; drawn at once, or (now false) at the next redraw. */
static void relabel(run_progress *p, bool now, const char *fmt, va_list ap) {
    pthread_mutex_lock(&p->mu);
    vsnprintf(p->label, sizeof p->label, fmt, ap);
    if (now) draw(p);
    pthread_mutex_unlock(&p->mu);
}

void run_progress_update(run_progress *p, const char *fmt, ...) {
    if (!run_progress_on(p)) return;
    va_list ap;
    va_start(ap, fmt);
    relabel(p, true, fmt, ap);
    va_end(ap);
}

void run_progress_note(run_progress *p, const char *fmt, ...) {
    if (!run_progress_on(p)) return;
    va_list ap;
    va_start(ap, fmt);
    relabel(p, false, fmt, ap);
    va_end(ap);
}

void run_progress_free(run_progress *p) {
    if (!p) return;
    run_progress_end(p);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---- summary ----------------------------------------------------------------------------- */

static double rate(double n, double s) { return s > 0 ? n / s : 0.0; }

void run_timings_print(const run_timings *t, const qvl_model *m) {
    const qvl_loaded_backend *lb = m ? qvl_model_backend(m) : NULL;
    qvl_device_info info;
    memset(&info, 0, sizeof info);
    info.host_memory = true;
    if (lb && (!lb->iface->describe || lb->iface->describe(lb->be, &info) != QVL_OK)) {
        memset(&info, 0, sizeof info);
        info.host_memory = true;
    }
    fprintf(stderr, "timings: load        %8.2f s", t->load_seconds);
    if (lb) fprintf(stderr, " (backend %s%s%s)", lb->name, info.name[0] ? ": " : "", info.name);
    fprintf(stderr, "\n");
    if (t->n_images > 0) {
        double total = 0;
        for (size_t i = 0; i < t->n_images; i++) total += t->image_seconds[i];
        fprintf(stderr, "timings: vision      %8.2f s (", total);
        for (size_t i = 0; i < t->n_images; i++)
            fprintf(stderr, "%s%s %zu: %.2f s", i ? ", " : "",
                    t->is_video && t->is_video[i] ? "video" : "image", i + 1, t->image_seconds[i]);
        fprintf(stderr, ")\n");
    }
    fprintf(stderr, "timings: prefill     %8.2f s, %lld tokens (%.1f tok/s)\n",
            t->prefill_seconds, (long long)t->prefill_tokens,
            rate((double)t->prefill_tokens, t->prefill_seconds));
    if (t->first_token_at > 0)
        fprintf(stderr, "timings: first token %8.2f s after the start\n",
                t->first_token_at - t->start);
    fprintf(stderr, "timings: decode      %8.2f s, %lld tokens generated (%.2f tok/s)\n",
            t->decode_seconds, (long long)t->decode_tokens,
            rate((double)t->decode_tokens, t->decode_seconds));
    if (t->mask_sets > 0)
        fprintf(stderr,
                "timings: mask        %8.2f s, %lld sets (%.3f ms each), %.3f s of it waited for "
                "(%.1f%% of decode)\n",
                t->mask_seconds, (long long)t->mask_sets,
                1e3 * t->mask_seconds / (double)t->mask_sets, t->mask_waited,
                100.0 * rate(t->mask_waited, t->decode_seconds));
    struct rusage ru;
    double rss_mib = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
    fprintf(stderr, "timings: memory      peak resident %.0f MiB", rss_mib);
    if (lb && !info.host_memory && info.memory_total > 0)
        fprintf(stderr, "; %s device in use %.0f of %.0f MiB", lb->name,
                (double)(info.memory_total - info.memory_free) / 1048576.0,
                (double)info.memory_total / 1048576.0);
    fprintf(stderr, "\n");
    if (m) run_memory_print(m);
}

void run_memory_print(const qvl_model *m) {
    qvl_model_backend_memory mem[4];
    size_t n = qvl_model_memory(m, mem, sizeof mem / sizeof mem[0]);
    for (size_t i = 0; i < n; i++) memory_report_line(stderr, "memory:  ", &mem[i]);
}
