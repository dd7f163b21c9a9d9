/* Weight matrices of the Qwen3-VL graphs (see graph_weights.h). */
#include "graph_weights.h"

#include <stdarg.h>
#include <stdio.h>

#include "qvl/weight_table.h"

qvl_tid qwen_matrix(qvl_graph *g, const qwen_matrices *m, int64_t d0, int64_t d1, const char *fmt,
                    ...) {
    char buf[QVL_TENSOR_NAME_MAX + 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const int64_t shape[2] = {d0, d1};
    qvl_dtype dt = m->dtype_of ? m->dtype_of(m->dtype_ctx, buf, m->wdt) : m->wdt;
    return qvl_g_weight(g, buf, dt, 2, shape);
}
