/* The harness of the reference backend's own tests: see test_reference_util.h. */
#include "test_reference_util.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

qvl_test_backend tb;

int ref_open_backend(void **state) {
    (void)state;
    return qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &tb);
}

int ref_close_backend(void **state) {
    (void)state;
    qvl_test_backend_close(&tb);
    return 0;
}

/* ---- running nodes ------------------------------------------------------------------------ */

qvl_status run(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src,
               qvl_error *err) {
    qvl_node n = tt_node(op, p, dst, src);
    qvl_kernel_fn k = qvl_test_kernel(&tb, op);
    if (!k) return qvl_fail(err, QVL_E_UNSUPPORTED, "no kernel");
    return k(tb.be, &n, err);
}

bool supported(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src) {
    qvl_node n = tt_node(op, p, dst, src);
    return (qvl_test_supports(&tb, &n, NULL) == QVL_OK);
}

void run_ok(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src) {
    qvl_error err = {0};
    if (!supported(op, p, dst, src)) {
        run(op, p, dst, src, &err);
        fail_msg("%s: not supported: %s", qvl_op_name(op), err.msg);
    }
    qvl_status s = run(op, p, dst, src, &err);
    if (s != QVL_OK) fail_msg("%s failed: %s", qvl_op_name(op), err.msg);
}

void run_fails(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src,
               qvl_status want, const char *word) {
    qvl_error err = {0};
    qvl_status s = run(op, p, dst, src, &err);
    if (s != want) fail_msg("%s: status %d (%s), expected %d", qvl_op_name(op), s, err.msg, want);
    if (!strstr(err.msg, qvl_op_name(op)) || (word && !strstr(err.msg, word)))
        fail_msg("message '%s' should name %s and say '%s'", err.msg, qvl_op_name(op),
                 word ? word : "");
}

/* ---- expectations ------------------------------------------------------------------------- */

double flat(const qvl_tensor *t, int64_t i) {
    return ((const float *)t->data)[i];
}

void expect_close(const qvl_tensor *got, const double *want, double tol) {
    for (int64_t i = 0; i < tt_nelem(&got->desc); i++) {
        double g = flat(got, i), w = want[i];
        if (isinf(w) && g == w) continue;
        if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w))))
            fail_msg("element %lld: got %.9g, expected %.9g", (long long)i, g, w);
    }
}

void expect_same(const qvl_tensor *got, const qvl_tensor *want) {
    assert_int_equal(tt_nelem(&got->desc), tt_nelem(&want->desc));
    for (int64_t i = 0; i < tt_nelem(&got->desc); i++) {
        double g = flat(got, i), w = flat(want, i);
        if (!(fabs(g - w) <= 1e-5 * fabs(w) + 1e-7))
            fail_msg("element %lld: fused %.9g, primitives %.9g", (long long)i, g, w);
    }
}

double *want_buf(const qvl_tensor *like) {
    return tt_keep(calloc((size_t)tt_nelem(&like->desc), sizeof(double)));
}
