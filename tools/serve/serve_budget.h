/* The picture memory budget (--max-image-memory): bytes that pictures of requests may hold at
 * once, from before a picture is decoded until the prefill has consumed its pixels. A picture
 * reserves what its header says decoding and preprocessing will take (serve_image.c), so
 * several pictures decode at once as long as they fit, and requests waiting for a slot cannot
 * hold more pixels than the budget. A reservation that does not fit waits, until it fits, its
 * caller gives up (deadline, client gone) or the server stops (serve_budget_close). */
#ifndef QVL_SERVE_BUDGET_H
#define QVL_SERVE_BUDGET_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct serve_budget {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a release or close happened */
    int64_t cap, used; /* bytes */
    int waiting;       /* reservations waiting to fit */
    bool closed;       /* the server is stopping: every wait ends, nothing more is reserved */
} serve_budget;

typedef enum serve_budget_result {
    SERVE_BUDGET_OK = 0,
    SERVE_BUDGET_TOO_LARGE, /* more than the whole budget: can never fit */
    SERVE_BUDGET_GAVE_UP,   /* give_up said so while waiting */
    SERVE_BUDGET_CLOSED,    /* the server is stopping */
} serve_budget_result;

/* false when the mutex or condition variable cannot be made. */
bool serve_budget_init(serve_budget *b, int64_t cap_bytes);
void serve_budget_destroy(serve_budget *b);

/* Take `bytes` of the budget, waiting while they do not fit. give_up(arg) is asked at least
 * every poll_ms while waiting (it checks a deadline and the client; a client leaving wakes
 * nothing here) and may be NULL. */
serve_budget_result serve_budget_reserve(serve_budget *b, int64_t bytes, bool (*give_up)(void *),
                                         void *arg, int poll_ms);
/* Give back bytes taken by serve_budget_reserve (all or part). */
void serve_budget_release(serve_budget *b, int64_t bytes);
/* The server is stopping: wake every waiter; reservations fail from now on. */
void serve_budget_close(serve_budget *b);
bool serve_budget_closed(serve_budget *b);
/* Bytes held and reservations waiting, for /metrics. */
void serve_budget_usage(serve_budget *b, int64_t *used, int *waiting);

#endif
