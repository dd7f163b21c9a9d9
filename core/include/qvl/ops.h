/* Ops: the enum, parameters and exact semantics. Generated from ops.def.
 *
 * Conventions for every op:
 *  - Activations are f32. Weights (the "w"/"table"/"gamma" inputs) may be f32, f16, bf16 or
 *    (for matmul-like weights and get_rows tables) a block dtype, q8_0, q4_k or q6_k, whose
 *    rows hold whole blocks (32, 256, 256 elements). Ids, positions and segments are i32.
 *    A KV cache (STORE_ROWS / STORE_ROWS_AT dst, ATTENTION k and v) is f32, f16, bf16 or
 *    q8_0, q8_0 with whole 32-element blocks in its innermost dim.
 *  - Outputs are f32 and contiguous, except VIEW (an alias with its own strides),
 *    STORE_ROWS / STORE_ROWS_AT (aliases of their destination) and ARGMAX (i32). Inputs may be strided views
 *    unless stated otherwise.
 *  - "Rows" are the innermost dimension: a [..., K] tensor has prod(leading dims) rows of K.
 *  - Optional input slots are NULL in qvl_node.src[] (and -1 in graph builders).
 *
 * Op by op (shapes PyTorch-ordered, innermost last):
 *  GET_ROWS(table [V,D], ids [N] i32) -> [N,D]: out[n] = table[ids[n]] (converted to f32).
 *  MATMUL(a, w, bias?) -> a . w^T (+ bias), the nn.Linear convention:
 *     w 2-D [N,K]: a [...,K] -> [...,N]; bias [N] optional.
 *     w 3-D [Bw,N,K]: a [B,M,K] with B % Bw == 0 -> [B,M,N]; batch b uses w batch b / (B/Bw)
 *     (this is how grouped-query attention shares K/V heads). No bias.
 *  ADD(a, b), MUL(a, b) -> shape of a; b broadcasts: aligned on the innermost dims, each of
 *     b's dims equals a's or is 1, and b.ndim <= a.ndim.
 *  SCALE(x) -> x * params.scale.s
 *  RMS_NORM(x [...,D], gamma [D]) -> x / sqrt(mean(x^2) + eps) * gamma, over the innermost dim.
 *  LAYER_NORM(x [...,D], gamma [D], beta [D]?) -> (x - mean) / sqrt(var + eps) * gamma + beta,
 *     biased variance, over the innermost dim.
 *  ROPE(x [N,H,D], pos [C,N] i32) -> rotated x; see qvl_rope_params for the modes.
 *  SOFTMAX(x) over the innermost dim; rows that are all -inf give all 0.
 *  SILU(x) = x*sigmoid(x); GELU_TANH(x) = 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)));
 *  GELU_ERF(x) = 0.5x(1+erf(x/sqrt(2))).
 *  MASK_CAUSAL(s [...,N,L]) -> s with s[...,i,j] = -inf where j > params.mask.n_past + i.
 *  MASK_SEGMENTS(s [...,N,N], seg [G+1] i32) -> s with -inf where query i and key j lie in
 *     different segments; segment g is [seg[g], seg[g+1]), seg[0] = 0, seg[G] = N.
 *  VIEW(x) -> alias of x: the output descriptor (shape, strides, dtype) is the node's own and
 *     element 0 sits params.view.offset elements after x's element 0. No kernel runs.
 *  CONT(x) -> contiguous copy of x (same dtype).
 *  STORE_ROWS(dst [R,...], src [N,...]) -> writes src into rows [off, off+N) of dst, where
 *     off = params.store.offset and a "row" is one index of dim 0 (the other dims must match;
 *     dst must be contiguous). The output is an alias of dst rows [0, off+N): a KV cache write
 *     that yields the keys/values seen so far. src is converted to dst's dtype; into a q8_0
 *     dst every 32-element block of a row is quantised exactly as qvl_quantize_row_q8_0 does
 *     (d = max|x| / 127 rounded to f16, then q = round(x / d) against that stored d, ties away
 *     from zero, clamped to +-127), so every backend writes the same bytes. A q8_0 dst whose
 *     innermost dim is not a whole number of blocks is a shape error.
 *  NORM_LINEAR(x, gamma, beta?, w1, b1?, w2?, b2?, w3?, b3?) -> concat over the innermost dim of
 *     act(NORM(x) . wi^T + bi) for each present wi, NORM = rms_norm or layer_norm
 *     (params.norm_linear). act is params.norm_linear.act, applied to every output element after
 *     its bias: QVL_ACT_NONE (0, the identity), QVL_ACT_GELU_TANH or QVL_ACT_GELU_ERF, with the
 *     formulas of GELU_TANH / GELU_ERF below (a vision MLP's fc1 and its activation in one
 *     node; silu has no ungated user, so it is not allowed). Output [...,N1+N2+N3]; consumers
 *     read slices through VIEW nodes.
 *  ATTENTION(q [N,Hq,D], k [L,Hkv,D], v [L,Hkv,D], seg?) -> [N,Hq,D]:
 *     softmax(mask(scale * q_h . k_g^T)) . v_g per head h, g = h / (Hq/Hkv); the mask is
 *     params.attention.mask (none, causal with n_past, or segments given by seg as in
 *     MASK_SEGMENTS, then N == L). With mask CAUSAL_AT the fourth slot holds at [1] i32
 *     instead of seg: the mask is causal with n_past = at[0] (read from memory at run time),
 *     and keys j >= at[0] + N are never read, so cache rows past those written may hold
 *     anything. Requires at[0] + N <= L; a backend that can check it fails the node, one
 *     that cannot (a GPU kernel) must still never read past L.
 *     k and v may be q8_0 (D a whole number of blocks): values are d * q, read where they lie
 *     (no conversion pass); the result is the same function of those values. Over a q8_0
 *     cache this op has no primitive form (the transposed V view the chain needs would split
 *     blocks), so a model builds ATTENTION itself there instead of the chain, and a backend
 *     that does not take the node refuses the graph.
 *  MLP_RESIDUAL(res [...,D], a [...,F], w_down [D,F], up [...,F]?, b_down [D]?) ->
 *     res + act(a) . w_down^T + b_down, where act(a) = silu(a) * up when up is present
 *     (params.mlp.act must then be QVL_ACT_SILU), else gelu_tanh(a), gelu_erf(a) or, with
 *     QVL_ACT_NONE, a itself: a linear layer and its residual add (attention's o_proj).
 *  SET_ROWS(x [N,D], idx [K] i32, src [K,D]) -> [N,D]: a copy of x in which row idx[k] is
 *     replaced by src[k] for every k (image features into token embeddings; a batched decode
 *     step's attention rows). Indices are data: one outside [0, N) is a run-time error where
 *     the backend can check it; a backend that cannot without waiting for the device (a GPU
 *     kernel) leaves that row as x has it. With repeated indices the last k wins.
 *  ADD_ROWS(x [N,D], idx [K] i32, src [K,D]) -> [N,D]: a copy of x with src[k] added to row
 *     idx[k] (deepstack features at image positions); repeated indices add up, in k order.
 *     An index outside [0, N) is handled as in SET_ROWS.
 *  ARGMAX(x [R,V]) -> [R] i32: the index of the first largest value of each row (greedy
 *     decoding on the device: the ids come back instead of the logits), or -1 for a row that
 *     holds a NaN or +inf or nothing above -inf (the host's sampler refuses such a row; -1
 *     sends it there).
 *
 * Ops whose position comes from data, so that one graph serves every decode step (the KV
 * length changes, the graph does not; a GPU can replay a captured graph). `at` is a [1] i32
 * tensor holding the number of cache rows already written (n_past):
 *  STORE_ROWS_AT(dst [R,...], src [N,...], at [1] i32) -> writes src into rows
 *     [at[0], at[0]+N) of dst like STORE_ROWS; the output is an alias of the whole of dst
 *     ([R,...]). at[0] outside [0, R-N] is a run-time error where the backend can check it;
 *     a backend that cannot (a GPU kernel) writes nothing then.
 *  MASK_CAUSAL_AT(s [...,N,L], at [1] i32) -> MASK_CAUSAL with n_past = at[0]: -inf where
 *     j > at[0] + i. Any at[0] >= 0 is valid (keys past L simply do not exist); a negative
 *     one is a run-time error where the backend can check it. Unlike ATTENTION, the chain
 *     built from this op (scores over every key, softmax, probabilities . V) reads every
 *     cache row, so it is only right when all L rows hold finite values (a masked
 *     probability is exactly 0, and 0 times a finite value adds nothing); the model keeps
 *     every cache row finite by zero-filling a cache when it allocates it.
 *
 * Ops of a batched decode step, one query row per sequence, where every sequence's cache is
 * one slot of a pool [S, R, ...] (the same layer's caches of S sequences side by side), so
 * that one node serves all of the step's sequences. slot and at are [N] i32: row i belongs to
 * the sequence of cache slot[i], whose cache holds at[i] rows before this step:
 *  STORE_SLOT_ROWS(dst [S,R,...], src [N,...], slot [N], at [N]) -> writes src row i into
 *     dst[slot[i], at[i]] (dims 2.. of dst match dims 1.. of src; dst contiguous; the dtype
 *     conversion and q8_0 quantisation of STORE_ROWS). The output is an alias of all of dst.
 *     slot[i] outside [0, S) or at[i] outside [0, R) is a run-time error where the backend can
 *     check it; a backend that cannot (a GPU kernel) writes nothing for that row. Rows never
 *     share a (slot, at) pair (each sequence has one row).
 *  ATTENTION_SLOTS(q [N,Hq,D], k [S,L,Hkv,D], v [S,L,Hkv,D], slot [N], at [N]) -> [N,Hq,D]:
 *     row i is ATTENTION of the one query q[i] over k[slot[i]], v[slot[i]] with mask
 *     CAUSAL_AT and at = at[i]: keys [0, at[i]] (the rows written before, and its own, which
 *     STORE_SLOT_ROWS wrote at at[i]); keys past at[i] are never read. params.attention: the
 *     scale, and mask QVL_MASK_CAUSAL_AT (the only one). k and v may be q8_0 as in ATTENTION.
 *     Out-of-range values as in STORE_SLOT_ROWS (at[i] < L); a GPU kernel gives zeros then.
 *
 * Fused ops, written by the fusion pass only where the backend that runs the graph supports
 * the fused node (a backend may leave them out), besides NORM_LINEAR, ATTENTION and
 * MLP_RESIDUAL above:
 *  NORM_ROPE(x [N,H,D], pos [C,N] i32, gamma [D]) -> ROPE(RMS_NORM(x, gamma), pos): every
 *     head normalised, then rotated (Qwen3's q_norm / k_norm before RoPE). Parameters as
 *     ROPE's plus the norm's eps (qvl_norm_rope_params); slots 0 and 1 are ROPE's.
 */
