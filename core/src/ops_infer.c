/* qvl_op_infer: the one place that decides whether a node's inputs fit its op and what its
 * output looks like. The graph builder, the validator and the fusion pass all rely on it, so
 * every rule written in ops.h is checked here. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops_table.h"
#include "qvl/checked.h"
#include "qvl/ops.h"

/* ---- helpers for messages ---------------------------------------------------------------- */

typedef struct infer_ctx {
    qvl_op op;
    const qvl_params *params;
    uint32_t n_src;
    const qvl_tensor_desc *const *src;
    qvl_error *err;
} infer_ctx;

/* A descriptor as text, returned by value so it can be used inline in a message. */
typedef struct desc_text { char s[128]; } desc_text;

static desc_text dt(const qvl_tensor_desc *d) {
    desc_text t;
    qvl_desc_str(d, t.s, sizeof t.s);
    return t;
}

/* "input 1 (w)" */
typedef struct slot_text { char s[48]; } slot_text;

static slot_text in(const infer_ctx *c, uint32_t i) {
    slot_text t;
    snprintf(t.s, sizeof t.s, "input %u (%s)", (unsigned)i, qvl_op_slot_name(c->op, i));
    return t;
}

static qvl_status fail(const infer_ctx *c, qvl_status s, const char *fmt, ...) QVL_PRINTF(3, 4);
static qvl_status fail(const infer_ctx *c, qvl_status s, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qvl_fail(c->err, s, "%s: %s", qvl_op_name(c->op), msg);
}

static const qvl_tensor_desc *slot(const infer_ctx *c, uint32_t i) {
    return i < c->n_src ? c->src[i] : NULL;
}

static int64_t dim(const qvl_tensor_desc *d, int i_from_end) {
    return d->shape[d->ndim - 1 - i_from_end];
}

/* ---- checks used by several ops ---------------------------------------------------------- */

/* A required input: present, else an error naming the slot. */
static qvl_status need(const infer_ctx *c, uint32_t i, const qvl_tensor_desc **out) {
    *out = slot(c, i);
    if (!*out) return fail(c, QVL_E_INVALID, "%s is missing", in(c, i).s);
    return QVL_OK;
}

/* A slot that must stay empty in this configuration. */
static qvl_status absent(const infer_ctx *c, uint32_t i, const char *why) {
    const qvl_tensor_desc *d = slot(c, i);
    if (d) return fail(c, QVL_E_INVALID, "%s is %s but must be absent (%s)", in(c, i).s, dt(d).s, why);
    return QVL_OK;
}

static qvl_status want_dtype(const infer_ctx *c, uint32_t i, qvl_dtype t) {
    const qvl_tensor_desc *d = slot(c, i);
    if (d->dtype != t)
        return fail(c, QVL_E_DTYPE, "%s is %s, expected dtype %s", in(c, i).s, dt(d).s, qvl_dtype_name(t));
    return QVL_OK;
}

/* Norm gammas/betas and biases: f32, f16 or bf16. */
static qvl_status want_small_weight(const infer_ctx *c, uint32_t i) {
    const qvl_tensor_desc *d = slot(c, i);
    if (!qvl_dtype_is_float(d->dtype))
        return fail(c, QVL_E_DTYPE, "%s is %s, expected dtype f32, f16 or bf16", in(c, i).s, dt(d).s);
    return QVL_OK;
}

/* A block dtype's rows (the inner dim) must hold whole blocks: 32 for q8_0, 256 for q4_k/q6_k. */
static qvl_status want_whole_blocks(const infer_ctx *c, uint32_t i) {
    const qvl_tensor_desc *d = slot(c, i);
    int64_t block = (int64_t)qvl_dtype_block_elems(d->dtype);
    if (dim(d, 0) % block != 0)
        return fail(c, QVL_E_SHAPE, "%s is %s: %s needs the inner dim to be a multiple of %lld",
                    in(c, i).s, dt(d).s, qvl_dtype_name(d->dtype), (long long)block);
    return QVL_OK;
}

/* Matmul-like weights and get_rows tables: f32, f16, bf16, or a block dtype (q8_0, q4_k,
 * q6_k) with whole blocks per row. */
static qvl_status want_big_weight(const infer_ctx *c, uint32_t i) {
    const qvl_tensor_desc *d = slot(c, i);
    if (qvl_dtype_is_float(d->dtype)) return QVL_OK;
    if (!qvl_dtype_is_quant(d->dtype))
        return fail(c, QVL_E_DTYPE, "%s is %s, expected dtype f32, f16, bf16, q8_0, q4_k or q6_k",
                    in(c, i).s, dt(d).s);
    return want_whole_blocks(c, i);
}

static qvl_status want_ndim(const infer_ctx *c, uint32_t i, int lo, int hi, const char *what) {
    const qvl_tensor_desc *d = slot(c, i);
    if (d->ndim < lo || d->ndim > hi)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected %s", in(c, i).s, dt(d).s, what);
    return QVL_OK;
}

