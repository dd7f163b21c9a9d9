/* Element-wise ops: ADD and MUL with broadcasting, SCALE and the activations. */
#include <math.h>

#include "ref_ops.h"
#include "ref_math.h"

/* Written out because M_PI and friends are not ISO C. */
#define REF_SQRT_2_OVER_PI 0.79788456080286535588f /* sqrt(2/pi) */
#define REF_SQRT_HALF 0.70710678118654752440f      /* 1/sqrt(2) */

float ref_act_silu(float x) {
    return x / (1.0f + expf(-x));
}

float ref_act_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(REF_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)));
}

float ref_act_gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * REF_SQRT_HALF));
}

/* ---- one input, same shape out ---- */

typedef float (*unary_fn)(float x, const qvl_params *p);

static float op_scale(float x, const qvl_params *p) { return x * p->scale.s; }
static float op_silu(float x, const qvl_params *p) { (void)p; return ref_act_silu(x); }
static float op_gelu_tanh(float x, const qvl_params *p) { (void)p; return ref_act_gelu_tanh(x); }
static float op_gelu_erf(float x, const qvl_params *p) { (void)p; return ref_act_gelu_erf(x); }

static qvl_status run_unary(qvl_backend *be, const qvl_node *n, unary_fn fn, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0];
    int64_t shape[4], stride[4];
    qvl_desc_align4(&x->desc, shape, stride);
    float *out = n->dst->data;
    int64_t o = 0; /* the output is contiguous: its offsets simply count up */
    for (int64_t i0 = 0; i0 < shape[0]; i0++)
        for (int64_t i1 = 0; i1 < shape[1]; i1++)
            for (int64_t i2 = 0; i2 < shape[2]; i2++)
                for (int64_t i3 = 0; i3 < shape[3]; i3++) {
                    int64_t off = i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
                    out[o++] = fn(qvl_elem_get(x, off), &n->params);
                }
    return QVL_OK;
}


qvl_status ref_scale(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, op_scale, err);
}
qvl_status ref_silu(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, op_silu, err);
}
qvl_status ref_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, op_gelu_tanh, err);
}
qvl_status ref_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(be, n, op_gelu_erf, err);
}

/* ---- ADD / MUL: out = a (op) b, b broadcast onto a's shape ---- */

static qvl_status run_binary(qvl_backend *be, const qvl_node *n, int is_mul, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *a = n->src[0], *b = n->src[1];
    int64_t shape[4], as[4], bshape[4], bs[4];
    qvl_desc_align4(&a->desc, shape, as);
    qvl_desc_align4(&b->desc, bshape, bs); /* stride 0 on b's size-1 dims: the broadcast */
    float *out = n->dst->data;
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < shape[0]; i0++)
        for (int64_t i1 = 0; i1 < shape[1]; i1++)
            for (int64_t i2 = 0; i2 < shape[2]; i2++)
                for (int64_t i3 = 0; i3 < shape[3]; i3++) {
                    float x = qvl_elem_get(a, i0 * as[0] + i1 * as[1] + i2 * as[2] + i3 * as[3]);
                    float y = qvl_elem_get(b, i0 * bs[0] + i1 * bs[1] + i2 * bs[2] + i3 * bs[3]);
                    out[o++] = is_mul ? x * y : x + y;
                }
    return QVL_OK;
}


qvl_status ref_add(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_binary(be, n, 0, err);
}
qvl_status ref_mul(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_binary(be, n, 1, err);
}
