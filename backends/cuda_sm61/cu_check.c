/* The node checks of the cuda_sm61 backend (see cu_check.h): the reference's checks plus the
 * limits of these kernels. */
#include "cu_check.h"

#include <stdarg.h>
#include <string.h>

#include "cu_kernels.h"

qvl_status cu_fail(const qvl_node *n, qvl_error *err, qvl_status s, const char *fmt, ...) {
    if (!err) return s;
    va_list ap;
    va_start(ap, fmt);
    qvl_failv(err, s, fmt, ap);
    va_end(ap);
    if (n->name) return qvl_error_prefix(err, "cuda_sm61: %s '%s'", qvl_op_name(n->op), n->name);
    return qvl_error_prefix(err, "cuda_sm61: %s", qvl_op_name(n->op));
}

qvl_status cu_begin(const qvl_node *n, ref_check_fn check, qvl_error *err) {
    qvl_status s = ref_begin(n, check, err);
    if (s == QVL_OK || !err) return s;
    /* The shared checks word their messages for the reference backend: say who we are (this
     * backend's own limits already do). */
    static const char prefix[] = "reference: ";
    size_t k = sizeof prefix - 1;
    if (strncmp(err->msg, prefix, k) != 0) return s;
    memmove(err->msg, err->msg + k, strlen(err->msg + k) + 1);
    return qvl_error_prefix(err, "cuda_sm61");
}

qvl_status cu_check_matmul(const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_check_matmul(n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *a = &n->src[0]->desc, *w = &n->src[1]->desc;
    if (w->ndim == 3 && a->shape[0] > CU_MAX_GRID_YZ)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "batch %lld is above this kernel's %d",
                       (long long)a->shape[0], CU_MAX_GRID_YZ);
    int64_t per_batch = ref_n_rows(a) / (w->ndim == 3 ? a->shape[0] : 1);
    if (per_batch > (int64_t)CU_MAX_GRID_YZ * 16)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "%lld rows are above this kernel's limit",
                       (long long)per_batch);
    return QVL_OK;
}

qvl_status cu_check_attention(const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_check_attention(n, err);
    if (s != QVL_OK) return s;
    int64_t D = n->src[0]->desc.shape[2];
    if (D > CU_ATTN_MAX_D)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "head size %lld is above this kernel's %d",
                       (long long)D, CU_ATTN_MAX_D);
    return QVL_OK;
}

qvl_status cu_check_norm_rope(const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_check_norm_rope(n, err);
    if (s != QVL_OK) return s;
    int64_t D = n->src[0]->desc.shape[2];
    if (D > CU_NORM_ROPE_MAX_D)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "head size %lld is above this kernel's %d",
                       (long long)D, CU_NORM_ROPE_MAX_D);
    return QVL_OK;
}