/* A 1-D vector of length n (gamma, beta, bias), named after what it must match. */
static qvl_status want_vector(const infer_ctx *c, uint32_t i, int64_t n, const char *of_what) {
    const qvl_tensor_desc *d = slot(c, i);
    if (d->ndim != 1 || d->shape[0] != n)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected [%lld] to match %s", in(c, i).s, dt(d).s,
                    (long long)n, of_what);
    return want_small_weight(c, i);
}

static bool same_leading(const qvl_tensor_desc *a, const qvl_tensor_desc *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim - 1; i++) {
        if (a->shape[i] != b->shape[i]) return false;
    }
    return true;
}

/* An f32 contiguous output of the given shape. */
static qvl_status out_f32(const infer_ctx *c, qvl_tensor_desc *out, int ndim, const int64_t *shape) {
    if (!qvl_desc_init(out, QVL_F32, ndim, shape))
        return fail(c, QVL_E_LIMIT, "output shape overflows or is invalid");
    return QVL_OK;
}

static qvl_status out_like(const infer_ctx *c, qvl_tensor_desc *out, const qvl_tensor_desc *x) {
    return out_f32(c, out, x->ndim, x->shape);
}

static qvl_status check_eps(const infer_ctx *c, float eps) {
    if (!(eps >= 0.0f) || isinf(eps))
        return fail(c, QVL_E_INVALID, "eps %g must be finite and >= 0", (double)eps);
    return QVL_OK;
}

/* Every present input must be a well-formed descriptor: this keeps the per-op code simple. */
static qvl_status check_desc(const infer_ctx *c, uint32_t i) {
    const qvl_tensor_desc *d = c->src[i];
    if (!qvl_dtype_valid((int)d->dtype))
        return fail(c, QVL_E_DTYPE, "%s has invalid dtype %d", in(c, i).s, (int)d->dtype);
    if (d->ndim < 1 || d->ndim > QVL_MAX_DIMS)
        return fail(c, QVL_E_SHAPE, "%s has ndim %d, expected 1..%d", in(c, i).s, (int)d->ndim, QVL_MAX_DIMS);
    for (int k = 0; k < d->ndim; k++) {
        if (d->shape[k] < 1)
            return fail(c, QVL_E_SHAPE, "%s has dim %d of size %lld, expected >= 1", in(c, i).s, k,
                        (long long)d->shape[k]);
    }
    if (!qvl_desc_span_bytes(d, NULL))
        return fail(c, QVL_E_SHAPE,
                    "%s is %s with strides that are negative, overflow, or break quant blocks",
                    in(c, i).s, dt(d).s);
    return QVL_OK;
}

#define TRY(expr)                          \
    do {                                   \
        qvl_status st_ = (expr);           \
        if (st_ != QVL_OK) return st_;     \
    } while (0)

/* ---- op by op ---------------------------------------------------------------------------- */

static qvl_status infer_get_rows(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *table, *ids;
    TRY(need(c, 0, &table));
    TRY(need(c, 1, &ids));
    TRY(want_ndim(c, 0, 2, 2, "a 2-D table [V, D]"));
    TRY(want_big_weight(c, 0));
    TRY(want_ndim(c, 1, 1, 1, "1-D ids [N]"));
    TRY(want_dtype(c, 1, QVL_I32));
    int64_t shape[2] = {ids->shape[0], table->shape[1]};
    return out_f32(c, out, 2, shape);
}

static qvl_status infer_matmul(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *a, *w;
    TRY(need(c, 0, &a));
    TRY(need(c, 1, &w));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_ndim(c, 1, 2, 3, "a 2-D weight [N, K] or a 3-D batch [Bw, N, K]"));
    TRY(want_big_weight(c, 1));
    int64_t k = dim(w, 0), n = dim(w, 1);
    if (dim(a, 0) != k)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected inner dim %lld to match %s %s", in(c, 1).s,
                    dt(w).s, (long long)dim(a, 0), in(c, 0).s, dt(a).s);
    int64_t shape[QVL_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = n;
    if (w->ndim == 2) {
        const qvl_tensor_desc *bias = slot(c, 2);
        if (bias) TRY(want_vector(c, 2, n, "the output dim of input 1 (w)"));
        return out_f32(c, out, a->ndim, shape);
    }
    /* Batched: a [B, M, K] against w [Bw, N, K]; groups of B/Bw batches share one w batch. */
    TRY(absent(c, 2, "a 3-D w takes no bias"));
    if (a->ndim != 3)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected 3-D [B, M, K] because %s is 3-D %s", in(c, 0).s,
                    dt(a).s, in(c, 1).s, dt(w).s);
    if (a->shape[0] % w->shape[0] != 0)
        return fail(c, QVL_E_SHAPE, "%s is %s: its batch %lld must divide the batch %lld of %s %s",
                    in(c, 1).s, dt(w).s, (long long)w->shape[0], (long long)a->shape[0], in(c, 0).s,
                    dt(a).s);
    return out_f32(c, out, 3, shape);
}

