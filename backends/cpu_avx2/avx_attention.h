/* What the two ATTENTION paths share (avx_attention.c: few queries, the dispatch and the
 * segment bounds; avx_attention_tiled.c: many queries in register tiles). */
#ifndef QVL_AVX_ATTENTION_H
#define QVL_AVX_ATTENTION_H

#include <stdint.h>

#include "avx_common.h"

typedef struct attn_job {
    const qvl_node *n;
    int64_t N, Hq, D, L, group;
    int64_t n_past;                 /* causal masks: from params, or read from `at` */
    const int32_t *seg_lo, *seg_hi; /* per query, for segment masks */
} attn_job;

/* Head g of key/value/query row j of t ([rows, heads, D]) as f32: in place when possible,
 * else converted into buf (D floats). */
const float *avx_attn_row(const qvl_tensor *t, int64_t j, int64_t g, int64_t D, float *buf);

/* Visible key range [*lo, *hi) of query i: causal [0, n_past + i + 1), segments the query's
 * own segment, none [0, L); empty when hi <= lo. */
void avx_attn_visible(const attn_job *jb, int64_t i, int64_t *lo, int64_t *hi);

/* The many-query path: work items (each a head and a block of queries), the f32 scratch one
 * item needs, and the item itself (an avx_row_fn over [0, avx_attn_tiled_items)). */
int64_t avx_attn_tiled_items(const attn_job *jb);
int64_t avx_attn_tiled_scratch(const attn_job *jb);
void avx_attn_tiled_item(void *ctx, int64_t item, float *scratch);

#endif
