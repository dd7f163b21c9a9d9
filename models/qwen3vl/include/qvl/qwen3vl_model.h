/* A loaded Qwen3-VL model on one backend: config, weights bound to backend memory, KV cache,
 * and evaluation of token batches through the text graph (prefill and decode).
 *
 * Weights stay in the safetensors mapping when the backend can use host memory in place and
 * the dtype is what the graph reads; otherwise they are converted/uploaded once at load. */
#ifndef QVL_QWEN3VL_MODEL_H
#define QVL_QWEN3VL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/graph.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/qwen3vl_graph.h"
#include "qvl/registry.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_model qvl_model;

typedef struct qvl_model_options {
    const char *plugins_path; /* --plugins (NULL: the default search) */
    const char *backend_name; /* --backend (NULL: by priority) */
    int64_t ctx;              /* KV cache capacity in tokens (> 0) */
    /* KV caches held as one pool (0 counts as 1): the model's own sequence's and those of the
     * first kv_slots - 1 sequences qvl_seq_create makes (later ones get caches of their own).
     * A batched decode step of pooled sequences runs one attention node per layer for all of
     * them, instead of one per sequence. The pool is allocated whole at open. */
    int kv_slots;
    bool no_fuse;             /* run the primitive graph (debugging, backend bring-up) */
    /* Copy weights the backend could read in place from the file mapping into its own
     * buffers at load, then drop the mapped pages (as llama.cpp's --no-mmap): more load time,
     * the same resident memory, and on some machines faster streaming than the mapping. */
    bool no_mmap;
    /* "f32", "f16", "bf16" or "q8_0": matrix weights (2-D and up) are converted once at load
     * to this dtype (q8_0 needs every row length to be a multiple of 32). NULL: the opened
     * backend's `weights:` option in plugins.yaml, else as stored. */
    const char *weight_dtype;
    /* "f32", "f16" or "q8_0": the dtype of the KV cache (--kv-type). NULL: the opened backend's
     * `kv_type:` option in plugins.yaml, else f16. q8_0 needs head_dim to be a multiple of 32
     * and fused attention on every backend that runs a decoder layer (docs/QUANT.md). */
    const char *kv_type;
    /* --gpu-layers / -ngl: "all" (NULL, the default: everything on the primary backend), a
     * number N (the last N decoder layers and the output head on the primary, the rest and
     * the token embedding on the CPU backend) or "auto" (as many as the primary's free memory
     * holds; docs/ARCHITECTURE.md, "Split graphs"). */
    const char *gpu_layers;
    /* --cpu-backend: the backend of the layers off the primary (NULL: cpu_avx2, else the
     * reference). */
    const char *cpu_backend_name;
    /* --vision-backend: the backend of the vision tower (NULL: the primary, unless auto moved
     * it to the CPU backend because it did not fit). */
    const char *vision_backend_name;
    /* Laid over the plugins.yaml options of every backend that is opened (same key: this value
     * wins), e.g. {threads: 4} from qvl-bench -t. NULL: plugins.yaml's options only. */
    const qvl_options *backend_options;
    /* --mmproj: the vision tower's GGUF file when the model is a GGUF file (NULL: text only,
     * unless the model's directory holds one; qvl/qwen3vl_gguf.h). */
    const char *mmproj;
    /* Called during the load after each tensor converted to another dtype (--weights,
     * plugins.yaml's weights:): done of total such tensors. NULL: not called. */
    void (*on_convert)(size_t done, size_t total, void *user);
    void *convert_user;
    /* The largest picture one vision encode will be given, in merged tokens (a video: its
     * frames' tokens together): placement counts the vision graph's arena and scratch for it
     * (docs/ARCHITECTURE.md, "Split graphs"). 0: the largest the context holds, at most the
     * processor's default max_pixels (16384 tokens); negative: no picture will come. */
    int64_t image_max_tokens;
    /* Prompt tokens per prefill step (qvl run -b): placement counts a batch this long.
     * 0: 512. */
    int64_t batch;
} qvl_model_options;

/* Read DIR/config.json, map the weights, check them against the config, open the backend and
 * allocate the KV cache. DIR may also be a GGUF text model (with opts->mmproj for pictures) or a
 * directory without config.json holding exactly one model GGUF and at most one mmproj GGUF
 * (qvl/model_files.h). */
qvl_status qvl_model_open(const char *dir, const qvl_model_options *opts, qvl_model **out,
                          qvl_error *err);
void qvl_model_close(qvl_model *m);

const qvl_qwen3vl_config *qvl_model_config(const qvl_model *m);
/* The primary backend (--backend). */
const qvl_loaded_backend *qvl_model_backend(const qvl_model *m);
/* Where the model runs, in one line: "layers 0-13 + embedding on cpu_avx2, layers 14-27 +
 * output + vision on cuda_sm61". Returns its length (truncated to size - 1). */
