/* The Qwen3-VL text decoder as a graph of primitive ops (docs/MODEL.md, "Text decoder").
 * Attention is spelled out op by op (permute, matmul, scale, causal mask, softmax, matmul,
 * permute, cont) so that the fusion pass has real work to do; the chain is the exact shape its
 * matchers look for. Over a q8_0 KV cache the chain has no form (a transposed V view would
 * split q8_0's 32-element blocks), so there the graph holds the ATTENTION node itself
 * (ops.h), and the backend that runs the layer must take it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "qvl/qwen3vl_graph.h"
#include "graph_weights.h"

#define TEXT_PREFIX "model.language_model."

static qvl_tid named(qvl_graph *g, qvl_tid t, const char *fmt, ...) QVL_PRINTF(3, 4);
static qvl_tid named(qvl_graph *g, qvl_tid t, const char *fmt, ...) {
    if (t < 0) return t;
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    qvl_g_name(g, t, "%s", buf);
    return t;
}

static qvl_tid weight(qvl_graph *g, qvl_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt,
                      ...) QVL_PRINTF(6, 7);
static qvl_tid weight(qvl_graph *g, qvl_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt,
                      ...) {
    char buf[QVL_TENSOR_NAME_MAX + 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const int64_t shape[2] = {d0, d1};
    return qvl_g_weight(g, buf, dt, ndim, shape);
}

typedef struct text_dims {
    int64_t n, hidden, heads, kv_heads, head_dim, ffn;
    float eps;
    qvl_dtype ndt;
    qwen_matrices mat; /* the matrices' dtypes */
} text_dims;

/* SET_ROWS / ADD_ROWS of src into the rows idx of x. */
static qvl_tid scatter_rows(qvl_graph *g, qvl_op op, qvl_tid x, qvl_tid idx, qvl_tid src) {
    const qvl_tid in[3] = {x, idx, src};
    return qvl_g_node(g, op, NULL, in, NULL, NULL);
}

/* One sequence's view of a layer's attention: where its cache lives and where it is written. */
typedef struct attn_seq {
    const char *prefix; /* of the cache inputs: "" (one sequence) or "s<i>." (a batch) */
    qvl_tid kv_at;      /* [1] i32 input: rows already in the cache; -1: n_past instead */
    int64_t n_past;     /* rows already in the cache, when they are a constant */
} attn_seq;

/* Attention of n query rows of one sequence: append k, v [n, Hkv, D] to the sequence's cache
 * of layer l and attend q [n, H, D] over it; returns the context [n, H*D]. */
