/* Running one case on one backend, the same way for every backend: each storage in its own
 * buffer (buffer_alloc + upload), the node's tensors pointing into those buffers, the kernel,
 * synchronize, and the check tensor's storage downloaded. Support and kernels are asked only
 * through qvl_test_supports / qvl_test_kernel (tests/support/test_backend.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

bool conf_contract_ok(const conf_case *c, qvl_error *err) {
    const qvl_tensor_desc *src[QVL_MAX_SRC] = {0};
    for (int i = 0; i < QVL_MAX_SRC; i++)
        if (c->src[i] >= 0) src[i] = &c->t[c->src[i]].desc;
    qvl_tensor_desc want = c->t[c->dst].desc;
    if (qvl_op_infer(c->op, &c->params, qvl_op_max_inputs(c->op), src, &want, err) != QVL_OK)
        return false;
    const qvl_tensor_desc *got = &c->t[c->dst].desc;
    bool same = got->dtype == want.dtype && got->ndim == want.ndim;
    for (int i = 0; same && i < want.ndim; i++)
        same = got->shape[i] == want.shape[i] &&
               (got->shape[i] == 1 || got->stride[i] == want.stride[i]);
    if (!same) {
        char g[96], w[96];
        qvl_fail(err, QVL_E_SHAPE, "output is %s, the op makes %s", qvl_desc_str(got, g, sizeof g),
                 qvl_desc_str(&want, w, sizeof w));
        return false;
    }
    return true;
}

conf_outcome conf_run(const qvl_test_backend *tb, const conf_case *c, unsigned char **out,
                      qvl_status *kernel_status, qvl_error *err) {
    return conf_run_kernel(tb, c, true, NULL, out, kernel_status, err);
}

conf_outcome conf_run_kernel(const qvl_test_backend *tb, const conf_case *c, bool obey_supports,
                             bool *supported, unsigned char **out, qvl_status *kernel_status,
                             qvl_error *err) {
    const qvl_backend_iface *f = tb->iface;
    qvl_buffer bufs[CONF_MAX_STORAGES];
    int n_bufs = 0;
    conf_outcome result = CONF_FAILED;
    *out = NULL;
    *kernel_status = QVL_OK;

    for (; n_bufs < c->n_st; n_bufs++) {
        const conf_storage *s = &c->st[n_bufs];
        if (f->buffer_alloc(tb->be, s->pad + s->bytes, &bufs[n_bufs], err) != QVL_OK) goto done;
        if (f->upload(tb->be, (char *)bufs[n_bufs].data + s->pad, s->host, s->bytes, err) != QVL_OK) {
            n_bufs++;
            goto done;
        }
    }

    qvl_tensor tensors[CONF_MAX_TENSORS];
    for (int i = 0; i < c->n_t; i++) {
        const conf_tensor *t = &c->t[i];
        tensors[i].desc = t->desc;
        tensors[i].data = (char *)bufs[t->storage].data + c->st[t->storage].pad + t->byte_off;
    }
    qvl_node node;
    memset(&node, 0, sizeof node);
    node.op = c->op;
    node.params = c->params;
    node.n_src = qvl_op_max_inputs(c->op);
    for (int i = 0; i < QVL_MAX_SRC; i++) node.src[i] = c->src[i] >= 0 ? &tensors[c->src[i]] : NULL;
    node.dst = &tensors[c->dst];
    node.name = "conformance";

    bool yes = qvl_test_supports(tb, &node, err) == QVL_OK;
    if (supported) *supported = yes;
    qvl_kernel_fn kernel = qvl_test_kernel(tb, c->op);
    if ((!yes && obey_supports) || !kernel) {
        result = CONF_UNSUPPORTED;
        goto done;
    }
    *kernel_status = kernel(tb->be, &node, err);
    if (*kernel_status != QVL_OK) goto done;
    if (f->synchronize(tb->be, err) != QVL_OK) goto done;

    const conf_storage *cs = &c->st[c->t[c->check].storage];
    *out = malloc(cs->bytes ? cs->bytes : 1);
    if (!*out) {
        qvl_fail(err, QVL_E_NOMEM, "out of memory");
        goto done;
    }
    if (f->download(tb->be, *out, (char *)bufs[c->t[c->check].storage].data + cs->pad, cs->bytes,
                    err) != QVL_OK) {
        free(*out);
        *out = NULL;
        goto done;
    }
    result = CONF_RAN;
done:
    for (int i = 0; i < n_bufs; i++) f->buffer_free(tb->be, &bufs[i]);
    return result;
}