size_t qvl_model_placement(const qvl_model *m, char *buf, size_t size);
/* Memory per loaded backend, primary first. */
typedef struct qvl_model_backend_memory {
    const char *name;
    size_t weights_bytes;        /* weights converted or uploaded into the backend's buffers */
    size_t weights_mapped_bytes; /* weights read in place from the file mapping */
    size_t kv_bytes;             /* the KV caches (every sequence's) of the layers placed there */
    size_t activation_bytes;     /* the largest graph arena run there so far */
    uint64_t device_total, device_free; /* describe() now (0 when the backend does not say) */
    bool host_memory; /* a CPU backend: device_total/free are the machine's, not its own */
} qvl_model_backend_memory;
size_t qvl_model_memory(const qvl_model *m, qvl_model_backend_memory *out, size_t max);
/* What placement counted on the primary backend before loading (known only for a primary that
 * reports its free memory; `counted` is false otherwise): bytes of the weights, the KV pool
 * (kv_dtype), the vision graph's arena for a picture of image_tokens, the text graphs'
 * arenas (a prompt batch of `batch` tokens and the decode step), the backend's scratch, a
 * margin for what cannot be counted, and need_bytes, what the primary holds at most: their sum,
 * but the vision and prompt arenas never coexist, so only the larger of the two counts. */
typedef struct qvl_model_fit {
    bool counted;
    int64_t gpu_layers; /* decoder layers on the primary */
    uint64_t free_bytes; /* the primary's free memory before loading (describe()) */
    uint64_t need_bytes, weights_bytes, kv_bytes, vision_bytes, activation_bytes,
        scratch_bytes, margin_bytes;
    qvl_dtype kv_dtype;
    int64_t image_tokens, batch;
} qvl_model_fit;
void qvl_model_fit_get(const qvl_model *m, qvl_model_fit *out);
int64_t qvl_model_ctx(const qvl_model *m);
/* ---- sequences ------------------------------------------------------------------------------
 * A sequence is a KV cache and a position on the model's weights: a server answers several
 * conversations with one copy of the weights. qvl_model_open makes one; eval, truncate,
 * n_past, positions and the images' eval work on the current sequence. */
typedef struct qvl_seq qvl_seq;
/* A new, empty sequence (its KV cache allocated on the backends of the layers). Free every
 * sequence made here before qvl_model_close. */
qvl_status qvl_seq_create(qvl_model *m, qvl_seq **out, qvl_error *err);
void qvl_seq_free(qvl_seq *s);
/* The sequence qvl_model_open made (qvl_model_close frees it; never qvl_seq_free it): a
 * caller with one sequence uses it rather than paying for a second cache. */
qvl_seq *qvl_model_own_seq(qvl_model *m);
/* Make s the current sequence (NULL: the one qvl_model_open made). */
void qvl_model_set_seq(qvl_model *m, qvl_seq *s);
/* dst's cache becomes the first n_past tokens of src's (n_past <= what src holds): copied on
 * the backends that hold the caches (a graph of GET_ROWS and STORE_ROWS per layer, so every
 * backend runs it), src unchanged. The rope offset is src's, as qvl_model_truncate keeps it:
 * exact when n_past is past src's last picture, else the caller passes positions (as after a
 * truncation). Values are exact for f32, f16 and bf16 caches; a q8_0 cache is re-quantised,
 * which gives the same bytes except in blocks whose values all lie below about 2^-7
 * (model_seq_copy.c). On failure dst holds nothing. */
qvl_status qvl_seq_copy_prefix(qvl_model *m, qvl_seq *dst, const qvl_seq *src, int64_t n_past,
                               qvl_error *err);

/* One decode step for n sequences at once: token ids[i] is appended to seqs[i] (text
 * positions continuing it) and its next-token logits are row i of logits [n, vocab]. The
 * matrix products run on all n rows together and attention per sequence over its own cache,
 * so n sequences cost far less than n steps. Sequences must be distinct and have room. */
qvl_status qvl_model_decode_batch(qvl_model *m, qvl_seq *const *seqs, const int32_t *ids,
                                  size_t n, float *logits, qvl_error *err);

/* The prompts of n sequences at once: seqs[i] appends its n_ids[i] tokens ids[i] at positions
 * pos[i] (3 rows of n_ids[i], as qvl_model_eval takes them; pos NULL or pos[i] NULL: text
 * positions continuing the sequence), and row i of logits [n, vocab] is the logits after its
 * last token. Text only. The matrix products run on all the rows together (each weight read
 * once for every prompt) and attention per sequence over its own cache. Sequences must be
 * distinct (at most QVL_TEXT_MAX_SEQS) and have room. */