static qvl_tid attend(qvl_graph *g, const text_dims *d, int l, qvl_tid q, qvl_tid k, qvl_tid v,
                      int64_t n, const attn_seq *sq, const qvl_text_graph_opts *o) {
    const int64_t H = d->heads, Hkv = d->kv_heads, D = d->head_dim;
    /* Append to the cache; the result holds every key/value seen so far [n_past+n, Hkv, D]
     * (with kv_at: the whole cache [kv_capacity, Hkv, D], valid up to row kv_at+n). */
    char name[64];
    snprintf(name, sizeof name, "%skv.%d.k", sq->prefix, l);
    const int64_t cache_shape[3] = {o->kv_capacity, Hkv, D};
    qvl_tid kc = qvl_g_input(g, name, o->kv_dtype, 3, cache_shape);
    snprintf(name, sizeof name, "%skv.%d.v", sq->prefix, l);
    qvl_tid vc = qvl_g_input(g, name, o->kv_dtype, 3, cache_shape);
    qvl_tid k_all = sq->kv_at >= 0 ? qvl_g_store_rows_at(g, kc, k, sq->kv_at)
                                   : qvl_g_store_rows(g, kc, k, sq->n_past);
    qvl_tid v_all = sq->kv_at >= 0 ? qvl_g_store_rows_at(g, vc, v, sq->kv_at)
                                   : qvl_g_store_rows(g, vc, v, sq->n_past);
    named(g, k_all, "blk.%d.%sk_cache", l, sq->prefix);
    named(g, v_all, "blk.%d.%sv_cache", l, sq->prefix);
    const int64_t flat[2] = {n, H * D};

    if (qvl_dtype_is_quant(o->kv_dtype)) {
        qvl_params p = {.attention = {.scale = (float)(1.0 / sqrt((double)D))}};
        qvl_tid src[QVL_MAX_SRC];
        for (int i = 0; i < QVL_MAX_SRC; i++) src[i] = -1;
        src[0] = q;
        src[1] = k_all;
        src[2] = v_all;
        if (sq->kv_at >= 0) {
            p.attention.mask = QVL_MASK_CAUSAL_AT;
            src[3] = sq->kv_at;
        } else {
            p.attention.mask = QVL_MASK_CAUSAL;
            p.attention.n_past = sq->n_past;
        }
        qvl_tid ctx = named(g, qvl_g_node(g, QVL_OP_ATTENTION, &p, src, NULL, NULL),
                            "blk.%d.%sattn_ctx_cont", l, sq->prefix); /* [n,H,D] */
        return named(g, qvl_g_reshape(g, ctx, 2, flat), "blk.%d.%sattn_ctx_flat", l, sq->prefix);
    }

    static const int perm_swap01[3] = {1, 0, 2};
    static const int perm_v[3] = {1, 2, 0};
    qvl_tid qp = named(g, qvl_g_permute(g, q, perm_swap01), "blk.%d.%sattn_q_perm", l,
                       sq->prefix);                                                /* [H,n,D] */
    qvl_tid kp = named(g, qvl_g_permute(g, k_all, perm_swap01), "blk.%d.%sattn_k_perm", l,
                       sq->prefix);                                                /* [Hkv,L,D] */
    qvl_tid vp = named(g, qvl_g_permute(g, v_all, perm_v), "blk.%d.%sattn_v_perm", l,
                       sq->prefix);                                                /* [Hkv,D,L] */

    qvl_tid s = named(g, qvl_g_matmul(g, qp, kp, -1), "blk.%d.%sattn_scores", l, sq->prefix);
    s = named(g, qvl_g_scale(g, s, (float)(1.0 / sqrt((double)D))), "blk.%d.%sattn_scaled", l,
              sq->prefix);
    s = sq->kv_at >= 0 ? qvl_g_mask_causal_at(g, s, sq->kv_at) : qvl_g_mask_causal(g, s, sq->n_past);
    s = named(g, s, "blk.%d.%sattn_masked", l, sq->prefix);
    s = named(g, qvl_g_softmax(g, s), "blk.%d.%sattn_probs", l, sq->prefix);
    qvl_tid ctx = named(g, qvl_g_matmul(g, s, vp, -1), "blk.%d.%sattn_ctx", l, sq->prefix);
    ctx = named(g, qvl_g_permute(g, ctx, perm_swap01), "blk.%d.%sattn_ctx_perm", l, sq->prefix);
    ctx = named(g, qvl_g_cont(g, ctx), "blk.%d.%sattn_ctx_cont", l, sq->prefix);
    return named(g, qvl_g_reshape(g, ctx, 2, flat), "blk.%d.%sattn_ctx_flat", l, sq->prefix);
}

/* The rows' sequences in a batched step: per-sequence inputs (seqs, rows) or, with a pool,
 * each row's slot and cache length as data. */
typedef struct attn_rows {
    const attn_seq *seqs;
    int64_t n_seqs;
    const int64_t *seq_rows; /* rows of each sequence, in order; NULL: one each */
    const qvl_tid *rows;     /* where each sequence's rows go back in the context */
    qvl_tid slot, at; /* pooled: the [N] i32 inputs "slot" and "kv_at"; else -1 */
} attn_rows;

/* Attention of one query row per sequence over the pooled caches of layer l: store each row's
 * k and v at (slot[i], at[i]), then attend; returns the context [N, H*D]. */
