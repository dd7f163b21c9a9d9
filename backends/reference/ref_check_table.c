/* Which check validates which op: one table, shared by every backend that compiles the
 * reference checks in (cpu_avx2, cuda_sm61), so all of them accept the same nodes. */
#include "ref_check.h"
#include "ref_ops.h"

static const ref_check_fn checks[QVL_OP_COUNT] = {
    [QVL_OP_GET_ROWS] = ref_check_get_rows,
    [QVL_OP_MATMUL] = ref_check_matmul,
    [QVL_OP_ADD] = ref_check_add,
    [QVL_OP_MUL] = ref_check_mul,
    [QVL_OP_SCALE] = ref_check_scale,
    [QVL_OP_RMS_NORM] = ref_check_rms_norm,
    [QVL_OP_LAYER_NORM] = ref_check_layer_norm,
    [QVL_OP_ROPE] = ref_check_rope,
    [QVL_OP_SOFTMAX] = ref_check_softmax,
    [QVL_OP_SILU] = ref_check_silu,
    [QVL_OP_GELU_TANH] = ref_check_gelu_tanh,
    [QVL_OP_GELU_ERF] = ref_check_gelu_erf,
    [QVL_OP_MASK_CAUSAL] = ref_check_mask_causal,
    [QVL_OP_MASK_SEGMENTS] = ref_check_mask_segments,
    [QVL_OP_VIEW] = ref_check_view,
    [QVL_OP_CONT] = ref_check_cont,
    [QVL_OP_STORE_ROWS] = ref_check_store_rows,
    [QVL_OP_NORM_LINEAR] = ref_check_norm_linear,
    [QVL_OP_ATTENTION] = ref_check_attention,
    [QVL_OP_MLP_RESIDUAL] = ref_check_mlp_residual,
    [QVL_OP_SET_ROWS] = ref_check_set_rows,
    [QVL_OP_ADD_ROWS] = ref_check_add_rows,
    [QVL_OP_STORE_ROWS_AT] = ref_check_store_rows_at,
    [QVL_OP_MASK_CAUSAL_AT] = ref_check_mask_causal_at,
    [QVL_OP_NORM_ROPE] = ref_check_norm_rope,
};

ref_check_fn ref_check_for(const qvl_node *node) {
    if (!node || (int)node->op < 0 || node->op >= QVL_OP_COUNT) return NULL;
    return checks[node->op];
}