qvl_status qvl_model_prefill_batch(qvl_model *m, qvl_seq *const *seqs, const int32_t *const *ids,
                                   const int32_t *const *pos, const int64_t *n_ids, size_t n,
                                   float *logits, qvl_error *err);

/* Greedy decoding where the logits are. With n_valid > 0 the batched step's graph also
 * computes each row's ARGMAX (qvl/ops.h) over its first n_valid logits (the ids a sampler may
 * choose), which qvl_model_decode_batch_greedy returns instead of the logits; 0 (the default)
 * turns it off. At most vocab_size. QVL_E_UNSUPPORTED (and nothing changes) when the backend
 * that computes the logits has no ARGMAX kernel. */
qvl_status qvl_model_set_greedy_vocab(qvl_model *m, int32_t n_valid, qvl_error *err);
/* qvl_model_decode_batch for rows that all decode greedily: next[i] is row i's next token, the
 * first largest of its first n_valid logits, or -1 where the row holds a NaN or +inf or
 * nothing above -inf (qvl_model_batch_logits then gives the row to a sampler, which names the
 * problem). On a device only the ids come back. */
qvl_status qvl_model_decode_batch_greedy(qvl_model *m, qvl_seq *const *seqs, const int32_t *ids,
                                         size_t n, int32_t *next, qvl_error *err);
/* The logits [n, vocab] of the last qvl_model_decode_batch_greedy step of n rows. */
qvl_status qvl_model_batch_logits(qvl_model *m, size_t n, float *logits, qvl_error *err);

/* Host memory for logits buffers that batched steps fill (qvl_model_decode_batch's `logits`):
 * memory that the backend computing the logits downloads into directly (page-locked for a
 * GPU, so a step's rows arrive by DMA alone, without a copy through staging memory), or
 * malloc's where it offers none. NULL when out of memory. Free with qvl_model_host_free
 * before qvl_model_close. */
void *qvl_model_host_alloc(qvl_model *m, size_t bytes);
void qvl_model_host_free(qvl_model *m, void *ptr);

/* Tokens in the KV cache. */
int64_t qvl_model_n_past(const qvl_model *m);
/* Forget everything after the first n_past tokens (n_past <= current). */
void qvl_model_truncate(qvl_model *m, int64_t n_past);

/* Append n tokens to the sequence: run them through the text graph (writing their keys and
 * values into the cache) and write logits: all n rows [n, vocab] when all_logits, else only
 * the last row [vocab]. pos gives their (t, h, w) positions as 3 rows of n (NULL: text
 * positions continuing the sequence). Token ids must lie in [0, vocab_size) and the cache must
 * have room (a QVL_E_LIMIT error names --ctx otherwise). */
qvl_status qvl_model_eval(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                          bool all_logits, float *logits, qvl_error *err);

/* ---- images -------------------------------------------------------------------------------- */
/* What the vision encoder makes of the images of one prompt: one row per merged token (all
 * images in order, each in row-major order of its merged grid), text-hidden wide. */
typedef struct qvl_image_features {
    int64_t n_tokens;    /* rows */
    int64_t hidden;      /* columns (text hidden size) */
    int32_t n_deepstack; /* deepstack feature sets */
    float *embeds;       /* merger output [n_tokens, hidden] (malloc'd) */
    float *deepstack;    /* n_deepstack consecutive [n_tokens, hidden] blocks (malloc'd) */
    double seconds;      /* time the encoder took */
} qvl_image_features;
void qvl_image_features_free(qvl_image_features *f);

/* Rows [k0, k0 + count) of all, for a prefill that runs a prompt in parts: out->embeds points
 * into all (borrowed), out->deepstack is a copy (each set's rows are strided by all's row
 * count): free only out->deepstack, before all is freed. */
qvl_status qvl_image_features_slice(const qvl_image_features *all, int64_t k0, int64_t count,
                                    qvl_image_features *out, qvl_error *err);
/* dst with src's rows appended (the features of the next picture encoded on its own; dst may
 * be empty). src is consumed (moved or freed) either way. */
qvl_status qvl_image_features_append(qvl_image_features *dst, qvl_image_features *src,
                                     qvl_error *err);
/* Columns [c0, c0 + len) of positions laid out as 3 rows of n (the pos argument of eval) into
 * out, 3 rows of len. */
void qvl_positions_slice(const int32_t *pos, int64_t n, int64_t c0, int64_t len, int32_t *out);

/* Run the vision encoder on n_images preprocessed images: pixels is the row-concatenation of
 * each image's pixel matrix (qvl_image_preprocess, or qvl_video_preprocess for a video: grid
 * t > 1 is t frame groups, each attending only to itself), grids their patch grids. */
qvl_status qvl_model_encode_images(qvl_model *m, const float *pixels, size_t n_images,
                                   const qvl_image_grid *grids, qvl_image_features *out,
                                   qvl_error *err);

