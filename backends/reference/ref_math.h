/* The arithmetic the kernels share, on plain f32 arrays.
 *
 * A fused kernel is built from exactly the functions its primitive kernels use (the same
 * operations in the same order), so running a fused op gives what running its primitive ops
 * one after another gives. Values are f32; dot products, norm statistics and softmax sums
 * are accumulated in double. */
#ifndef QVL_REF_MATH_H
#define QVL_REF_MATH_H

#include <stdint.h>

#include "qvl/tensor.h"

/* ---- ref_matmul.c ---- */

/* f32 scratch of n elements (at least one), or NULL when out of memory; free() it. */
float *ref_scratch(int64_t n);

/* A 2-D matrix inside a (possibly strided, possibly 3-D) tensor, read through strides. */
typedef struct ref_matrix {
    const qvl_tensor *t;
    int64_t off;        /* element offset of [0][0] */
    int64_t rows, cols;
    int64_t row_stride, col_stride;
} ref_matrix;

/* Matrix `batch` of a 3-D tensor [B, rows, cols], or the 2-D tensor itself (batch ignored). */
ref_matrix ref_matrix_of(const qvl_tensor *w, int64_t batch);

/* sum x[i]*y[i] in double. */
double ref_dot(const float *x, const float *y, int64_t n);

/* The nn.Linear product: out[m*ldo + j] = (float)(a[m] . w[j] + bias[j]) for m < M and
 * j < w->rows; a is contiguous [M, w->cols]; bias may be NULL; w_row is scratch of w->cols. */
void ref_linear(const float *a, int64_t M, const ref_matrix *w, const float *bias,
                float *w_row, float *out, int64_t ldo);

/* ---- ref_norm.c ---- (y may equal x) */

void ref_rms_norm_row(float *y, const float *x, const float *gamma, int64_t n, float eps);
void ref_layer_norm_row(float *y, const float *x, const float *gamma, const float *beta,
                        int64_t n, float eps); /* beta may be NULL */

/* ---- ref_elementwise.c ---- */

float ref_act_silu(float x);
float ref_act_gelu_tanh(float x);
float ref_act_gelu_erf(float x);

/* ---- ref_attention.c ---- */

/* In place; a row that is all -inf becomes all 0. */
void ref_softmax_row(float *x, int64_t n);
/* Is key j hidden from query i under the causal mask with n_past earlier positions? */
int ref_causal_hides(int64_t i, int64_t j, int64_t n_past);

#endif