/* ADD, MUL: b broadcasts onto a, aligned on the innermost dims. */
static qvl_status infer_binary(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *a, *b;
    TRY(need(c, 0, &a));
    TRY(need(c, 1, &b));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_dtype(c, 1, QVL_F32));
    if (b->ndim > a->ndim)
        return fail(c, QVL_E_SHAPE, "%s is %s, has more dims than %s %s", in(c, 1).s, dt(b).s,
                    in(c, 0).s, dt(a).s);
    for (int i = 0; i < b->ndim; i++) {
        int64_t bd = dim(b, i), ad = dim(a, i);
        if (bd != ad && bd != 1)
            return fail(c, QVL_E_SHAPE,
                        "%s is %s, does not broadcast onto %s %s (dim %d from the end is %lld, "
                        "expected %lld or 1)",
                        in(c, 1).s, dt(b).s, in(c, 0).s, dt(a).s, i, (long long)bd, (long long)ad);
    }
    return out_like(c, out, a);
}

/* SCALE, SOFTMAX, SILU, GELU_*: elementwise on f32. */
static qvl_status infer_unary(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *x;
    TRY(need(c, 0, &x));
    TRY(want_dtype(c, 0, QVL_F32));
    if (c->op == QVL_OP_SCALE && !isfinite(c->params->scale.s))
        return fail(c, QVL_E_INVALID, "scale %g is not finite", (double)c->params->scale.s);
    return out_like(c, out, x);
}

/* ARGMAX: f32 rows [R, V] -> [R] i32. */
static qvl_status infer_argmax(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *x;
    TRY(need(c, 0, &x));
    TRY(want_dtype(c, 0, QVL_F32));
    if (x->ndim != 2 || x->shape[1] < 1)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected [rows, V] with V >= 1", in(c, 0).s, dt(x).s);
    if (!qvl_desc_init(out, QVL_I32, 1, x->shape))
        return fail(c, QVL_E_LIMIT, "output shape overflows or is invalid");
    return QVL_OK;
}

/* RMS_NORM (x, gamma), LAYER_NORM (x, gamma, beta?). */
static qvl_status infer_norm(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *x, *gamma;
    TRY(need(c, 0, &x));
    TRY(need(c, 1, &gamma));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_vector(c, 1, dim(x, 0), "the inner dim of input 0 (x)"));
    if (c->op == QVL_OP_LAYER_NORM && slot(c, 2))
        TRY(want_vector(c, 2, dim(x, 0), "the inner dim of input 0 (x)"));
    TRY(check_eps(c, c->params->norm.eps));
    return out_like(c, out, x);
}

static qvl_status infer_rope_with(const infer_ctx *c, const qvl_rope_params *p,
                                  qvl_tensor_desc *out) {
    const qvl_tensor_desc *x, *pos;
    TRY(need(c, 0, &x));
    TRY(need(c, 1, &pos));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_ndim(c, 0, 3, 3, "3-D [N, H, D]"));
    TRY(want_dtype(c, 1, QVL_I32));
    TRY(want_ndim(c, 1, 2, 2, "2-D positions [C, N]"));
    int64_t n = x->shape[0], d = x->shape[2];
    int64_t channels;
    switch (p->mode) {
    case QVL_ROPE_MROPE_INTERLEAVED: channels = 3; break;
    case QVL_ROPE_VISION_2D: channels = 2; break;
    case QVL_ROPE_NEOX: channels = 1; break;
    default: return fail(c, QVL_E_INVALID, "unknown mode %d", (int)p->mode);
    }
    if (!(p->theta > 0.0f) || isinf(p->theta))
        return fail(c, QVL_E_INVALID, "theta %g must be finite and > 0", (double)p->theta);
    if (d % 2 != 0)
        return fail(c, QVL_E_SHAPE, "%s is %s, head dim %lld must be even", in(c, 0).s, dt(x).s, (long long)d);
    if (p->mode == QVL_ROPE_VISION_2D && d % 4 != 0)
        return fail(c, QVL_E_SHAPE, "%s is %s, vision 2-D mode needs the head dim %lld to be a multiple of 4",
                    in(c, 0).s, dt(x).s, (long long)d);
    if (p->mode == QVL_ROPE_MROPE_INTERLEAVED) {
        int64_t sum = 0;
        for (int i = 0; i < 3; i++) {
            if (p->sections[i] < 0)
                return fail(c, QVL_E_INVALID, "mrope section %d is %d, expected >= 0", i, (int)p->sections[i]);
            sum += p->sections[i];
        }
        if (sum > d / 2)
            return fail(c, QVL_E_INVALID, "mrope sections %d+%d+%d = %lld exceed head dim / 2 = %lld of %s %s",
                        (int)p->sections[0], (int)p->sections[1], (int)p->sections[2], (long long)sum,
                        (long long)(d / 2), in(c, 0).s, dt(x).s);
    }
    if (pos->shape[0] != channels || pos->shape[1] != n)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected [%lld, %lld] for mode %d and %s %s", in(c, 1).s,
                    dt(pos).s, (long long)channels, (long long)n, (int)p->mode, in(c, 0).s, dt(x).s);
    return out_like(c, out, x);
}

static qvl_status infer_rope(const infer_ctx *c, qvl_tensor_desc *out) {
    return infer_rope_with(c, &c->params->rope, out);
}

