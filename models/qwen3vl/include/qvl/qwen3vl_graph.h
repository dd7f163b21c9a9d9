/* Qwen3-VL compute graphs built from primitive ops (the fusion pass rewrites them later).
 *
 * Weights are WEIGHT tensors named exactly as in the checkpoint, except the 5-D patch
 * embedding, which the graph reads as 2-D [vision.hidden, in_ch*t*p*p] under the same name (a
 * contiguous reshape). With tied embeddings the output projection reads
 * "model.language_model.embed_tokens.weight"; otherwise "lm_head.weight". Norm weights and
 * biases are f32 in the graph's view unless weight_dtype says otherwise for matrices only. */
#ifndef QVL_QWEN3VL_GRAPH_H
#define QVL_QWEN3VL_GRAPH_H

#include "qvl/graph.h"
#include "qvl/qwen3vl_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The dtype of one weight matrix (2-D and up) by its checkpoint name, for weights stored in a
 * mixture of dtypes (--weights q4_k_m); returns dflt for a name it does not know. */
typedef qvl_dtype (*qvl_weight_dtype_fn)(const void *ctx, const char *name, qvl_dtype dflt);

/* Sequences one batched decode graph serves at most. */
#define QVL_TEXT_MAX_SEQS 64

typedef struct qvl_text_graph_opts {
    int64_t n_tokens;     /* tokens processed by this graph (prefill: prompt length; decode: 1) */
    int64_t n_past;       /* tokens already in the KV cache (0 with kv_at_input) */
    /* Read n_past at run time from the input "kv_at" [1] i32 instead: the graph no longer
     * depends on the position, so one graph (and one executor) serves every decode step. */
    bool kv_at_input;
    int64_t kv_capacity;  /* rows of each KV cache tensor (>= n_past + n_tokens) */
    qvl_dtype kv_dtype;   /* dtype of the KV cache tensors: f32 (0, the zero value), f16, bf16,
                           * or q8_0 (head_dim whole 32-blocks; attention is then an ATTENTION
                           * node in the graph itself, ops.h) */
    bool all_logits;      /* logits for every token (parity, --dump-logits) or only the last */
    qvl_dtype weight_dtype; /* dtype of matrix weights (embeddings, projections) */
    qvl_dtype norm_dtype;   /* dtype of norm weights */
    qvl_weight_dtype_fn matrix_dtype_of; /* NULL: weight_dtype for every matrix */
    const void *matrix_dtype_ctx;
    /* A batched decode step (> 1): row i is the next token of sequence i, whose cache inputs
     * are "s<i>.kv.<l>.k"/".v" and "s<i>.kv_at"; needs n_tokens == n_seqs, kv_at_input and
     * all_logits. 0 or 1: one sequence (inputs "kv.<l>.k", "kv_at"). */
    int64_t n_seqs;
    /* With n_seqs > 1: the sequences' caches are slots of one pool per layer, "pool.kv.<l>.k"
     * / ".v" [kv_pool_slots, kv_capacity, n_kv_heads, head_dim], and row i's slot and cache
     * length are element i of "slot" and "kv_at" [n_seqs] i32: one STORE_SLOT_ROWS per cache
     * and one ATTENTION_SLOTS per layer serve every row (ops.h), and the graph does not depend
     * on which sequences the rows are. 0: per-sequence inputs as above. */
    int64_t kv_pool_slots;
    /* With n_seqs > 1: a batched prefill instead of a decode step. Sequence i owns the
     * seq_rows[i] rows that follow those of sequences 0..i-1 (n_tokens is their sum), its cache
     * inputs "s<i>.kv.<l>.k"/".v" are written from row seq_past[i] on (constants: no kv_at
     * inputs), its rows' attention outputs go back through "rows.<i>" [seq_rows[i]] i32 (their
     * row numbers), and the logits are each sequence's last row, gathered through "last_rows"
     * [n_seqs] i32. Needs no pool, no kv_at_input, not all_logits, no images. NULL: one row
     * each (a decode step). */
    const int64_t *seq_rows;
    const int64_t *seq_past;
    /* > 0: also the output "argmax" [rows of logits] i32, ARGMAX (ops.h) of each logits row's
     * first greedy_vocab values (at most vocab_size): greedy decoding's tokens, computed where
     * the logits are, so that they alone come back. */
    int32_t greedy_vocab;
    /* Image features inside this batch (0: text only). */
    int64_t n_image_tokens; /* rows of "image_embeds" / "image_rows" */
    int32_t n_deepstack;    /* "deepstack.<k>" inputs, added after decoder layers 0..n-1 */
} qvl_text_graph_opts;

