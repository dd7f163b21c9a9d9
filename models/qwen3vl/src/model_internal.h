/* What the files of a loaded model share: the model record, its backends (targets) and the
 * placement of the text decoder's groups on them. Not installed. */
#ifndef QVL_MODEL_INTERNAL_H
#define QVL_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/qwen3vl_graph.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/split.h"
#include "qvl/weights.h"

/* The primary backend (--backend), the CPU backend that takes the layers the primary does not
 * (--cpu-backend), a backend of its own for the vision tower (--vision-backend) and the
 * backends of plugins.yaml loaded for the nodes those refuse (model_fallback.c), each loaded
 * once however many roles it has. A bit per target in a uint32_t mask. */
#define MODEL_MAX_TARGETS 8

/* One weight as one backend holds it, in the dtype the graphs read. A weight read on two
 * backends (the tied embedding: token lookup on the CPU, output head on the GPU) is bound on
 * each. */
typedef struct bound_weight {
    const char *name; /* owned by the weight store */
    int32_t target;
    qvl_dtype dtype;
    qvl_buffer buf;
} bound_weight;

typedef struct model_target {
    qvl_loaded_backend *lb;
    bool host_memory; /* its buffers are host memory (describe()) */
    size_t kv_bytes;  /* KV caches of every open sequence here */
    size_t activation_bytes; /* largest arena of a graph part run here so far */
    int rank; /* its place in plugins.yaml's priority order: the order fallback asks in */
} model_target;


/* One graph split over the targets and reused for every single-token text step: the KV
 * length is an input ("kv_at"), so nothing is rebuilt, fused, planned or allocated per token,
 * and a GPU backend sees the same node list every time (CUDA graph replay). */
typedef struct decode_step {
    qvl_split *sp;
    bool unavailable; /* the graph cannot be kept: build one per step instead */
    uint64_t runs;    /* steps it ran */
} decode_step;

/* One sequence on the model's weights: its KV cache (each layer's on the layer's backend), its
 * position, and its reusable decode graph (bound to its cache). */
struct qvl_seq {
    qvl_model *m;
    qvl_buffer kv[MODEL_MAX_TARGETS]; /* the K and V caches of the layers placed on target i */
    void **kv_addr;     /* per layer: K at [2l], V at [2l+1] */
    int pool_slot;      /* its slot of the model's KV pool, or -1 (caches of its own in kv[]) */
    int64_t n_past;
    int64_t rope_delta; /* next position = n_past + rope_delta (0 for text-only prompts) */
    decode_step decode; /* built at the first single-token step */
};

/* Blocks of the output backend's host memory (qvl_model_host_alloc) held at once; more take
 * malloc's. */
#define MODEL_HOST_BLOCKS 4

/* A batched decode graph kept for the next step while the same sequences decode together. */
typedef struct batch_step {
    qvl_split *sp;
    qvl_seq **seqs; /* the sequences it is bound to, in row order */
    size_t n;
    bool pooled;      /* over the KV pool: serves any pooled sequences, not just seqs */
    bool unavailable; /* the graph cannot be kept: batches run sequence by sequence */
    /* The last greedy step's logits when they were computed on the host (no kept graph:
     * sequence by sequence), [n, vocab]; NULL when they are the kept graph's output. */
    float *host_logits;
} batch_step;

/* The vision graph of the grids encoded last, kept for the next encode of the same grids
 * (model_vision.c), with its host-side inputs that depend on the grids only. */
typedef struct vision_step {
    qvl_split *sp;
    qvl_image_grid *grids;
    size_t n_images;
    int64_t S, G;       /* patches, and (image, temporal group) segments */
    int32_t *pos_idx;   /* [4*S] */
    float *pos_w;       /* [4*S] */
    int32_t *rope_pos;  /* [2*S] */
    int32_t *segments;  /* [G+1] */
} vision_step;

/* What qvl-bench reads: load timings and per-op profile totals. */
typedef struct model_instruments {
    qvl_model_load_stats load;
    bool profiling;
    qvl_op_profile profile;
    qvl_exec_progress_fn vision_progress; /* qvl_model_set_vision_progress; NULL: off */
    void *vision_progress_arg;
    qvl_exec_progress_fn prefill_progress; /* qvl_model_set_prefill_progress; NULL: off */
    void *prefill_progress_arg;
} model_instruments;

