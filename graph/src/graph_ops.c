/* One-line conveniences over qvl_g_node for the compute ops. */
#include <string.h>

#include "graph_internal.h"

static qvl_tid node(qvl_graph *g, qvl_op op, const qvl_params *p, qvl_tid a, qvl_tid b,
                    qvl_tid c) {
    qvl_tid src[QVL_MAX_SRC];
    for (int i = 0; i < QVL_MAX_SRC; i++) src[i] = -1;
    src[0] = a;
    src[1] = b;
    src[2] = c;
    return qvl_g_node(g, op, p, src, NULL, NULL);
}

static qvl_params no_params(void) {
    qvl_params p;
    memset(&p, 0, sizeof p);
    return p;
}

qvl_tid qvl_g_get_rows(qvl_graph *g, qvl_tid table, qvl_tid ids) {
    qvl_params p = no_params();
    return node(g, QVL_OP_GET_ROWS, &p, table, ids, -1);
}

qvl_tid qvl_g_matmul(qvl_graph *g, qvl_tid a, qvl_tid w, qvl_tid bias) {
    qvl_params p = no_params();
    return node(g, QVL_OP_MATMUL, &p, a, w, bias);
}

qvl_tid qvl_g_add(qvl_graph *g, qvl_tid a, qvl_tid b) {
    qvl_params p = no_params();
    return node(g, QVL_OP_ADD, &p, a, b, -1);
}

qvl_tid qvl_g_mul(qvl_graph *g, qvl_tid a, qvl_tid b) {
    qvl_params p = no_params();
    return node(g, QVL_OP_MUL, &p, a, b, -1);
}

qvl_tid qvl_g_scale(qvl_graph *g, qvl_tid x, float s) {
    qvl_params p = no_params();
    p.scale.s = s;
    return node(g, QVL_OP_SCALE, &p, x, -1, -1);
}

qvl_tid qvl_g_rms_norm(qvl_graph *g, qvl_tid x, qvl_tid gamma, float eps) {
    qvl_params p = no_params();
    p.norm.eps = eps;
    return node(g, QVL_OP_RMS_NORM, &p, x, gamma, -1);
}

qvl_tid qvl_g_layer_norm(qvl_graph *g, qvl_tid x, qvl_tid gamma, qvl_tid beta, float eps) {
    qvl_params p = no_params();
    p.norm.eps = eps;
    return node(g, QVL_OP_LAYER_NORM, &p, x, gamma, beta);
}

qvl_tid qvl_g_rope(qvl_graph *g, qvl_tid x, qvl_tid pos, const qvl_rope_params *rp) {
    qvl_params p = no_params();
    if (rp) p.rope = *rp;
    if (!rp && g && g->err.status == QVL_OK) {
        qvl_fail(&g->err, QVL_E_INVALID, "graph: rope without parameters");
        return -1;
    }
    return node(g, QVL_OP_ROPE, &p, x, pos, -1);
}

qvl_tid qvl_g_softmax(qvl_graph *g, qvl_tid x) {
    qvl_params p = no_params();
    return node(g, QVL_OP_SOFTMAX, &p, x, -1, -1);
}

qvl_tid qvl_g_argmax(qvl_graph *g, qvl_tid x) {
    qvl_params p = no_params();
    return node(g, QVL_OP_ARGMAX, &p, x, -1, -1);
}

qvl_tid qvl_g_unary(qvl_graph *g, qvl_op op, qvl_tid x) {
    if (g && g->err.status == QVL_OK && op != QVL_OP_SILU && op != QVL_OP_GELU_TANH &&
        op != QVL_OP_GELU_ERF) {
        qvl_fail(&g->err, QVL_E_INVALID, "graph: %s is not a unary activation",
                 qvl_op_name(op));
        return -1;
    }
    qvl_params p = no_params();
    return node(g, op, &p, x, -1, -1);
}

qvl_tid qvl_g_mask_causal(qvl_graph *g, qvl_tid s, int64_t n_past) {
    qvl_params p = no_params();
    p.mask.n_past = n_past;
    return node(g, QVL_OP_MASK_CAUSAL, &p, s, -1, -1);
}

qvl_tid qvl_g_mask_causal_at(qvl_graph *g, qvl_tid s, qvl_tid at) {
    qvl_params p = no_params();
    return node(g, QVL_OP_MASK_CAUSAL_AT, &p, s, at, -1);
}

qvl_tid qvl_g_mask_segments(qvl_graph *g, qvl_tid s, qvl_tid seg) {
    qvl_params p = no_params();
    return node(g, QVL_OP_MASK_SEGMENTS, &p, s, seg, -1);
}

qvl_tid qvl_g_cont(qvl_graph *g, qvl_tid x) {
    qvl_params p = no_params();
    return node(g, QVL_OP_CONT, &p, x, -1, -1);
}

qvl_tid qvl_g_store_rows(qvl_graph *g, qvl_tid dst, qvl_tid src, int64_t offset) {
    qvl_params p = no_params();
    p.store.offset = offset;
    return node(g, QVL_OP_STORE_ROWS, &p, dst, src, -1);
}

qvl_tid qvl_g_store_rows_at(qvl_graph *g, qvl_tid dst, qvl_tid src, qvl_tid at) {
    qvl_params p = no_params();
    return node(g, QVL_OP_STORE_ROWS_AT, &p, dst, src, at);
}

qvl_tid qvl_g_store_slot_rows(qvl_graph *g, qvl_tid dst, qvl_tid src, qvl_tid slot, qvl_tid at) {
    qvl_params p = no_params();
    qvl_tid in[QVL_MAX_SRC];
    for (int i = 0; i < QVL_MAX_SRC; i++) in[i] = -1;
    in[0] = dst;
    in[1] = src;
    in[2] = slot;
    in[3] = at;
    return qvl_g_node(g, QVL_OP_STORE_SLOT_ROWS, &p, in, NULL, NULL);
}

qvl_tid qvl_g_attention_slots(qvl_graph *g, qvl_tid q, qvl_tid k, qvl_tid v, qvl_tid slot,
                              qvl_tid at, float scale) {
    qvl_params p = no_params();
    p.attention.scale = scale;
    p.attention.mask = QVL_MASK_CAUSAL_AT;
    qvl_tid in[QVL_MAX_SRC];
    for (int i = 0; i < QVL_MAX_SRC; i++) in[i] = -1;
    in[0] = q;
    in[1] = k;
    in[2] = v;
    in[3] = slot;
    in[4] = at;
    return qvl_g_node(g, QVL_OP_ATTENTION_SLOTS, &p, in, NULL, NULL);
}
