/* A model's weight types in one line, most used first: "168 q4_k, 29 q6_k, 113 f32" (counts)
 * or "q4_k + q6_k" (names only), for the model's load line, qvl quantize's summary and
 * qvl-bench's header. */
#ifndef QVL_DTYPE_MIX_H
#define QVL_DTYPE_MIX_H

#include <stdbool.h>
#include <stddef.h>

#include "qvl/dtype.h"

/* Writes the types with a non-zero count into buf (always NUL-terminated; "" when none),
 * joined by sep, each preceded by its count when with_counts. */
void qvl_dtype_mix(const size_t counts[QVL_DTYPE_COUNT], bool with_counts, const char *sep,
                   char *buf, size_t cap);

#endif /* QVL_DTYPE_MIX_H */