/* Inputs:  "ids" [n_tokens] i32; "pos" [3, n_tokens] i32 (t, h, w rows);
 *          "kv.<l>.k", "kv.<l>.v" [kv_capacity, n_kv_heads, head_dim] kv_dtype for each layer l
 *          (written at rows [n_past, n_past+n_tokens) by STORE_ROWS);
 *          with kv_at_input: "kv_at" [1] i32 = n_past (STORE_ROWS_AT, MASK_CAUSAL_AT);
 *          with n_seqs > 1: "s<i>.kv.<l>.k"/".v" and "s<i>.kv_at" per sequence, and "row.<i>"
 *          [1] i32 = i (where row i's attention output goes back);
 *          with n_image_tokens = K > 0: "image_rows" [K] i32 (positions within the batch),
 *          "image_embeds" [K, hidden] f32 (replace the token embeddings at those rows) and
 *          "deepstack.<k>" [K, hidden] f32 for k < n_deepstack (added to the output of
 *          decoder layer k at those rows); see docs/MODEL.md, "Text decoder".
 * Outputs: "logits" [n_tokens or 1, vocab] ([n_seqs, vocab] with seq_rows); with greedy_vocab
 *          also "argmax" [rows of logits] i32. */
qvl_status qvl_qwen3vl_build_text(const qvl_qwen3vl_config *cfg, const qvl_text_graph_opts *opts,
                                  qvl_graph **out, qvl_error *err);

/* Placement groups of the text graph (qvl_g_set_group, for graphs split across backends):
 * the token embedding and image rows, one group per decoder layer, then the final norm and the
 * output projection (the "output head"). */
static inline int32_t qvl_text_group_input(void) { return 0; }
static inline int32_t qvl_text_group_layer(int64_t l) { return (int32_t)(1 + l); }
static inline int32_t qvl_text_group_output(int64_t n_layers) { return (int32_t)(1 + n_layers); }
static inline size_t qvl_text_n_groups(int64_t n_layers) { return (size_t)n_layers + 2; }

/* -ngl N as llama.cpp places it: the last N decoder layers and the output head on `primary`,
 * the other layers on `cpu`, the token embedding on `primary` only when every layer is there
 * (N >= n_layers). place has qvl_text_n_groups entries. */
void qvl_qwen3vl_text_placement(int64_t n_layers, int64_t gpu_layers, int32_t primary,
                                int32_t cpu, int32_t *place);

typedef struct qvl_image_grid { int64_t t, h, w; } qvl_image_grid; /* in patches */

typedef struct qvl_vision_graph_opts {
    size_t n_images;
    const qvl_image_grid *grids;  /* h and w multiples of spatial_merge_size */
    qvl_dtype weight_dtype;
    qvl_dtype norm_dtype;
    qvl_weight_dtype_fn matrix_dtype_of; /* as in qvl_text_graph_opts */
    const void *matrix_dtype_ctx;
} qvl_vision_graph_opts;

/* Inputs:  "patches" [S, in_ch*t*p*p] f32 (S = sum t*h*w, merge-window order, see docs/MODEL.md);
 *          "pos_interp.idx" [4, S] i32 and "pos_interp.w" [4, S, 1] f32 (the four bilinear
 *          taps per patch); "rope_pos" [2, S] i32 (row, col); "segments" [G+1] i32.
 * Outputs: "merger" [S/m^2, out_hidden]; "deepstack.<k>" [S/m^2, out_hidden] for each tap k. */
qvl_status qvl_qwen3vl_build_vision(const qvl_qwen3vl_config *cfg,
                                    const qvl_vision_graph_opts *opts, qvl_graph **out,
                                    qvl_error *err);

/* Host-side values of the vision graph's non-pixel inputs for the given grids:
 * pos_idx [4*S], pos_w [4*S], rope_pos [2*S], segments [G+1] (caller-allocated, G = number of
 * (image, temporal group) segments = sum of t). */
qvl_status qvl_qwen3vl_vision_aux(const qvl_qwen3vl_config *cfg, size_t n_images,
                                  const qvl_image_grid *grids, int32_t *pos_idx, float *pos_w,
                                  int32_t *rope_pos, int32_t *segments, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