static qvl_tid pooled_attend(qvl_graph *g, const text_dims *d, int l, qvl_tid q, qvl_tid k,
                             qvl_tid v, const attn_rows *r, const qvl_text_graph_opts *o) {
    const int64_t H = d->heads, Hkv = d->kv_heads, D = d->head_dim;
    const int64_t pool_shape[4] = {o->kv_pool_slots, o->kv_capacity, Hkv, D};
    char name[64];
    snprintf(name, sizeof name, "pool.kv.%d.k", l);
    qvl_tid kc = qvl_g_input(g, name, o->kv_dtype, 4, pool_shape);
    snprintf(name, sizeof name, "pool.kv.%d.v", l);
    qvl_tid vc = qvl_g_input(g, name, o->kv_dtype, 4, pool_shape);
    qvl_tid k_all = named(g, qvl_g_store_slot_rows(g, kc, k, r->slot, r->at), "blk.%d.k_cache", l);
    qvl_tid v_all = named(g, qvl_g_store_slot_rows(g, vc, v, r->slot, r->at), "blk.%d.v_cache", l);
    qvl_tid ctx = named(g, qvl_g_attention_slots(g, q, k_all, v_all, r->slot, r->at,
                                                 (float)(1.0 / sqrt((double)D))),
                        "blk.%d.attn_ctx_cont", l); /* [N, H, D] */
    const int64_t flat[2] = {d->n, H * D};
    return named(g, qvl_g_reshape(g, ctx, 2, flat), "blk.%d.attn_ctx_flat", l);
}

/* Self-attention of layer l on the normalised input x [N, hidden]; returns [N, hidden]. The
 * projections, norms and rotations run on all N rows at once; attention runs per sequence:
 * one (seqs[0], all rows) or, in a batched step, each sequence's rows (one in a decode step,
 * seq_rows[i] in a batched prefill) over its own cache. The rows' contexts are then gathered
 * back into [N, H*D] (SET_ROWS at "row.<i>" / "rows.<i>") for o_proj. */
static qvl_tid build_attention(qvl_graph *g, const text_dims *d, int l, qvl_tid x, qvl_tid pos,
                               const attn_rows *r, const qvl_rope_params *rope,
                               const qvl_text_graph_opts *o) {
    const attn_seq *seqs = r->seqs;
    const int64_t n_seqs = r->n_seqs;
    const int64_t N = d->n, H = d->heads, Hkv = d->kv_heads, D = d->head_dim;
    const int64_t q_out = H * D, kv_out = Hkv * D;
    qvl_tid wq = qwen_matrix(g, &d->mat, q_out, d->hidden,
                             TEXT_PREFIX "layers.%d.self_attn.q_proj.weight", l);
    qvl_tid wk = qwen_matrix(g, &d->mat, kv_out, d->hidden,
                             TEXT_PREFIX "layers.%d.self_attn.k_proj.weight", l);
    qvl_tid wv = qwen_matrix(g, &d->mat, kv_out, d->hidden,
                             TEXT_PREFIX "layers.%d.self_attn.v_proj.weight", l);
    qvl_tid wo = qwen_matrix(g, &d->mat, d->hidden, q_out,
                             TEXT_PREFIX "layers.%d.self_attn.o_proj.weight", l);
    qvl_tid qn_w = weight(g, d->ndt, 1, D, 1, TEXT_PREFIX "layers.%d.self_attn.q_norm.weight", l);
    qvl_tid kn_w = weight(g, d->ndt, 1, D, 1, TEXT_PREFIX "layers.%d.self_attn.k_norm.weight", l);

    qvl_tid q_raw = named(g, qvl_g_matmul(g, x, wq, -1), "blk.%d.attn_q", l);
    qvl_tid k = named(g, qvl_g_matmul(g, x, wk, -1), "blk.%d.attn_k", l);
    qvl_tid v = named(g, qvl_g_matmul(g, x, wv, -1), "blk.%d.attn_v", l);

    const int64_t q_shape[3] = {N, H, D}, kv_shape[3] = {N, Hkv, D};
    qvl_tid q = named(g, qvl_g_reshape(g, q_raw, 3, q_shape), "blk.%d.attn_q_heads", l);
    k = named(g, qvl_g_reshape(g, k, 3, kv_shape), "blk.%d.attn_k_heads", l);
    v = named(g, qvl_g_reshape(g, v, 3, kv_shape), "blk.%d.attn_v_heads", l);

    /* q_norm / k_norm act on each head vector, before rope. */
    q = named(g, qvl_g_rms_norm(g, q, qn_w, d->eps), "blk.%d.attn_q_norm", l);
    k = named(g, qvl_g_rms_norm(g, k, kn_w, d->eps), "blk.%d.attn_k_norm", l);
    q = named(g, qvl_g_rope(g, q, pos, rope), "blk.%d.attn_q_rope", l);
    k = named(g, qvl_g_rope(g, k, pos, rope), "blk.%d.attn_k_rope", l);

    qvl_tid ctx;
    if (r->slot >= 0) {
        ctx = pooled_attend(g, d, l, q, k, v, r, o);
    } else if (n_seqs == 1) {
        ctx = attend(g, d, l, q, k, v, N, &seqs[0], o);
    } else {
        ctx = q_raw; /* [N, H*D]: every row is replaced below */
        int64_t r0 = 0; /* sequence i's first row */
        for (int64_t i = 0; i < n_seqs; i++) {
            const int64_t len = r->seq_rows ? r->seq_rows[i] : 1;
            qvl_tid qi = qvl_g_slice(g, q, 0, r0, len), ki = qvl_g_slice(g, k, 0, r0, len);
            qvl_tid vi = qvl_g_slice(g, v, 0, r0, len);
            qvl_tid ci = attend(g, d, l, qi, ki, vi, len, &seqs[i], o);
            ctx = named(g, scatter_rows(g, QVL_OP_SET_ROWS, ctx, r->rows[i], ci),
                        "blk.%d.attn_ctx_rows_%lld", l, (long long)i);
            r0 += len;
        }
    }
    return named(g, qvl_g_matmul(g, ctx, wo, -1), "blk.%d.attn_out", l);
}