/* NORM_ROPE (x, pos, gamma): ROPE's checks on slots 0 and 1, the norm's on gamma and eps. */
static qvl_status infer_norm_rope(const infer_ctx *c, qvl_tensor_desc *out) {
    qvl_rope_params rope = qvl_norm_rope_rope(&c->params->norm_rope);
    TRY(infer_rope_with(c, &rope, out));
    const qvl_tensor_desc *gamma;
    TRY(need(c, 2, &gamma));
    TRY(want_vector(c, 2, dim(slot(c, 0), 0), "the inner dim of input 0 (x)"));
    return check_eps(c, c->params->norm_rope.eps);
}

static qvl_status infer_mask_causal(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *s;
    TRY(need(c, 0, &s));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_ndim(c, 0, 2, QVL_MAX_DIMS, "at least 2-D scores [..., N, L]"));
    int64_t n_past = c->params->mask.n_past, end;
    if (n_past < 0) return fail(c, QVL_E_INVALID, "n_past %lld is negative", (long long)n_past);
    /* The last query sees keys [0, n_past + N): they must all exist. */
    if (!qvl_add_i64(n_past, dim(s, 1), &end) || end > dim(s, 0))
        return fail(c, QVL_E_SHAPE, "%s is %s: n_past %lld + N %lld exceeds the key count L %lld",
                    in(c, 0).s, dt(s).s, (long long)n_past, (long long)dim(s, 1), (long long)dim(s, 0));
    return out_like(c, out, s);
}

/* seg [G+1] i32 with G >= 1 (values are runtime data: seg[0] = 0, seg[G] = N). */
static qvl_status want_segments(const infer_ctx *c, uint32_t i) {
    const qvl_tensor_desc *seg = slot(c, i);
    TRY(want_dtype(c, i, QVL_I32));
    if (seg->ndim != 1 || seg->shape[0] < 2)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected 1-D segment bounds [G+1] with G >= 1", in(c, i).s,
                    dt(seg).s);
    return QVL_OK;
}

/* at [1] i32: a row count read at run time (the KV length before this batch). */
static qvl_status want_at(const infer_ctx *c, uint32_t i) {
    const qvl_tensor_desc *at = slot(c, i);
    TRY(want_dtype(c, i, QVL_I32));
    if (at->ndim != 1 || at->shape[0] != 1)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected one i32 row count [1]", in(c, i).s, dt(at).s);
    return QVL_OK;
}

static qvl_status infer_mask_causal_at(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *s, *at;
    TRY(need(c, 0, &s));
    TRY(need(c, 1, &at));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_ndim(c, 0, 2, QVL_MAX_DIMS, "at least 2-D scores [..., N, L]"));
    if (dim(s, 1) > dim(s, 0))
        return fail(c, QVL_E_SHAPE, "%s is %s: its %lld queries exceed its %lld keys", in(c, 0).s,
                    dt(s).s, (long long)dim(s, 1), (long long)dim(s, 0));
    TRY(want_at(c, 1));
    return out_like(c, out, s);
}

static qvl_status infer_mask_segments(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *s, *seg;
    TRY(need(c, 0, &s));
    TRY(need(c, 1, &seg));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_ndim(c, 0, 2, QVL_MAX_DIMS, "at least 2-D scores [..., N, N]"));
    if (dim(s, 0) != dim(s, 1))
        return fail(c, QVL_E_SHAPE, "%s is %s, expected square [..., N, N] scores", in(c, 0).s, dt(s).s);
    TRY(want_segments(c, 1));
    return out_like(c, out, s);
}

/* Smallest and largest element offset a descriptor touches (relative to its element 0). */
static void offset_range(const qvl_tensor_desc *d, int64_t *lo, int64_t *hi) {
    *lo = 0;
    *hi = 0;
    for (int i = 0; i < d->ndim; i++) {
        int64_t step = (d->shape[i] - 1) * d->stride[i]; /* checked by qvl_desc_span_bytes */
        if (step < 0) *lo += step;
        else *hi += step;
    }
}

/* VIEW: out is given; it must be a valid descriptor of x's dtype lying inside x's span. */
static qvl_status infer_view(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *x;
    TRY(need(c, 0, &x));
    int64_t off = c->params->view.offset;
    char os[128];
    qvl_desc_str(out, os, sizeof os);
    if (out->dtype != x->dtype)
        return fail(c, QVL_E_DTYPE, "output %s must keep the dtype of %s %s", os, in(c, 0).s, dt(x).s);
    if (out->ndim < 1 || out->ndim > QVL_MAX_DIMS)
        return fail(c, QVL_E_SHAPE, "output has ndim %d, expected 1..%d", (int)out->ndim, QVL_MAX_DIMS);
    for (int k = 0; k < out->ndim; k++) {
        if (out->shape[k] < 1)
            return fail(c, QVL_E_SHAPE, "output %s has dim %d < 1", os, k);
    }
    if (!qvl_desc_span_bytes(out, NULL))
        return fail(c, QVL_E_SHAPE, "output %s has strides that are negative, overflow, or break quant blocks",
                    os);
    if (off < 0) return fail(c, QVL_E_SHAPE, "offset %lld is negative", (long long)off);
    if (off % (int64_t)qvl_dtype_block_elems(x->dtype) != 0)
        return fail(c, QVL_E_SHAPE, "offset %lld into %s %s is not a multiple of %lld (its blocks)",
                    (long long)off, in(c, 0).s, dt(x).s, (long long)qvl_dtype_block_elems(x->dtype));
    int64_t xlo, xhi, lo, hi, first, last;
    offset_range(x, &xlo, &xhi);
    offset_range(out, &lo, &hi);
    if (!qvl_add_i64(off, lo, &first) || !qvl_add_i64(off, hi, &last) || first < xlo || last > xhi)
        return fail(c, QVL_E_SHAPE,
                    "output %s at offset %lld spans elements [%lld, %lld] past the offset, outside the "
                    "elements [%lld, %lld] of %s %s",
                    os, (long long)off, (long long)lo, (long long)hi, (long long)xlo, (long long)xhi,
                    in(c, 0).s, dt(x).s);
    return QVL_OK;
}

