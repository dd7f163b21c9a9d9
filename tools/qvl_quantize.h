/* qvl quantize's two outputs: a model directory (qvl_quantize.c) or GGUF files
 * (qvl_quantize_gguf.c). */
#ifndef QVL_QUANTIZE_H
#define QVL_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "qvl/dtype.h"

#include "qvl/status.h"

typedef struct qvl_quantize_args {
    const char *model, *mmproj;     /* -m, --mmproj (NULL when not given) */
    const char *weights;            /* --weights */
    const char *out, *mmproj_out;   /* --out, --mmproj-out (NULL when not given) */
    bool force;
    int threads;
} qvl_quantize_args;

/* "168 q4_k, 29 q6_k, 113 f32": how many tensors of each type a file holds, most first. */
void qvl_quantize_print_mix(FILE *f, const size_t by_dtype[QVL_DTYPE_COUNT]);

/* --out names a GGUF file (it ends in ".gguf", any case). */
bool qvl_quantize_out_is_gguf(const char *out);
qvl_status qvl_quantize_gguf(const qvl_quantize_args *a, qvl_error *err);

#endif