#ifndef QVL_OPS_H
#define QVL_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/status.h"
#include "qvl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_op {
#define QVL_OP(id, name, max_in, params, kind) QVL_OP_##id,
#include "qvl/ops.def"
#undef QVL_OP
    QVL_OP_COUNT
} qvl_op;

#define QVL_MAX_SRC 9

typedef struct qvl_scale_params { float s; } qvl_scale_params;
typedef struct qvl_norm_params { float eps; } qvl_norm_params;

typedef enum qvl_rope_mode {
    /* Text MRoPE, interleaved (Qwen3-VL): pos is [3,N] (t,h,w). For pair j in [0, D/2):
     * inv_freq = theta^(-2j/D); the owner of j is H if j%3==1 and j < 3*sections[1],
     * W if j%3==2 and j < 3*sections[2], else T. angle = pos[owner][n] * inv_freq.
     * Rotate-half pairing: (j, j+D/2). With t == h == w this is plain NeoX RoPE. */
    QVL_ROPE_MROPE_INTERLEAVED = 0,
    /* Vision 2-D RoPE (Qwen3-VL ViT): pos is [2,N] (row, col). Let Q = D/4. For pair k in
     * [0, D/2): omega = theta^(-(k mod Q)/Q); angle = row*omega for k < Q, col*omega for
     * k >= Q. Rotate-half pairing (k, k+D/2). */
    QVL_ROPE_VISION_2D = 1,
    /* Plain NeoX RoPE: pos is [1,N]; inv_freq = theta^(-2j/D), pairing (j, j+D/2). */
    QVL_ROPE_NEOX = 2
} qvl_rope_mode;

