/* The picture memory budget of qvl serve (tools/serve/serve_budget.c): reservations within the
 * cap at once, a wait that ends when room is given back, when its caller gives up, or when the
 * server stops; nothing over the whole cap. Waits are for events (a release, a close), each
 * observed through the budget's own waiting count, never for time. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "serve_budget.h"

typedef struct waiter {
    serve_budget *b;
    int64_t bytes;
    atomic_bool give_up;
    serve_budget_result result;
} waiter;

static bool should_give_up(void *arg) { return atomic_load(&((waiter *)arg)->give_up); }

static void *wait_main(void *arg) {
    waiter *w = arg;
    w->result = serve_budget_reserve(w->b, w->bytes, should_give_up, w, 5);
    return NULL;
}

/* Until the budget has n waiters (a thread blocked in serve_budget_reserve). */
static void until_waiting(serve_budget *b, int n) {
    for (;;) {
        int64_t used;
        int waiting;
        serve_budget_usage(b, &used, &waiting);
        if (waiting == n) return;
        sched_yield();
    }
}

static void test_fits_at_once(void **state) {
    (void)state;
    serve_budget b;
    assert_true(serve_budget_init(&b, 100));
    assert_int_equal(serve_budget_reserve(&b, 60, NULL, NULL, 5), SERVE_BUDGET_OK);
    assert_int_equal(serve_budget_reserve(&b, 40, NULL, NULL, 5), SERVE_BUDGET_OK);
    assert_int_equal(serve_budget_reserve(&b, 101, NULL, NULL, 5), SERVE_BUDGET_TOO_LARGE);
    int64_t used;
    int waiting;
    serve_budget_usage(&b, &used, &waiting);
    assert_int_equal(used, 100);
    assert_int_equal(waiting, 0);
    serve_budget_release(&b, 60);
    serve_budget_release(&b, 40);
    serve_budget_usage(&b, &used, &waiting);
    assert_int_equal(used, 0);
    serve_budget_destroy(&b);
}

static void test_wait_for_release(void **state) {
    (void)state;
    serve_budget b;
    assert_true(serve_budget_init(&b, 100));
    assert_int_equal(serve_budget_reserve(&b, 70, NULL, NULL, 5), SERVE_BUDGET_OK);
    waiter w = {.b = &b, .bytes = 50};
    atomic_init(&w.give_up, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_main, &w), 0);
    until_waiting(&b, 1);
    serve_budget_release(&b, 70);
    pthread_join(t, NULL);
    assert_int_equal(w.result, SERVE_BUDGET_OK);
    int64_t used;
    int waiting;
    serve_budget_usage(&b, &used, &waiting);
    assert_int_equal(used, 50);
    assert_int_equal(waiting, 0);
    serve_budget_destroy(&b);
}

static void test_give_up_takes_nothing(void **state) {
    (void)state;
    serve_budget b;
    assert_true(serve_budget_init(&b, 100));
    assert_int_equal(serve_budget_reserve(&b, 70, NULL, NULL, 5), SERVE_BUDGET_OK);
    waiter w = {.b = &b, .bytes = 50};
    atomic_init(&w.give_up, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_main, &w), 0);
    until_waiting(&b, 1);
    atomic_store(&w.give_up, true);
    pthread_join(t, NULL);
    assert_int_equal(w.result, SERVE_BUDGET_GAVE_UP);
    int64_t used;
    int waiting;
    serve_budget_usage(&b, &used, &waiting);
    assert_int_equal(used, 70);
    assert_int_equal(waiting, 0);
    serve_budget_destroy(&b);
}

static void test_close_wakes_every_waiter(void **state) {
    (void)state;
    serve_budget b;
    assert_true(serve_budget_init(&b, 100));
    assert_int_equal(serve_budget_reserve(&b, 100, NULL, NULL, 5), SERVE_BUDGET_OK);
    waiter w[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (waiter){.b = &b, .bytes = 10 + i};
        atomic_init(&w[i].give_up, false);
        assert_int_equal(pthread_create(&t[i], NULL, wait_main, &w[i]), 0);
    }
    until_waiting(&b, 3);
    serve_budget_close(&b);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].result, SERVE_BUDGET_CLOSED);
    }
    assert_true(serve_budget_closed(&b));
    assert_int_equal(serve_budget_reserve(&b, 0, NULL, NULL, 5), SERVE_BUDGET_CLOSED);
    serve_budget_destroy(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fits_at_once),
        cmocka_unit_test(test_wait_for_release),
        cmocka_unit_test(test_give_up_takes_nothing),
        cmocka_unit_test(test_close_wakes_every_waiter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