static qvl_status infer_cont(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *x;
    TRY(need(c, 0, &x));
    TRY(want_whole_blocks(c, 0));
    if (!qvl_desc_init(out, x->dtype, x->ndim, x->shape))
        return fail(c, QVL_E_LIMIT, "output shape of %s %s overflows", in(c, 0).s, dt(x).s);
    return QVL_OK;
}

/* The KV cache dtypes: the float dtypes, or q8_0 (rows of whole 32-element blocks). */
static qvl_status want_cache_dtype(const infer_ctx *c, uint32_t i) {
    const qvl_tensor_desc *d = slot(c, i);
    if (d->dtype == QVL_Q8_0) return want_whole_blocks(c, i);
    if (!qvl_dtype_is_float(d->dtype))
        return fail(c, QVL_E_DTYPE, "%s is %s, expected dtype f32, f16, bf16 or q8_0", in(c, i).s,
                    dt(d).s);
    return QVL_OK;
}

/* What STORE_ROWS and STORE_ROWS_AT share: dst a contiguous cache (float or q8_0), src f32
 * rows like dst's, at most as many as dst has. */
static qvl_status want_store(const infer_ctx *c, const qvl_tensor_desc **dst_out,
                             const qvl_tensor_desc **src_out) {
    const qvl_tensor_desc *dst, *src;
    TRY(need(c, 0, &dst));
    TRY(need(c, 1, &src));
    TRY(want_cache_dtype(c, 0));
    if (!qvl_desc_is_contiguous(dst))
        return fail(c, QVL_E_SHAPE, "%s is %s and must be contiguous", in(c, 0).s, dt(dst).s);
    TRY(want_dtype(c, 1, QVL_F32));
    bool rows_match = src->ndim == dst->ndim;
    for (int i = 1; rows_match && i < dst->ndim; i++) rows_match = src->shape[i] == dst->shape[i];
    if (!rows_match)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected rows shaped like those of %s %s", in(c, 1).s,
                    dt(src).s, in(c, 0).s, dt(dst).s);
    if (src->shape[0] > dst->shape[0])
        return fail(c, QVL_E_SHAPE, "%s is %s: its %lld rows do not fit the %lld rows of %s %s",
                    in(c, 1).s, dt(src).s, (long long)src->shape[0], (long long)dst->shape[0],
                    in(c, 0).s, dt(dst).s);
    *dst_out = dst;
    *src_out = src;
    return QVL_OK;
}

static qvl_status infer_store_rows(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *dst, *src;
    TRY(want_store(c, &dst, &src));
    int64_t off = c->params->store.offset, end;
    if (off < 0) return fail(c, QVL_E_INVALID, "offset %lld is negative", (long long)off);
    if (!qvl_add_i64(off, src->shape[0], &end) || end > dst->shape[0])
        return fail(c, QVL_E_SHAPE, "%s is %s: its %lld rows at offset %lld do not fit the %lld rows of %s %s",
                    in(c, 1).s, dt(src).s, (long long)src->shape[0], (long long)off, (long long)dst->shape[0],
                    in(c, 0).s, dt(dst).s);
    /* The alias: dst itself, cut to the rows written so far. */
    *out = *dst;
    out->shape[0] = end;
    return QVL_OK;
}

static qvl_status infer_store_rows_at(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *dst, *src, *at;
    TRY(want_store(c, &dst, &src));
    TRY(need(c, 2, &at));
    TRY(want_at(c, 2));
    *out = *dst; /* the alias: all of dst (which rows hold data is known at run time only) */
    return QVL_OK;
}

/* slot and at of the batched decode ops: [N] i32 each, one per query/source row. */
static qvl_status want_row_values(const infer_ctx *c, uint32_t i, int64_t n) {
    const qvl_tensor_desc *d;
    TRY(need(c, i, &d));
    TRY(want_dtype(c, i, QVL_I32));
    if (d->ndim != 1 || d->shape[0] != n)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected one i32 per row [%lld]", in(c, i).s, dt(d).s,
                    (long long)n);
    return QVL_OK;
}

