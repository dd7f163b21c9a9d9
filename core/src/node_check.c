/* The op contract applied to a node, and a backend's declaration on top of it (see
 * backend_helpers.h). */
#include <stdarg.h>
#include <stdio.h>

#include "qvl/backend_helpers.h"

static qvl_status output_mismatch(const qvl_node *n, qvl_error *err, const qvl_tensor_desc *got,
                                  const qvl_tensor_desc *want) {
    char g[96], w[96];
    return qvl_fail(err, QVL_E_SHAPE, "%s%s%s%s: output is %s, expected %s", qvl_op_name(n->op),
                    n->name ? " '" : "", n->name ? n->name : "", n->name ? "'" : "",
                    qvl_desc_str(got, g, sizeof g), qvl_desc_str(want, w, sizeof w));
}

qvl_status qvl_node_check(const qvl_node *n, qvl_error *err) {
    if (!n || (int)n->op < 0 || n->op >= QVL_OP_COUNT)
        return qvl_fail(err, QVL_E_INVALID, "node with an unknown op");
    if (!n->dst) return qvl_fail(err, QVL_E_INVALID, "%s: node has no output", qvl_op_name(n->op));
    if (n->n_src > QVL_MAX_SRC)
        return qvl_fail(err, QVL_E_INVALID, "%s: %u inputs (at most %d)", qvl_op_name(n->op),
                        n->n_src, QVL_MAX_SRC);
    const qvl_tensor_desc *src[QVL_MAX_SRC] = {0};
    for (uint32_t i = 0; i < n->n_src; i++) src[i] = n->src[i] ? &n->src[i]->desc : NULL;
    qvl_tensor_desc want = n->dst->desc; /* VIEW reads its output descriptor from here */
    qvl_status s = qvl_op_infer(n->op, &n->params, n->n_src, src, &want, err);
    if (s != QVL_OK) {
        if (err && n->name) qvl_error_prefix(err, "node '%s'", n->name);
        return s;
    }
    const qvl_tensor_desc *got = &n->dst->desc;
    bool same = got->dtype == want.dtype && got->ndim == want.ndim;
    for (int i = 0; same && i < want.ndim; i++)
        same = got->shape[i] == want.shape[i] &&
               (got->shape[i] == 1 || got->stride[i] == want.stride[i]);
    if (!same) return output_mismatch(n, err, got, &want);
    return QVL_OK;
}

qvl_status qvl_node_fail(const char *backend, const qvl_node *n, qvl_error *err, qvl_status s,
                         const char *fmt, ...) {
    if (!err) return s;
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *op = n ? qvl_op_name(n->op) : "?";
    if (n && n->name) return qvl_fail(err, s, "%s: %s '%s': %s", backend, op, n->name, what);
    return qvl_fail(err, s, "%s: %s: %s", backend, op, what);
}

qvl_status qvl_backend_check(const qvl_backend_iface *iface, qvl_backend *be,
                             const qvl_node *n, qvl_error *err) {
    if (!iface) return qvl_fail(err, QVL_E_INVALID, "no backend to ask");
    const char *who = iface->name ? iface->name : "backend";
    qvl_status s = qvl_node_check(n, err);
    if (s != QVL_OK) return err ? qvl_error_prefix(err, "%s", who) : s;
    if (!qvl_backend_kernel(iface, n->op))
        return qvl_node_fail(who, n, err, QVL_E_UNSUPPORTED, "this backend has no kernel for it");
    const qvl_op_impl *impl = &iface->ops[n->op];
    for (uint32_t i = 0; i < n->n_src; i++) {
        const qvl_tensor *t = n->src[i];
        uint32_t reads = impl->dtypes[i] ? impl->dtypes[i] : QVL_DTYPES_BASE;
        if (!t || (reads & QVL_DTYPE_BIT(t->desc.dtype))) continue;
        return qvl_node_fail(who, n, err, QVL_E_UNSUPPORTED,
                             "input %u (%s) is %s, which this backend does not read there", i,
                             qvl_op_slot_name(n->op, i), qvl_dtype_name(t->desc.dtype));
    }
    if (iface->accepts && (s = iface->accepts(be, n, err)) != QVL_OK) return s;
    return QVL_OK;
}

qvl_status qvl_kernel_begin(const qvl_backend_iface *iface, qvl_backend *be, const qvl_node *n,
                            qvl_error *err) {
    qvl_status s = qvl_backend_check(iface, be, n, err);
    if (s != QVL_OK) return s;
    const char *who = iface->name ? iface->name : "backend";
    for (uint32_t i = 0; i < n->n_src; i++)
        if (n->src[i] && !n->src[i]->data)
            return qvl_node_fail(who, n, err, QVL_E_INVALID, "input %u (%s) has no memory", i,
                                 qvl_op_slot_name(n->op, i));
    if (!n->dst->data) return qvl_node_fail(who, n, err, QVL_E_INVALID, "output has no memory");
    return QVL_OK;
}