struct qvl_model {
    qvl_qwen3vl_config cfg;
    qvl_weights *weights;
    model_target tg[MODEL_MAX_TARGETS];
    size_t n_tg;            /* tg[0] is the primary backend */
    int32_t *text_place;    /* preferred target of each text group (qvl_text_group_*) */
    int32_t *kv_home;       /* per layer: the target its KV cache lives on (where it is written) */
    uint32_t *weight_targets; /* per stored weight: the targets the probe graphs read it on */
    int32_t vision_target;
    qvl_dtype matrix_dtype; /* dtype of 2-D+ weights in the graphs (the main one of a mixture) */
    bool mix_q4_k_m;        /* --weights q4_k_m: per-tensor dtypes (weight_mix.c) */
    bool weights_requested; /* --weights or `weights:` chose matrix_dtype (else as stored) */
    qvl_dtype vector_dtype; /* dtype of norm weights and biases in the graphs */
    int convert_threads;    /* threads converting weights at load (--weights) */
    void (*on_convert)(size_t done, size_t total, void *user); /* qvl_model_options' */
    void *convert_user;
    bound_weight *bound;    /* sorted by name, then target */
    size_t n_bound, cap_bound;
    int64_t ctx;
    bool no_fuse;
    bool no_mmap; /* never bind weights in place (qvl_model_options.no_mmap) */
    qvl_dtype kv_dtype; /* dtype of the KV cache (--kv-type) */
    size_t kv_layer_bytes; /* one layer's K (or V) cache */
    /* The KV pool (model_bind.c): per target, every layer's K pool [kv_slots, ctx, Hkv, D] and
     * V pool there; pool_addr[2l] / [2l+1] are layer l's; slot_used marks slots taken. */
    int kv_slots;
    qvl_buffer kv_pool[MODEL_MAX_TARGETS];
    void **pool_addr;
    bool *slot_used;
    qvl_seq *own;          /* the sequence qvl_model_open makes */
    qvl_seq *seq;          /* the one eval and friends work on (qvl_model_set_seq) */
    /* While a batched decode graph is bound: its sequences, row i's as "s<i>.". */
    qvl_seq *const *batch_seqs;
    size_t n_batch_seqs;
    batch_step batch;      /* the last batched decode graph (model_batch.c) */
    int32_t greedy_vocab;  /* > 0: the batched graph also outputs "argmax" over this many */
    void *host_blocks[MODEL_HOST_BLOCKS]; /* the output backend's host_alloc blocks handed out */
    vision_step vision;    /* the last vision graph (model_vision.c) */
    qvl_model_fit fit;     /* what placement counted on the primary (model_place.c) */
    model_instruments inst;
    qvl_model_step_stats steps; /* graphs built and reused (qvl_model_get_step_stats) */
};

/* ---- model.c ---- */
/* The dtype matrix `name` is bound in (qvl_weight_dtype_fn; ctx is the model). */
qvl_dtype model_bound_dtype(const void *ctx, const char *name, qvl_dtype dflt);
/* After a run: the arenas per target and, while profiling, the op times. */
void model_collect_profile(qvl_model *m, qvl_split *sp);

/* ---- model_place.c ---- */
/* Opens the CPU and vision backends the options ask for (the primary is tg[0] already) and
 * decides the placement of every text group and of the vision tower; with --gpu-layers auto
 * it measures what fits the primary's free memory. Prints the plan in one line when the model
 * is split or auto chose it. */
qvl_status model_place(qvl_model *m, const qvl_model_options *opts, qvl_error *err);
/* Bit t set when target t reads the weight (by its checkpoint name). */
uint32_t model_weight_targets(const qvl_model *m, const char *name);
/* The dtype a stored tensor is bound in (--weights, a mixture, or as stored). */
qvl_dtype model_bind_dtype(const qvl_model *m, const qvl_st_tensor *t);

/* Decoder layer of "model.language_model.layers.<l>.…", else -1. */
int64_t model_layer_of(const char *name);

/* ---- model_place_count.c ---- */
/* What the primary would hold, counted before loading: weights per text group and of the
 * vision tower, one layer's KV pool, and the arenas and scratch of the graphs the model runs
 * there (planned for the primary, not run). */
typedef struct place_counts {
    uint64_t *text;   /* weights per text group (qvl_text_group_*) */
    uint64_t vision;  /* the vision tower's weights */
    uint64_t kv_layer; /* one layer's K and V over the pool (ctx x kv_slots) in kv_dtype */
    qvl_dtype kv_dtype;
    size_t vision_arena, prefill_arena, decode_arena;
    size_t scratch_text, scratch_all; /* the text graphs' scratch; with the vision graph's */
    int64_t image_tokens, batch;
} place_counts;
qvl_status model_count(qvl_model *m, const qvl_model_options *opts, qvl_dtype kv_dtype,
                       place_counts *pc, qvl_error *err);