/* The encoder's progress during each qvl_model_encode_images from now on: fn(arg, done, total)
 * after each node of its graph, in work units (qvl_exec_set_progress), on the calling thread.
 * fn NULL: off. */
void qvl_model_set_vision_progress(qvl_model *m, qvl_exec_progress_fn fn, void *arg);
/* The same for each prompt batch (a prefill chunk, one sequence's or several's) from now on;
 * a decode step reports nothing. */
void qvl_model_set_prefill_progress(qvl_model *m, qvl_exec_progress_fn fn, void *arg);

/* Positions of n tokens appended to the sequence (3 rows of n, the pos argument of eval):
 * text continues from the next free position, runs of image_token_id are the images of grids
 * in order (docs/MODEL.md, "Multimodal positions"). */
qvl_status qvl_model_positions(const qvl_model *m, const int32_t *ids, int64_t n,
                               const qvl_image_grid *grids, size_t n_images, int32_t *pos,
                               qvl_error *err);

/* The same with videos among the media: grids in prompt order, is_video[i] marking the
 * videos (grid t = frame groups; each group is its own run of video_token_id). */
qvl_status qvl_model_positions_media(const qvl_model *m, const int32_t *ids, int64_t n,
                                     const qvl_image_grid *grids, const bool *is_video,
                                     size_t n_media, int32_t *pos, qvl_error *err);

/* qvl_model_eval with image features: the k-th image_token_id or video_token_id in ids takes
 * row k of img (features of pictures and videos in prompt order)
 * (their count must equal img->n_tokens) and the deepstack rows are added after the first
 * decoder layers; pos is required (qvl_model_positions). img NULL or without rows: the same as
 * qvl_model_eval. */
qvl_status qvl_model_eval_images(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                                 const qvl_image_features *img, bool all_logits, float *logits,
                                 qvl_error *err);

/* ---- measuring (qvl-bench) ----------------------------------------------------------------- */
typedef struct qvl_model_load_stats {
    double config_seconds;  /* reading config.json */
    double map_seconds;     /* mapping the safetensors and checking them against the config */
    double backend_seconds; /* plugins.yaml, dlopen and the backend's init */
    double bind_seconds;    /* weights onto the backend: in place, or converted and uploaded */
    double cache_seconds;   /* allocating the KV cache */
    size_t weights_in_place_bytes; /* weights the backend reads straight from the mapping */
    size_t weights_copied_bytes;   /* weights the backend holds a converted/uploaded copy of */
    /* Weight bytes one decode step reads: every text-model weight and the output projection
     * (the embedding table counts only when it is the tied output projection; otherwise a
     * step reads one row of it, which is left out). In the dtypes the graphs read. */
    size_t decode_weight_bytes;
    size_t kv_bytes;               /* the KV cache pool (kv_slots sequences' caches) */
    qvl_dtype kv_dtype;            /* dtype of the KV cache */
    qvl_dtype matrix_dtype;        /* dtype the graphs read matrix weights in */
    /* Matrices (tensors of 2 or more dimensions) per dtype the graphs read them in, in the text
     * model (with the output projection; a tied embedding counts once) and in the vision
     * tower: a q4_k_m model holds several types. */
    size_t text_matrices[QVL_DTYPE_COUNT], vision_matrices[QVL_DTYPE_COUNT];
} qvl_model_load_stats;
void qvl_model_get_load_stats(const qvl_model *m, qvl_model_load_stats *out);

/* Graphs the single-token and batched decode steps built, and steps that ran a kept graph
 * instead (nothing built, split, fused, planned or bound again). Totals since the model was
 * opened, over every sequence. */
typedef struct qvl_model_step_stats {
    uint64_t decode_builds;   /* reusable single-token graphs built */
    uint64_t decode_reuses;   /* single-token steps that ran a kept graph */
    uint64_t decode_unkept;   /* single-token steps that built a graph of their own */
    uint64_t batch_builds;    /* batched decode graphs built */
    uint64_t batch_reuses;    /* batched steps that ran a kept graph */
    uint64_t batch_pooled;    /* batched steps over the KV pool (one attention per layer) */
    uint64_t prefill_batches; /* batched prefills of several sequences' prompts */
} qvl_model_step_stats;
void qvl_model_get_step_stats(const qvl_model *m, qvl_model_step_stats *out);

/* Per-op time of the graphs qvl_model_eval runs while profiling is on (each node timed on its
 * own after a synchronize: slower than a normal run). Totals add up until reset. */
void qvl_model_set_profiling(qvl_model *m, bool on);
void qvl_model_profile(const qvl_model *m, qvl_op_profile *out);
void qvl_model_profile_reset(qvl_model *m);

#ifdef __cplusplus
}
#endif
#endif
