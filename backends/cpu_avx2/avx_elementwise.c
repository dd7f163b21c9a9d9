/* Row-wise ops: ADD/MUL with broadcasting, SCALE, the activations, SOFTMAX and the two masks.
 * Rows (innermost dim) are split across threads; each row is read as f32 (in place when it
 * already is f32 with stride 1) and written to the contiguous output. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avx_kernels.h"
#include "avx_math.h"

/* ---- the row functions (in place) ---- */

#define ROW_MAP(name, vexpr, sexpr)                                   \
    void name(float *x, int64_t n) {                                  \
        int64_t i = 0;                                                \
        for (; i + 8 <= n; i += 8) {                                  \
            __m256 v = _mm256_loadu_ps(x + i);                        \
            _mm256_storeu_ps(x + i, vexpr);                           \
        }                                                             \
        if (i < n) {                                                  \
            __m256i m = avx_tail_mask((int)(n - i));                  \
            __m256 v = _mm256_maskload_ps(x + i, m);                  \
            _mm256_maskstore_ps(x + i, m, vexpr);                     \
        }                                                             \
        (void)sexpr;                                                  \
    }
ROW_MAP(avx_silu_row, avx_v_silu(v), 0)
ROW_MAP(avx_gelu_tanh_row, avx_v_gelu_tanh(v), 0)

/* erf has no vector version here: GELU_ERF (not used by the Qwen3-VL graphs) calls erff, so
 * it matches the reference exactly. */
void avx_gelu_erf_row(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752440f));
}

void avx_softmax_row(float *x, int64_t n) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float max = avx_hmax(vmax);
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    if (max == -INFINITY) { /* nothing visible: the row contributes nothing */
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    __m256 vm = _mm256_set1_ps(max), vs = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = avx_exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)); /* x - max <= 0 */
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    float sum = avx_hsum(vs);
    for (; i < n; i++) {
        float e = _mm256_cvtss_f32(avx_exp_nonpos(_mm256_set1_ps(x[i] - max)));
        x[i] = e;
        sum += e;
    }
    __m256 vsum = _mm256_set1_ps(sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), vsum));
    for (; i < n; i++) x[i] /= sum;
}

/* ---- unary ops: out row = f(x row) ---- */

typedef struct unary_job {
    const qvl_node *n;
    int64_t L;
    void (*row_fn)(float *x, int64_t n);
    const int32_t *seg_id; /* MASK_SEGMENTS */
    int64_t n_past;        /* MASK_CAUSAL (from params) and MASK_CAUSAL_AT (from data) */
} unary_job;

static void scale_row(float *x, int64_t n, float s) {
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) x[i] *= s;
}

static void unary_one(void *ctx, int64_t r, float *scratch) {
    unary_job *j = ctx;
    const qvl_node *n = j->n;
    float *o = (float *)n->dst->data + r * j->L;
    const qvl_tensor *x = n->src[0];
    int64_t off = avx_row_offset(&x->desc, r), step = x->desc.stride[x->desc.ndim - 1];
    (void)scratch;
    avx_gather(x, off, step, j->L, o); /* into the output row, then in place */
    switch (n->op) {
    case QVL_OP_SCALE: scale_row(o, j->L, n->params.scale.s); break;
    case QVL_OP_MASK_CAUSAL:
    case QVL_OP_MASK_CAUSAL_AT: {
        int64_t N = x->desc.shape[x->desc.ndim - 2], i = r % N;
        int64_t first_hidden = j->n_past + i + 1;
        if (first_hidden < 0) first_hidden = 0;
        for (int64_t k = first_hidden; k < j->L; k++) o[k] = -INFINITY;
        break;
    }
    case QVL_OP_MASK_SEGMENTS: {
        int64_t i = r % j->L;
        for (int64_t k = 0; k < j->L; k++)
            if (j->seg_id[k] != j->seg_id[i]) o[k] = -INFINITY;
        break;
    }
    default: j->row_fn(o, j->L); break;
    }
}

