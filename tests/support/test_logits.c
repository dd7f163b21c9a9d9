/* Comparing rows of logits (test_logits.h). */
#include "test_logits.h"

#include <math.h>

int32_t test_argmax(const float *v, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int32_t)i;
    return best;
}

double test_rel_err(const float *a, const float *b, int64_t n) {
    double max_ref = 0, max_err = 0;
    for (int64_t i = 0; i < n; i++) {
        max_ref = fmax(max_ref, fabs(a[i]));
        max_err = fmax(max_err, fabs(a[i] - b[i]));
    }
    return max_err / (max_ref > 0 ? max_ref : 1);
}