/* SwiGLU MLP of layer l on the normalised input x; returns the down projection. */
static qvl_tid build_mlp(qvl_graph *g, const text_dims *d, int l, qvl_tid x) {
    qvl_tid wg =
        qwen_matrix(g, &d->mat, d->ffn, d->hidden, TEXT_PREFIX "layers.%d.mlp.gate_proj.weight", l);
    qvl_tid wu =
        qwen_matrix(g, &d->mat, d->ffn, d->hidden, TEXT_PREFIX "layers.%d.mlp.up_proj.weight", l);
    qvl_tid wd =
        qwen_matrix(g, &d->mat, d->hidden, d->ffn, TEXT_PREFIX "layers.%d.mlp.down_proj.weight", l);
    qvl_tid gate = named(g, qvl_g_matmul(g, x, wg, -1), "blk.%d.ffn_gate", l);
    qvl_tid up = named(g, qvl_g_matmul(g, x, wu, -1), "blk.%d.ffn_up", l);
    qvl_tid act = named(g, qvl_g_unary(g, QVL_OP_SILU, gate), "blk.%d.ffn_act", l);
    qvl_tid gu = named(g, qvl_g_mul(g, act, up), "blk.%d.ffn_gated", l);
    return named(g, qvl_g_matmul(g, gu, wd, -1), "blk.%d.ffn_down", l);
}