void model_counts_free(place_counts *pc);
/* What the primary holds with the last n layers there (and the vision tower when vision_here):
 * every field of out but counted and free_bytes. */
void model_need(const qvl_model *m, const place_counts *pc, int64_t n, bool vision_here,
                qvl_model_fit *out);
uint64_t model_kv_layer_bytes(const qvl_model *m, qvl_dtype kv_dtype);

/* ---- model_place_fit.c ---- */
/* Whether the last n layers (and the vision tower when vision_here) fit free_bytes. */
bool model_fits(const qvl_model *m, const place_counts *pc, int64_t n, bool vision_here,
                uint64_t free_bytes);
/* -ngl auto: the most layers that fit (-1: not even the output head). */
int64_t model_fit_layers(const qvl_model *m, const place_counts *pc, bool vision_here,
                         uint64_t free_bytes);
/* The one-line QVL_E_NOMEM of a whole model that does not fit, naming what would. */
qvl_status model_refuse(qvl_model *m, const qvl_model_options *opts, const place_counts *pc,
                        bool vision_here, uint64_t free_bytes, qvl_error *err);
/* -v: m->fit in one line. */
void model_log_fit(const qvl_model *m);

/* ---- model_fallback.c ---- */
/* The dtype a weight is bound in, by name, for graphs built before anything is bound
 * (qvl_weight_dtype_fn; ctx is the model). */
qvl_dtype model_probe_dtype(const void *ctx, const char *name, qvl_dtype dflt);
/* Places the probe graphs over the loaded targets, loading more backends of plugins.yaml while
 * a node has none that takes it; sets kv_home and weight_targets. */
qvl_status model_place_ops(qvl_model *m, const qvl_model_options *opts, qvl_error *err);
/* The split's targets, fallback order and options for a text or vision graph (arrays of
 * MODEL_MAX_TARGETS, and one for vision_place). */
void model_split_setup(const qvl_model *m, bool text, qvl_split_target *targets, int32_t *order,
                       int32_t *vision_place, qvl_split_options *so);
/* qvl_split_options.input_home: the target of a cache input's layer, else -1 (ctx: the model). */
int32_t model_input_home(void *ctx, const char *name);

/* ---- model_bind.c ---- */
qvl_status model_bind_all_weights(qvl_model *m, qvl_error *err);
/* A sequence's KV cache on every target that holds layers (m->kv_layer_bytes set first). */
qvl_status model_alloc_kv(qvl_model *m, qvl_seq *s, qvl_error *err);
void model_free_kv(qvl_model *m, qvl_seq *s);
void model_free_pool(qvl_model *m);
const bound_weight *model_find_bound(const qvl_model *m, const char *name, int32_t target);
/* Binds every weight of each part on the part's target, and the KV inputs a part reads to
 * the cache of their layer. */
qvl_status model_bind_split(qvl_model *m, qvl_split *sp, qvl_error *err);
/* Splits g over the model's targets with the text placement (text = true) or on the vision
 * target alone, and binds it. */
qvl_status model_split(qvl_model *m, const qvl_graph *g, bool text, qvl_split **out,
                       qvl_error *err);
void model_free_bindings(qvl_model *m);
/* q has taken n more tokens at positions pos (3 rows of n, `stride` apart): its cache length
 * and rope offset move on (the next text position follows the largest one used). */
void model_seq_advance(qvl_seq *q, const int32_t *pos, int64_t stride, int64_t n);
/* The sequences of a batch ("decode batch", "batched prefill": `what` names it in the error):
 * 1 to QVL_TEXT_MAX_SEQS, each this model's, none twice. */
qvl_status model_check_batch_seqs(const qvl_model *m, qvl_seq *const *seqs, size_t n,
                                  const char *what, qvl_error *err);
/* Drops the kept batched decode graph (a sequence it is bound to is going away). */
void model_batch_forget(qvl_model *m);

/* ---- model_vision.c ---- */
/* Runs the vision graph of these grids (the kept one when the grids are those of the last
 * encode) and fills out's counts and feature arrays. */
qvl_status model_vision_encode(qvl_model *m, const float *pixels, size_t n_images,
                               const qvl_image_grid *grids, qvl_image_features *out,
                               qvl_error *err);
void model_vision_forget(qvl_model *m);
/* Frees the kept vision graph's arena, keeping the graph (the next encode allocates it). */
void model_vision_release(qvl_model *m);

/* One -v line: a split's nodes per backend and the bytes that cross between them per run. */
void model_log_split(const qvl_model *m, const qvl_split *sp, const char *what);

/* After a run: keeps each target's largest arena (the activations of the memory report). */
void model_note_arenas(qvl_model *m, const qvl_split *sp);

#endif