static qvl_status infer_store_slot_rows(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *dst, *src;
    TRY(need(c, 0, &dst));
    TRY(need(c, 1, &src));
    TRY(want_cache_dtype(c, 0));
    TRY(want_dtype(c, 1, QVL_F32));
    if (!qvl_desc_is_contiguous(dst))
        return fail(c, QVL_E_SHAPE, "%s is %s and must be contiguous", in(c, 0).s, dt(dst).s);
    bool rows_match = dst->ndim >= 2 && src->ndim == dst->ndim - 1;
    for (int i = 1; rows_match && i < src->ndim; i++) rows_match = src->shape[i] == dst->shape[i + 1];
    if (!rows_match)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected rows shaped like those of each slot of %s %s",
                    in(c, 1).s, dt(src).s, in(c, 0).s, dt(dst).s);
    TRY(want_row_values(c, 2, src->shape[0]));
    TRY(want_row_values(c, 3, src->shape[0]));
    *out = *dst; /* the alias: all of dst */
    return QVL_OK;
}

/* Attention's q (f32 [N, Hq, D]) and k, v (cache dtypes, kv_ndim dimensions, one shape). */
static qvl_status want_q_kv(const infer_ctx *c, int kv_ndim, const char *kv_what,
                            const qvl_tensor_desc **q, const qvl_tensor_desc **k,
                            const qvl_tensor_desc **v) {
    TRY(need(c, 0, q));
    TRY(need(c, 1, k));
    TRY(need(c, 2, v));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_ndim(c, 0, 3, 3, "3-D [N, Hq, D]"));
    for (uint32_t i = 1; i <= 2; i++) {
        TRY(want_ndim(c, i, kv_ndim, kv_ndim, kv_what));
        TRY(want_cache_dtype(c, i));
    }
    if (!qvl_desc_same_shape(*k, *v))
        return fail(c, QVL_E_SHAPE, "%s is %s, expected the shape of %s %s", in(c, 2).s,
                    dt(*v).s, in(c, 1).s, dt(*k).s);
    return QVL_OK;
}

static qvl_status infer_attention_slots(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_attention_params *p = &c->params->attention;
    const qvl_tensor_desc *q, *k, *v;
    TRY(want_q_kv(c, 4, "4-D [S, L, Hkv, D]", &q, &k, &v));
    if (k->shape[3] != q->shape[2] || q->shape[1] % k->shape[2] != 0)
        return fail(c, QVL_E_SHAPE, "%s is %s: expected head dim %lld and a head count dividing the %lld "
                    "heads of %s %s", in(c, 1).s, dt(k).s, (long long)q->shape[2],
                    (long long)q->shape[1], in(c, 0).s, dt(q).s);
    if (!isfinite(p->scale)) return fail(c, QVL_E_INVALID, "scale %g is not finite", (double)p->scale);
    if (p->mask != QVL_MASK_CAUSAL_AT)
        return fail(c, QVL_E_INVALID, "mask kind %d: only causal_at (%d) is defined", (int)p->mask,
                    (int)QVL_MASK_CAUSAL_AT);
    TRY(want_row_values(c, 3, q->shape[0]));
    TRY(want_row_values(c, 4, q->shape[0]));
    return out_like(c, out, q);
}