static qvl_status run_unary(qvl_backend *be, const qvl_node *n,
                            void (*row_fn)(float *, int64_t), qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0];
    unary_job j = {n, avx_row_len(&x->desc), row_fn, NULL, n->params.mask.n_past};
    if (n->op == QVL_OP_MASK_CAUSAL_AT) {
        j.n_past = qvl_elem_get_i32(n->src[1], 0);
        /* any at >= 0 defines the mask: no upper limit */
        if ((s = qvl_check_at(AVX_NAME, n, j.n_past, 0, INT64_MAX, "queries", err)) != QVL_OK)
            return s;
    }
    int32_t *seg_id = NULL;
    if (n->op == QVL_OP_MASK_SEGMENTS) {
        if (!(seg_id = malloc((size_t)j.L * sizeof *seg_id)))
            return avx_fail(n, err, QVL_E_NOMEM, "out of memory for %lld segment ids", (long long)j.L);
        if ((s = avx_segment_ids(n, n->src[1], j.L, seg_id, err)) != QVL_OK) {
            free(seg_id);
            return s;
        }
        j.seg_id = seg_id;
    }
    s = avx_for_rows(be, avx_n_rows(&x->desc), 1, unary_one, &j);
    free(seg_id);
    if (s != QVL_OK) return avx_fail(n, err, s, "out of memory");
    return QVL_OK;
}

/* The reference's unary checks are static; SCALE's is the same check for every unary op. */
qvl_status avx_scale(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, NULL, err);
}
qvl_status avx_silu(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, avx_silu_row, err);
}
qvl_status avx_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, avx_gelu_tanh_row, err);
}
qvl_status avx_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, avx_gelu_erf_row, err);
}
qvl_status avx_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, avx_softmax_row, err);
}
qvl_status avx_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, NULL, err);
}
qvl_status avx_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, NULL, err);
}
qvl_status avx_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, NULL, err);
}

/* ---- ADD / MUL: out = a (op) b, b broadcast onto a's shape ---- */

typedef struct binary_job {
    const qvl_node *n;
    int64_t shape[4], as[4], bshape[4], bs[4];
    int is_mul;
    int b_alias; /* b's storage is the output's */
} binary_job;

static void binary_one(void *ctx, int64_t r, float *scratch) {
    binary_job *j = ctx;
    const qvl_tensor *a = j->n->src[0], *b = j->n->src[1];
    int64_t L = j->shape[3];
    int64_t i2 = r % j->shape[2], i1 = r / j->shape[2] % j->shape[1],
            i0 = r / (j->shape[2] * j->shape[1]);
    int64_t aoff = i0 * j->as[0] + i1 * j->as[1] + i2 * j->as[2];
    int64_t boff = i0 * j->bs[0] + i1 * j->bs[1] + i2 * j->bs[2];
    float *o = (float *)j->n->dst->data + r * L;
    /* b first, into scratch unless it can be read in place: the output may alias b */
    const float *bv = scratch;
    if (j->bshape[3] == 1) {
        float v = qvl_elem_get(b, boff);
        for (int64_t k = 0; k < L; k++) scratch[k] = v;
    } else if (b->desc.dtype == QVL_F32 && j->bs[3] == 1 && !j->b_alias) {
        bv = (const float *)b->data + boff;
    } else {
        avx_gather(b, boff, j->bs[3], L, scratch);
    }
    avx_gather(a, aoff, j->as[3], L, o);
    int64_t k = 0;
    for (; k + 8 <= L; k += 8) {
        __m256 x = _mm256_loadu_ps(o + k), y = _mm256_loadu_ps(bv + k);
        _mm256_storeu_ps(o + k, j->is_mul ? _mm256_mul_ps(x, y) : _mm256_add_ps(x, y));
    }
    for (; k < L; k++) o[k] = j->is_mul ? o[k] * bv[k] : o[k] + bv[k];
}

static qvl_status run_binary(qvl_backend *be, const qvl_node *n, int is_mul, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    binary_job j = {.n = n, .is_mul = is_mul};
    qvl_desc_align4(&n->src[0]->desc, j.shape, j.as);
    qvl_desc_align4(&n->src[1]->desc, j.bshape, j.bs); /* stride 0 on b's size-1 dims */
    j.b_alias = n->dst->data == n->src[1]->data;
    s = avx_for_rows(be, j.shape[0] * j.shape[1] * j.shape[2], j.shape[3], binary_one, &j);
    if (s != QVL_OK) return avx_fail(n, err, s, "out of memory");
    return QVL_OK;
}

qvl_status avx_add(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_binary(be, n, 0, err);
}
qvl_status avx_mul(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_binary(be, n, 1, err);
}