typedef struct qvl_rope_params {
    int32_t mode;        /* qvl_rope_mode */
    float theta;
    int32_t sections[4]; /* MROPE: pairs owned by t, h, w (e.g. 24,20,20); unused otherwise */
} qvl_rope_params;

typedef struct qvl_mask_params { int64_t n_past; } qvl_mask_params;
typedef struct qvl_view_params { int64_t offset; } qvl_view_params;     /* in elements */
typedef struct qvl_store_params { int64_t offset; } qvl_store_params;   /* first row written */

typedef enum qvl_norm_kind { QVL_NORM_RMS = 0, QVL_NORM_LAYER = 1 } qvl_norm_kind;

typedef struct qvl_norm_linear_params {
    int32_t norm;   /* qvl_norm_kind */
    float eps;
    int32_t n_proj; /* 1..3 weights present */
    int32_t act;    /* qvl_act on every output element: NONE (0), GELU_TANH or GELU_ERF */
} qvl_norm_linear_params;

typedef enum qvl_mask_kind {
    QVL_MASK_NONE = 0,
    QVL_MASK_CAUSAL = 1,
    QVL_MASK_SEGMENTS = 2,
    QVL_MASK_CAUSAL_AT = 3 /* causal, n_past read from the [1] i32 tensor in slot 3 */
} qvl_mask_kind;