static qvl_status check_opts(const qvl_qwen3vl_config *cfg, const qvl_text_graph_opts *o,
                             qvl_error *err) {
    if (!cfg || !o) return qvl_fail(err, QVL_E_INVALID, "text graph: no config or options");
    if (o->n_tokens < 1)
        return qvl_fail(err, QVL_E_INVALID, "text graph: n_tokens must be >= 1 (got %lld)",
                        (long long)o->n_tokens);
    if (o->n_past < 0 || (o->kv_at_input && o->n_past != 0))
        return qvl_fail(err, QVL_E_INVALID, "text graph: n_past must be >= 0, and 0 when it is "
                        "an input (got %lld)", (long long)o->n_past);
    /* (a batched prefill's rows are spread over its sequences' caches: checked below) */
    const bool prefill_batch = o->n_seqs > 1 && o->seq_rows;
    if (o->kv_capacity < o->n_past || (!prefill_batch && o->kv_capacity - o->n_past < o->n_tokens))
        return qvl_fail(err, QVL_E_LIMIT,
                        "text graph: kv_capacity %lld cannot hold n_past %lld + n_tokens %lld",
                        (long long)o->kv_capacity, (long long)o->n_past, (long long)o->n_tokens);
    if (o->kv_pool_slots < 0 || o->kv_pool_slots > INT32_MAX)
        return qvl_fail(err, QVL_E_INVALID, "text graph: kv_pool_slots %lld is out of range",
                        (long long)o->kv_pool_slots);
    if (o->n_seqs > 1 && !prefill_batch &&
        (o->n_seqs > QVL_TEXT_MAX_SEQS || o->n_seqs != o->n_tokens || !o->kv_at_input ||
         o->n_image_tokens > 0 || !o->all_logits))
        return qvl_fail(err, QVL_E_INVALID, "text graph: a batch of %lld sequences needs one "
                        "token each (at most %d), kv_at inputs, all logits and no images",
                        (long long)o->n_seqs, QVL_TEXT_MAX_SEQS);
    if (prefill_batch) {
        if (o->n_seqs > QVL_TEXT_MAX_SEQS || !o->seq_past || o->kv_at_input ||
            o->kv_pool_slots > 0 || o->all_logits || o->n_image_tokens > 0 || o->n_past != 0)
            return qvl_fail(err, QVL_E_INVALID, "text graph: a batched prefill of %lld "
                            "sequences needs at most %d of them, their cache lengths, no kv_at "
                            "inputs, no pool, no n_past, the last logits only and no images",
                            (long long)o->n_seqs, QVL_TEXT_MAX_SEQS);
        int64_t sum = 0;
        for (int64_t i = 0; i < o->n_seqs; i++) {
            const int64_t len = o->seq_rows[i], past = o->seq_past[i];
            if (len < 1 || past < 0 || past > o->kv_capacity || o->kv_capacity - past < len)
                return qvl_fail(err, QVL_E_LIMIT, "text graph: sequence %lld's %lld rows after "
                                "%lld cached do not fit kv_capacity %lld", (long long)i,
                                (long long)len, (long long)past, (long long)o->kv_capacity);
            sum += len;
        }
        if (sum != o->n_tokens)
            return qvl_fail(err, QVL_E_INVALID, "text graph: the sequences' %lld rows are not "
                            "n_tokens %lld", (long long)sum, (long long)o->n_tokens);
    }
    if (o->n_image_tokens < 0 || o->n_image_tokens > o->n_tokens || o->n_deepstack < 0 ||
        (o->n_image_tokens == 0 && o->n_deepstack > 0) ||
        o->n_deepstack > cfg->text.num_hidden_layers)
        return qvl_fail(err, QVL_E_INVALID,
                        "text graph: %lld image tokens and %d deepstack inputs do not fit %lld "
                        "tokens and %lld layers",
                        (long long)o->n_image_tokens, (int)o->n_deepstack, (long long)o->n_tokens,
                        (long long)cfg->text.num_hidden_layers);
    if (o->greedy_vocab < 0 || o->greedy_vocab > cfg->text.vocab_size)
        return qvl_fail(err, QVL_E_INVALID, "text graph: greedy_vocab %d is outside [0, %lld]",
                        (int)o->greedy_vocab, (long long)cfg->text.vocab_size);
    if (!qvl_dtype_valid(o->weight_dtype) || o->weight_dtype == QVL_I32 ||
        !qvl_dtype_valid(o->norm_dtype) || o->norm_dtype == QVL_I32)
        return qvl_fail(err, QVL_E_DTYPE, "text graph: weight and norm dtypes must be float types");
    if (!qvl_dtype_is_float(o->kv_dtype) && o->kv_dtype != QVL_Q8_0)
        return qvl_fail(err, QVL_E_DTYPE,
                        "text graph: the KV cache dtype %s is not f32, f16, bf16 or q8_0",
                        qvl_dtype_name(o->kv_dtype));
    if (o->kv_dtype == QVL_Q8_0 && cfg->text.head_dim % QVL_Q8_0_BLOCK != 0)
        return qvl_fail(err, QVL_E_SHAPE,
                        "text graph: a q8_0 KV cache needs head_dim to be a multiple of %d "
                        "(got %lld)", QVL_Q8_0_BLOCK, (long long)cfg->text.head_dim);
    const qvl_text_config *t = &cfg->text;
    if (t->num_hidden_layers < 1 || t->head_dim < 2 || t->num_key_value_heads < 1 ||
        t->num_attention_heads % t->num_key_value_heads != 0)
        return qvl_fail(err, QVL_E_INVALID, "text graph: config is not validated");
    return QVL_OK;
}

