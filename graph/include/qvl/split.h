/* Graphs split across backends: the scheduler.
 *
 * A model builds one graph of primitive ops and tags its tensors with placement groups
 * (qvl_g_set_group: a decoder layer, the embedding, the output head). The caller maps each
 * group to one of several loaded backends (targets). qvl_split_create then
 *   1. places every computing node (qvl_split_place): on its group's target when that
 *      backend accepts the node (qvl_backend_check: op table, dtypes, accepts()), else, with
 *      a fallback order, on the first target of that order that accepts it; a target marked
 *      no_fallback (plugins.yaml `fallback: false`) must take every node of its groups. The
 *      KV cache rule: a cache write (STORE_ROWS, STORE_ROWS_AT) runs where its cache lives
 *      (input_home), and every node that reads a cache write (through views) runs on the
 *      write's target, so attention and its cache stay together;
 *   2. cuts the nodes, in execution order, into parts: maximal runs on one target;
 *   3. gives each part its own graph: the part's nodes, the inputs and weights they read
 *      (a weight or input read by several parts appears in each, under its own name), the
 *      views they read (recomputed in each part that reads them: views never cross), and one
 *      "split.in.<id>" input per activation computed by an earlier part;
 *   4. fuses each part for its own backend (fusion asks that backend) and creates its
 *      executor.
 * At run time the parts run in order and each boundary activation is copied from the part
 * that computed it to the part that reads it: through the host (download, upload), or one
 * memcpy when both backends use host memory. Only activations cross; weights and inputs stay
 * where the caller binds them. A cache write (STORE_ROWS) read by another part would copy the
 * whole cache: placement keeps its readers with it, and a split that still needs it (readers
 * placed by hand elsewhere) is refused.
 *
 * With one target (or every group on one target) there is one part and no copy: the same
 * graph, fusion and executor as without a split. The graph layer knows no model: groups are
 * numbers, targets are backends. */
#ifndef QVL_SPLIT_H
#define QVL_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_split qvl_split;

/* One backend a part may run on. host_memory: its buffers are host pointers (describe()). */
typedef struct qvl_split_target {
    const qvl_backend_iface *iface;
    qvl_backend *be;
    bool host_memory;
    /* Nodes of this target's groups that it refuses are an error, never given to another
     * target (plugins.yaml `fallback: false`). */
    bool no_fallback;
} qvl_split_target;

typedef struct qvl_split_options {
    /* target_of_group[k]: index into targets of group k's nodes. NULL (n_groups 0): every
     * node on targets[0]. A node whose group has no entry is an error naming it. */
    const int32_t *target_of_group;
    size_t n_groups;
    bool no_fuse; /* run each part's primitive graph (debugging, backend bring-up) */
    /* Per-op fallback: the targets to ask, in this order (the caller's priority order), for a
     * node its group's target refuses; the first that accepts runs it. NULL (n_fallback 0):
     * no fallback, a refused node is an error naming the backend, op, node and reason. */
    const int32_t *fallback_order;
    size_t n_fallback;
    /* The target a caller-owned input lives on (a KV cache the caller binds), or -1. A cache
     * write into such an input runs there. NULL: cache writes are placed like other nodes. */
    int32_t (*input_home)(void *ctx, const char *name);
    void *input_home_ctx;
} qvl_split_options;

/* The placement alone: target_of[t] (qvl_graph_n_tensors(g) entries) receives the target of
 * every computing node and -1 for the rest (leaves, views). QVL_E_UNSUPPORTED when a node has
 * no target that may run it (the message names the backend that refused it, the op, the node,
 * its shapes and the backend's reason). */
qvl_status qvl_split_place(const qvl_graph *g, const qvl_split_target *targets,
                           size_t n_targets, const qvl_split_options *opts, int32_t *target_of,
                           qvl_error *err);

/* Split g (built, unfused, validated; it is only read and may be freed afterwards) over
 * targets. report (may be NULL) adds up the fusion reports of the parts. */
qvl_status qvl_split_create(const qvl_graph *g, const qvl_split_target *targets,
                            size_t n_targets, const qvl_split_options *opts,
                            qvl_fusion_report *report, qvl_split **out, qvl_error *err);
void qvl_split_free(qvl_split *s);

/* One part: its target, its own (fused, planned) graph and executor. The caller binds weights
 * and caller-owned inputs (a KV cache) of each part on the part's target, as for one
 * executor (qvl_exec_bind); inputs a part does not read are absent from its graph. */
typedef struct qvl_split_part {
    int32_t target;
    qvl_graph *graph;
    qvl_exec *exec;
    size_t n_nodes;       /* computing nodes of the original graph in this part */
    size_t bytes_in;      /* activation bytes copied into this part per run */
} qvl_split_part;
size_t qvl_split_n_parts(const qvl_split *s);
qvl_split_part qvl_split_part_at(const qvl_split *s, size_t i);
/* Activation bytes copied between parts per run (sum of bytes_in). */
size_t qvl_split_copy_bytes(const qvl_split *s);

/* Copy host data into the input `name` of every part that reads it (an error when none does;
 * bytes must equal the input's size). */
qvl_status qvl_split_set(qvl_split *s, const char *name, const void *host, size_t bytes,
                         qvl_error *err);
/* Run the parts in order, copying boundary activations between them. */
qvl_status qvl_split_run(qvl_split *s, qvl_error *err);
/* Copy the graph output `name` to host (contiguous; bytes must match). */
qvl_status qvl_split_get(qvl_split *s, const char *name, void *host, size_t bytes,
                         qvl_error *err);

/* qvl_exec_release_arena on every part (inputs are set again before the next run). */
void qvl_split_release_arenas(qvl_split *s);

/* Progress over every part's executor (qvl_exec_set_progress): one run's work units from the
 * first part to the last, done reaching the total after the last part's last node. fn NULL:
 * off. Parts are not moved after create, so each part's callback keeps its place. */
void qvl_split_set_progress(qvl_split *s, qvl_exec_progress_fn fn, void *arg);

/* Profiling over every part's executor (qvl_exec_set_profiling and friends). */
void qvl_split_set_profiling(qvl_split *s, bool on);
void qvl_split_profile(const qvl_split *s, qvl_op_profile *out);
void qvl_split_profile_reset(qvl_split *s);

#ifdef __cplusplus
}
#endif
#endif