typedef struct qvl_attention_params {
    float scale;
    int32_t mask;   /* qvl_mask_kind */
    int64_t n_past; /* for QVL_MASK_CAUSAL */
} qvl_attention_params;

/* NONE is 0 so that zeroed parameters (a NORM_LINEAR built without an activation in mind)
 * mean no activation. */
typedef enum qvl_act {
    QVL_ACT_NONE = 0, /* the identity: MLP_RESIDUAL as res + a . w^T + b, NORM_LINEAR as is */
    QVL_ACT_SILU = 1,
    QVL_ACT_GELU_TANH = 2,
    QVL_ACT_GELU_ERF = 3
} qvl_act;

typedef struct qvl_mlp_params { int32_t act; } qvl_mlp_params;

/* NORM_ROPE: ROPE's parameters, with the RMS norm's eps in the place of the fourth section,
 * which no rope mode reads (so qvl_params, and with it the backend ABI, keeps its layout). */
typedef struct qvl_norm_rope_params {
    int32_t mode; /* qvl_rope_mode */
    float theta;
    int32_t sections[3];
    float eps;
} qvl_norm_rope_params;

/* The ROPE half of NORM_ROPE's parameters. */
static inline qvl_rope_params qvl_norm_rope_rope(const qvl_norm_rope_params *p) {
    qvl_rope_params r = {p->mode, p->theta, {p->sections[0], p->sections[1], p->sections[2], 0}};
    return r;
}

typedef struct qvl_params_none { int32_t unused; } qvl_params_none;

typedef union qvl_params {
    qvl_params_none none;
    qvl_scale_params scale;
    qvl_norm_params norm;
    qvl_rope_params rope;
    qvl_mask_params mask;
    qvl_view_params view;
    qvl_store_params store;
    qvl_norm_linear_params norm_linear;
    qvl_attention_params attention;
    qvl_mlp_params mlp;
    qvl_norm_rope_params norm_rope;
} qvl_params;
#ifndef __cplusplus
_Static_assert(sizeof(qvl_norm_rope_params) <= sizeof(qvl_rope_params),
               "NORM_ROPE's parameters must not grow qvl_params (backend ABI)");
#endif

/* One op applied to its inputs, as the executor hands it to a backend kernel. src[i] is NULL
 * for absent optional inputs; n_src is the op's number of slots. dst->data is where the
 * output goes (for VIEW/STORE_ROWS it aliases an input). */
typedef struct qvl_node {
    qvl_op op;
    qvl_params params;
    uint32_t n_src;
    const qvl_tensor *src[QVL_MAX_SRC];
    qvl_tensor *dst;
    const char *name; /* for messages; may be NULL */
} qvl_node;

/* Name of an op ("matmul"); "?" when out of range. */
const char *qvl_op_name(qvl_op op);
/* Name of an activation ("gelu_tanh", "none"); "?" when out of range. */
const char *qvl_act_name(int32_t act);
/* Number of input slots of an op (from ops.def). */
uint32_t qvl_op_max_inputs(qvl_op op);
/* True for fused ops (kind FUSED in ops.def): the fusion pass writes them, model graphs never
 * contain them before fusion. */
bool qvl_op_is_fused(qvl_op op);
/* Name of input slot `slot` of op ("w" for MATMUL slot 1); "?" when out of range. */
const char *qvl_op_slot_name(qvl_op op, uint32_t slot);
/* True for ops that alias an input instead of computing (VIEW). */
bool qvl_op_is_view(qvl_op op);
/* Looks an op up by name; returns false if unknown. */
bool qvl_op_parse(const char *name, qvl_op *out);

/* Check a node's inputs (presence, dtypes, shapes, params) and compute its output descriptor.
 * For VIEW the caller supplies the output descriptor in *out and this only checks that it
 * stays inside the input's storage. On failure err says which input of which op is wrong. */
qvl_status qvl_op_infer(qvl_op op, const qvl_params *params, uint32_t n_src,
                        const qvl_tensor_desc *const *src, qvl_tensor_desc *out,
                        qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
