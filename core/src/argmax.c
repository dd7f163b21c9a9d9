/* ARGMAX of one row (qvl_argmax_row, backend_helpers.h). */
#include <math.h>

#include "qvl/backend_helpers.h"

int32_t qvl_argmax_row(const float *x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]) || x[i] == INFINITY) return -1;
        if (x[i] > -INFINITY && (best < 0 || x[i] > x[best])) best = i;
    }
    return (int32_t)best;
}
