/* What the text and vision graph builders share: declaring a weight matrix whose dtype may
 * depend on its name (a mixture such as q4_k_m stores different matrices differently). */
#ifndef QVL_QWEN3VL_GRAPH_WEIGHTS_H
#define QVL_QWEN3VL_GRAPH_WEIGHTS_H

#include <stdint.h>

#include "qvl/graph.h"
#include "qvl/qwen3vl_graph.h"

typedef struct qwen_matrices {
    qvl_dtype wdt;               /* every matrix's dtype, unless dtype_of says otherwise */
    qvl_weight_dtype_fn dtype_of; /* NULL: wdt for every matrix */
    const void *dtype_ctx;
} qwen_matrices;

/* The weight named by fmt, [d0, d1], in the dtype m chooses for that name. */
qvl_tid qwen_matrix(qvl_graph *g, const qwen_matrices *m, int64_t d0, int64_t d1, const char *fmt,
                    ...) QVL_PRINTF(5, 6);

#endif