qvl_status qvl_qwen3vl_build_text(const qvl_qwen3vl_config *cfg, const qvl_text_graph_opts *o,
                                  qvl_graph **out, qvl_error *err) {
    if (out) *out = NULL;
    if (!out) return qvl_fail(err, QVL_E_INVALID, "text graph: no output pointer");
    qvl_status st = check_opts(cfg, o, err);
    if (st != QVL_OK) return st;
    const qvl_text_config *t = &cfg->text;
    text_dims d = {
        .n = o->n_tokens,
        .hidden = t->hidden_size,
        .heads = t->num_attention_heads,
        .kv_heads = t->num_key_value_heads,
        .head_dim = t->head_dim,
        .ffn = t->intermediate_size,
        .eps = (float)t->rms_norm_eps,
        .ndt = o->norm_dtype,
        .mat = {o->weight_dtype, o->matrix_dtype_of, o->matrix_dtype_ctx},
    };
    qvl_rope_params rope = {
        .mode = QVL_ROPE_MROPE_INTERLEAVED,
        .theta = (float)t->rope_theta,
        .sections = {t->mrope_section[0], t->mrope_section[1], t->mrope_section[2], 0},
    };

    qvl_graph *g = qvl_graph_new();
    if (!g) return qvl_fail(err, QVL_E_NOMEM, "text graph: out of memory");

    const int64_t N = o->n_tokens;
    const int64_t ids_shape[1] = {N}, pos_shape[2] = {3, N};
    qvl_tid ids = qvl_g_input(g, "ids", QVL_I32, 1, ids_shape);
    qvl_tid pos = qvl_g_input(g, "pos", QVL_I32, 2, pos_shape);
    /* The sequences whose caches the attention reads: one, or one per row (batched decode). */
    const int64_t n_seqs = o->n_seqs > 1 ? o->n_seqs : 1;
    attn_seq seqs[QVL_TEXT_MAX_SEQS];
    qvl_tid rows[QVL_TEXT_MAX_SEQS];
    char seq_names[QVL_TEXT_MAX_SEQS][24]; /* "s<i>." */
    const int64_t one[1] = {1};
    const bool prefill_batch = n_seqs > 1 && o->seq_rows;
    attn_rows arows = {seqs, n_seqs, prefill_batch ? o->seq_rows : NULL, rows, -1, -1};
    if (n_seqs > 1 && o->kv_pool_slots > 0) {
        const int64_t per_row[1] = {n_seqs};
        arows.slot = qvl_g_input(g, "slot", QVL_I32, 1, per_row);
        arows.at = qvl_g_input(g, "kv_at", QVL_I32, 1, per_row);
    }
    for (int64_t i = 0; i < n_seqs && arows.slot < 0; i++) {
        char name[32];
        if (n_seqs > 1) snprintf(seq_names[i], sizeof seq_names[i], "s%lld.", (long long)i);
        else seq_names[i][0] = '\0';
        seqs[i].prefix = seq_names[i];
        seqs[i].n_past = prefill_batch ? o->seq_past[i] : o->n_past;
        if (n_seqs > 1) snprintf(name, sizeof name, "s%lld.kv_at", (long long)i);
        else snprintf(name, sizeof name, "kv_at");
        seqs[i].kv_at = o->kv_at_input ? qvl_g_input(g, name, QVL_I32, 1, one) : -1;
        if (prefill_batch) {
            const int64_t len[1] = {o->seq_rows[i]};
            snprintf(name, sizeof name, "rows.%lld", (long long)i);
            rows[i] = qvl_g_input(g, name, QVL_I32, 1, len);
        } else {
            snprintf(name, sizeof name, "row.%lld", (long long)i);
            rows[i] = n_seqs > 1 ? qvl_g_input(g, name, QVL_I32, 1, one) : -1;
        }
    }
    qvl_tid embed =
        qwen_matrix(g, &d.mat, t->vocab_size, d.hidden, TEXT_PREFIX "embed_tokens.weight");
    qvl_tid h = named(g, qvl_g_get_rows(g, embed, ids), "tok_embd");
    const int64_t K = o->n_image_tokens;
    qvl_tid image_rows = -1;
    if (K > 0) {
        const int64_t rows_shape[1] = {K}, feat_shape[2] = {K, d.hidden};
        image_rows = qvl_g_input(g, "image_rows", QVL_I32, 1, rows_shape);
        qvl_tid feats = qvl_g_input(g, "image_embeds", QVL_F32, 2, feat_shape);
        h = named(g, scatter_rows(g, QVL_OP_SET_ROWS, h, image_rows, feats), "image_embd");
    }

    for (int l = 0; l < (int)t->num_hidden_layers; l++) {
        qvl_g_set_group(g, qvl_text_group_layer(l));
        qvl_tid in_norm =
            weight(g, d.ndt, 1, d.hidden, 1, TEXT_PREFIX "layers.%d.input_layernorm.weight", l);
        qvl_tid post_norm = weight(g, d.ndt, 1, d.hidden, 1,
                                   TEXT_PREFIX "layers.%d.post_attention_layernorm.weight", l);

        qvl_tid x = named(g, qvl_g_rms_norm(g, h, in_norm, d.eps), "blk.%d.attn_norm", l);
        qvl_tid a = build_attention(g, &d, l, x, pos, &arows, &rope, o);
        h = named(g, qvl_g_add(g, h, a), "blk.%d.attn_residual", l);

        x = named(g, qvl_g_rms_norm(g, h, post_norm, d.eps), "blk.%d.ffn_norm", l);
        qvl_tid m = build_mlp(g, &d, l, x);
        h = named(g, qvl_g_add(g, h, m), "blk.%d.ffn_out", l);
        if (l < o->n_deepstack) {
            char name[32];
            snprintf(name, sizeof name, "deepstack.%d", l);
            const int64_t feat_shape[2] = {K, d.hidden};
            qvl_tid ds = qvl_g_input(g, name, QVL_F32, 2, feat_shape);
            h = named(g, scatter_rows(g, QVL_OP_ADD_ROWS, h, image_rows, ds), "blk.%d.deepstack", l);
        }
    }

    /* Row-wise norm commutes with taking the last row, so slice first: the final norm then
     * feeds the output projection directly (one norm+linear) and runs on one row only. */
    qvl_g_set_group(g, qvl_text_group_output(t->num_hidden_layers));
    if (prefill_batch) {
        const int64_t per_seq[1] = {n_seqs};
        qvl_tid last = qvl_g_input(g, "last_rows", QVL_I32, 1, per_seq);
        h = named(g, qvl_g_get_rows(g, h, last), "last_rows");
    } else if (!o->all_logits && N > 1) {
        h = named(g, qvl_g_slice(g, h, 0, N - 1, 1), "last_row");
    }
    qvl_tid norm_w = weight(g, d.ndt, 1, d.hidden, 1, TEXT_PREFIX "norm.weight");
    h = named(g, qvl_g_rms_norm(g, h, norm_w, d.eps), "output_norm");
    qvl_tid lm = cfg->tie_word_embeddings
                     ? embed
                     : qwen_matrix(g, &d.mat, t->vocab_size, d.hidden, "lm_head.weight");
    qvl_tid logits = named(g, qvl_g_matmul(g, h, lm, -1), "logits");
    qvl_g_output(g, logits, "logits");
    if (o->greedy_vocab > 0) {
        qvl_tid choosable = o->greedy_vocab < t->vocab_size
                                ? qvl_g_slice(g, logits, 1, 0, o->greedy_vocab)
                                : logits;
        qvl_g_output(g, named(g, qvl_g_argmax(g, choosable), "argmax"), "argmax");
    }

    st = qvl_graph_error(g, err);
    if (st != QVL_OK) {
        qvl_error_prefix(err, "text graph");
        qvl_graph_free(g);
        return st;
    }
    *out = g;
    return QVL_OK;
}

void qvl_qwen3vl_text_placement(int64_t n_layers, int64_t gpu_layers, int32_t primary,
                                int32_t cpu, int32_t *place) {
    place[qvl_text_group_input()] = gpu_layers >= n_layers ? primary : cpu;
    for (int64_t l = 0; l < n_layers; l++)
        place[qvl_text_group_layer(l)] = l >= n_layers - gpu_layers ? primary : cpu;
    place[qvl_text_group_output(n_layers)] = gpu_layers > 0 ? primary : cpu;
}