static qvl_status infer_norm_linear(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_norm_linear_params *p = &c->params->norm_linear;
    const qvl_tensor_desc *x, *gamma;
    if (p->norm != QVL_NORM_RMS && p->norm != QVL_NORM_LAYER)
        return fail(c, QVL_E_INVALID, "unknown norm kind %d", (int)p->norm);
    if (p->n_proj < 1 || p->n_proj > 3)
        return fail(c, QVL_E_INVALID, "n_proj %d must be 1..3", (int)p->n_proj);
    if (p->act != QVL_ACT_NONE && p->act != QVL_ACT_GELU_TANH && p->act != QVL_ACT_GELU_ERF)
        return fail(c, QVL_E_INVALID, "act %d must be none (%d), gelu_tanh (%d) or gelu_erf (%d)",
                    (int)p->act, (int)QVL_ACT_NONE, (int)QVL_ACT_GELU_TANH, (int)QVL_ACT_GELU_ERF);
    TRY(check_eps(c, p->eps));
    TRY(need(c, 0, &x));
    TRY(need(c, 1, &gamma));
    TRY(want_dtype(c, 0, QVL_F32));
    int64_t k = dim(x, 0);
    TRY(want_vector(c, 1, k, "the inner dim of input 0 (x)"));
    if (p->norm == QVL_NORM_LAYER) {
        if (slot(c, 2)) TRY(want_vector(c, 2, k, "the inner dim of input 0 (x)"));
    } else {
        TRY(absent(c, 2, "rms norm has no beta"));
    }
    int64_t total = 0;
    for (int j = 0; j < 3; j++) {
        uint32_t wi = 3 + 2 * (uint32_t)j, bi = wi + 1;
        const qvl_tensor_desc *w = slot(c, wi);
        if (j >= p->n_proj) {
            if (w)
                return fail(c, QVL_E_INVALID, "%s is %s but params.n_proj is %d", in(c, wi).s, dt(w).s,
                            (int)p->n_proj);
            TRY(absent(c, bi, "its weight is absent"));
            continue;
        }
        if (!w)
            return fail(c, QVL_E_INVALID, "%s is missing but params.n_proj is %d", in(c, wi).s, (int)p->n_proj);
        TRY(want_ndim(c, wi, 2, 2, "a 2-D weight [N, K]"));
        if (w->shape[1] != k)
            return fail(c, QVL_E_SHAPE, "%s is %s, expected inner dim %lld to match %s %s", in(c, wi).s, dt(w).s,
                        (long long)k, in(c, 0).s, dt(x).s);
        TRY(want_big_weight(c, wi));
        if (slot(c, bi)) {
            char what[80];
            snprintf(what, sizeof what, "the output dim of %s", in(c, wi).s);
            TRY(want_vector(c, bi, w->shape[0], what));
        }
        if (!qvl_add_i64(total, w->shape[0], &total))
            return fail(c, QVL_E_LIMIT, "the output width overflows");
    }
    int64_t shape[QVL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = total;
    return out_f32(c, out, x->ndim, shape);
}

static qvl_status infer_attention(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_attention_params *p = &c->params->attention;
    const qvl_tensor_desc *q, *k, *v;
    TRY(want_q_kv(c, 3, "3-D [L, Hkv, D]", &q, &k, &v));
    int64_t n = q->shape[0], hq = q->shape[1], d = q->shape[2];
    int64_t l = k->shape[0], hkv = k->shape[1];
    if (k->shape[2] != d)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected head dim %lld to match %s %s", in(c, 1).s, dt(k).s,
                    (long long)d, in(c, 0).s, dt(q).s);
    if (hq % hkv != 0)
        return fail(c, QVL_E_SHAPE, "%s is %s: its %lld heads must divide the %lld heads of %s %s", in(c, 1).s,
                    dt(k).s, (long long)hkv, (long long)hq, in(c, 0).s, dt(q).s);
    if (!isfinite(p->scale)) return fail(c, QVL_E_INVALID, "scale %g is not finite", (double)p->scale);
    switch (p->mask) {
    case QVL_MASK_NONE:
        TRY(absent(c, 3, "params.mask is none"));
        break;
    case QVL_MASK_CAUSAL: {
        TRY(absent(c, 3, "params.mask is causal"));
        int64_t end;
        if (p->n_past < 0) return fail(c, QVL_E_INVALID, "n_past %lld is negative", (long long)p->n_past);
        if (!qvl_add_i64(p->n_past, n, &end) || end > l)
            return fail(c, QVL_E_SHAPE, "%s is %s: n_past %lld + N %lld exceeds its %lld keys", in(c, 1).s,
                        dt(k).s, (long long)p->n_past, (long long)n, (long long)l);
        break;
    }
    case QVL_MASK_CAUSAL_AT: {
        const qvl_tensor_desc *at;
        TRY(need(c, 3, &at));
        TRY(want_at(c, 3));
        if (n > l)
            return fail(c, QVL_E_SHAPE, "%s is %s: %lld queries exceed its %lld keys", in(c, 1).s,
                        dt(k).s, (long long)n, (long long)l);
        break;
    }
    case QVL_MASK_SEGMENTS: {
        const qvl_tensor_desc *seg;
        TRY(need(c, 3, &seg));
        TRY(want_segments(c, 3));
        if (n != l)
            return fail(c, QVL_E_SHAPE, "%s is %s: segment masks need as many keys as the %lld queries of %s %s",
                        in(c, 1).s, dt(k).s, (long long)n, in(c, 0).s, dt(q).s);
        break;
    }
    default:
        return fail(c, QVL_E_INVALID, "unknown mask kind %d", (int)p->mask);
    }
    return out_like(c, out, q);
}

static qvl_status infer_mlp_residual(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *res, *a, *w;
    TRY(need(c, 0, &res));
    TRY(need(c, 1, &a));
    TRY(need(c, 2, &w));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_dtype(c, 1, QVL_F32));
    if (!same_leading(res, a))
        return fail(c, QVL_E_SHAPE, "%s is %s, expected the leading dims of %s %s", in(c, 1).s, dt(a).s,
                    in(c, 0).s, dt(res).s);
    int64_t dm = dim(res, 0), f = dim(a, 0);
    TRY(want_ndim(c, 2, 2, 2, "a 2-D weight [D, F]"));
    if (w->shape[0] != dm || w->shape[1] != f)
        return fail(c, QVL_E_SHAPE, "%s is %s, expected [%lld, %lld] from %s %s and %s %s", in(c, 2).s, dt(w).s,
                    (long long)dm, (long long)f, in(c, 0).s, dt(res).s, in(c, 1).s, dt(a).s);
    TRY(want_big_weight(c, 2));
    const qvl_tensor_desc *up = slot(c, 3);
    int32_t act = c->params->mlp.act;
    if (up) {
        TRY(want_dtype(c, 3, QVL_F32));
        if (!qvl_desc_same_shape(up, a))
            return fail(c, QVL_E_SHAPE, "%s is %s, expected the shape of %s %s", in(c, 3).s, dt(up).s,
                        in(c, 1).s, dt(a).s);
        if (act != QVL_ACT_SILU)
            return fail(c, QVL_E_INVALID, "act %d with %s present: a gated MLP needs act silu (%d)", (int)act,
                        in(c, 3).s, (int)QVL_ACT_SILU);
    } else if (act != QVL_ACT_GELU_TANH && act != QVL_ACT_GELU_ERF && act != QVL_ACT_NONE) {
        return fail(c, QVL_E_INVALID,
                    "act %d without %s: an ungated MLP needs gelu_tanh (%d), gelu_erf (%d) or none (%d)",
                    (int)act, in(c, 3).s, (int)QVL_ACT_GELU_TANH, (int)QVL_ACT_GELU_ERF,
                    (int)QVL_ACT_NONE);
    }
    if (slot(c, 4)) TRY(want_vector(c, 4, dm, "the inner dim of input 0 (res)"));
    return out_like(c, out, res);
}

/* SET_ROWS / ADD_ROWS: x [N, D], idx [K] i32, src [K, D] f32 -> f32 [N, D]. */
static qvl_status infer_scatter_rows(const infer_ctx *c, qvl_tensor_desc *out) {
    const qvl_tensor_desc *x, *idx, *src;
    TRY(need(c, 0, &x));
    TRY(need(c, 1, &idx));
    TRY(need(c, 2, &src));
    TRY(want_ndim(c, 0, 2, 2, "2-D rows [N, D]"));
    TRY(want_dtype(c, 0, QVL_F32));
    TRY(want_ndim(c, 1, 1, 1, "1-D row indices [K]"));
    TRY(want_dtype(c, 1, QVL_I32));
    TRY(want_ndim(c, 2, 2, 2, "2-D rows [K, D]"));
    TRY(want_dtype(c, 2, QVL_F32));
    if (src->shape[0] != idx->shape[0] || src->shape[1] != x->shape[1])
        return fail(c, QVL_E_SHAPE, "%s is %s, expected [%lld, %lld] from %s %s and %s %s",
                    in(c, 2).s, dt(src).s, (long long)idx->shape[0], (long long)x->shape[1],
                    in(c, 1).s, dt(idx).s, in(c, 0).s, dt(x).s);
    return out_like(c, out, x);
}

/* ---- entry ------------------------------------------------------------------------------- */

qvl_status qvl_op_infer(qvl_op op, const qvl_params *params, uint32_t n_src,
                        const qvl_tensor_desc *const *src, qvl_tensor_desc *out, qvl_error *err) {
    if ((int)op < 0 || op >= QVL_OP_COUNT)
        return qvl_fail(err, QVL_E_INVALID, "op %d: unknown op", (int)op);
    infer_ctx c = {op, params, n_src, src, err};
    if (!out) return fail(&c, QVL_E_INVALID, "no output descriptor given");
    /* Fewer slots than the op has is fine: the missing ones count as absent. */
    if (n_src > qvl_op_max_inputs(op))
        return fail(&c, QVL_E_INVALID, "%u inputs given, the op has %u slots", (unsigned)n_src,
                    (unsigned)qvl_op_max_inputs(op));
    if (n_src > 0 && !src) return fail(&c, QVL_E_INVALID, "no input array given");
    if (!params && strcmp(ops_params_member(op), "none") != 0)
        return fail(&c, QVL_E_INVALID, "missing params (.%s)", ops_params_member(op));
    for (uint32_t i = 0; i < n_src; i++) {
        if (src[i]) TRY(check_desc(&c, i));
    }
    switch (op) {
    case QVL_OP_GET_ROWS: return infer_get_rows(&c, out);
    case QVL_OP_MATMUL: return infer_matmul(&c, out);
    case QVL_OP_ADD:
    case QVL_OP_MUL: return infer_binary(&c, out);
    case QVL_OP_SCALE:
    case QVL_OP_SOFTMAX:
    case QVL_OP_SILU:
    case QVL_OP_GELU_TANH:
    case QVL_OP_GELU_ERF: return infer_unary(&c, out);
    case QVL_OP_RMS_NORM:
    case QVL_OP_LAYER_NORM: return infer_norm(&c, out);
    case QVL_OP_ROPE: return infer_rope(&c, out);
    case QVL_OP_MASK_CAUSAL: return infer_mask_causal(&c, out);
    case QVL_OP_MASK_SEGMENTS: return infer_mask_segments(&c, out);
    case QVL_OP_VIEW: return infer_view(&c, out);
    case QVL_OP_CONT: return infer_cont(&c, out);
    case QVL_OP_STORE_ROWS: return infer_store_rows(&c, out);
    case QVL_OP_NORM_LINEAR: return infer_norm_linear(&c, out);
    case QVL_OP_ATTENTION: return infer_attention(&c, out);
    case QVL_OP_MLP_RESIDUAL: return infer_mlp_residual(&c, out);
    case QVL_OP_SET_ROWS:
    case QVL_OP_ADD_ROWS: return infer_scatter_rows(&c, out);
    case QVL_OP_STORE_ROWS_AT: return infer_store_rows_at(&c, out);
    case QVL_OP_MASK_CAUSAL_AT: return infer_mask_causal_at(&c, out);
    case QVL_OP_NORM_ROPE: return infer_norm_rope(&c, out);
    case QVL_OP_STORE_SLOT_ROWS: return infer_store_slot_rows(&c, out);
    case QVL_OP_ATTENTION_SLOTS: return infer_attention_slots(&c, out);
    case QVL_OP_ARGMAX: return infer_argmax(&c, out);
    case QVL_OP_COUNT: break;
    }
    return fail(&c, QVL_E_UNSUPPORTED, "no shape rule for this op");
}
