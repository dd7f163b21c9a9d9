/* The compute graph: builder, validator, fusion pass, planner, executor, dump, cross-check.
 *
 * A graph is a list of tensors. Each tensor is one of
 *   - an INPUT   (runtime data the caller sets before each run: ids, positions, activations),
 *   - a WEIGHT   (named model parameter, bound once to backend memory), or
 *   - a NODE     (the output of one op applied to earlier tensors).
 * Tensors are referred to by qvl_tid (index); -1 means "none" (an absent optional input).
 * Builder calls never fail loudly: the first error is kept (qvl_graph_error) and later calls
 * return -1, so a model can build everything and check once. Output descriptors are computed by
 * qvl_op_infer (core), so a graph that builds is shape-correct.
 *
 * The graph knows nothing about models: names are opaque strings. */
#ifndef QVL_GRAPH_H
#define QVL_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qvl/backend_helpers.h"
#include "qvl/ops.h"
#include "qvl/status.h"
#include "qvl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t qvl_tid;
typedef struct qvl_graph qvl_graph;

typedef enum qvl_tensor_kind {
    QVL_TENSOR_INPUT = 0,
    QVL_TENSOR_WEIGHT = 1,
    QVL_TENSOR_NODE = 2
} qvl_tensor_kind;

qvl_graph *qvl_graph_new(void);
void qvl_graph_free(qvl_graph *g);
/* First builder error, or QVL_OK. */
qvl_status qvl_graph_error(const qvl_graph *g, qvl_error *err);

/* ---- building ---------------------------------------------------------------------------- */
qvl_tid qvl_g_input(qvl_graph *g, const char *name, qvl_dtype dtype, int ndim,
                    const int64_t *shape);
qvl_tid qvl_g_weight(qvl_graph *g, const char *name, qvl_dtype dtype, int ndim,
                     const int64_t *shape);
/* Generic node: src has qvl_op_max_inputs(op) entries (-1 for absent optional inputs).
 * For VIEW pass the output descriptor in view_desc (else NULL). */
qvl_tid qvl_g_node(qvl_graph *g, qvl_op op, const qvl_params *params, const qvl_tid *src,
                   const qvl_tensor_desc *view_desc, const char *name);
/* Give an existing tensor a (new) display name, e.g. "blk.3.attn_out". */
void qvl_g_name(qvl_graph *g, qvl_tid t, const char *fmt, ...) QVL_PRINTF(3, 4);
/* Mark a tensor as a graph output under a name; outputs are kept alive until the end. */
void qvl_g_output(qvl_graph *g, qvl_tid t, const char *name);

/* Placement groups, for graphs split across backends (qvl/split.h): every tensor added from
 * now on belongs to `group` (>= 0; a new graph starts in group 0). A group is an opaque
 * number to the graph (a model uses one per decoder layer, say); a fused node keeps the group
 * of the node it replaces. */
void qvl_g_set_group(qvl_graph *g, int32_t group);

/* Conveniences over qvl_g_node. */
qvl_tid qvl_g_get_rows(qvl_graph *g, qvl_tid table, qvl_tid ids);
qvl_tid qvl_g_matmul(qvl_graph *g, qvl_tid a, qvl_tid w, qvl_tid bias /* -1: none */);
qvl_tid qvl_g_add(qvl_graph *g, qvl_tid a, qvl_tid b);
qvl_tid qvl_g_mul(qvl_graph *g, qvl_tid a, qvl_tid b);
qvl_tid qvl_g_scale(qvl_graph *g, qvl_tid x, float s);
qvl_tid qvl_g_rms_norm(qvl_graph *g, qvl_tid x, qvl_tid gamma, float eps);
qvl_tid qvl_g_layer_norm(qvl_graph *g, qvl_tid x, qvl_tid gamma, qvl_tid beta, float eps);
qvl_tid qvl_g_rope(qvl_graph *g, qvl_tid x, qvl_tid pos, const qvl_rope_params *p);
qvl_tid qvl_g_softmax(qvl_graph *g, qvl_tid x);
/* ARGMAX of each row of x [R, V] (ops.h): [R] i32. */
qvl_tid qvl_g_argmax(qvl_graph *g, qvl_tid x);
qvl_tid qvl_g_unary(qvl_graph *g, qvl_op op, qvl_tid x); /* SILU, GELU_TANH, GELU_ERF */
qvl_tid qvl_g_mask_causal(qvl_graph *g, qvl_tid s, int64_t n_past);
qvl_tid qvl_g_mask_segments(qvl_graph *g, qvl_tid s, qvl_tid seg);
/* Views. reshape needs a contiguous x; permute takes perm[i] = source dim of output dim i;
 * slice keeps [start, start+len) of dimension dim. */
qvl_tid qvl_g_reshape(qvl_graph *g, qvl_tid x, int ndim, const int64_t *shape);
qvl_tid qvl_g_permute(qvl_graph *g, qvl_tid x, const int *perm);
qvl_tid qvl_g_slice(qvl_graph *g, qvl_tid x, int dim, int64_t start, int64_t len);
qvl_tid qvl_g_cont(qvl_graph *g, qvl_tid x);
qvl_tid qvl_g_store_rows(qvl_graph *g, qvl_tid dst, qvl_tid src, int64_t offset);
/* Position from data ([1] i32 "at" tensors): one graph for every decode step. */
qvl_tid qvl_g_store_rows_at(qvl_graph *g, qvl_tid dst, qvl_tid src, qvl_tid at);
qvl_tid qvl_g_mask_causal_at(qvl_graph *g, qvl_tid s, qvl_tid at);
/* A batched decode step over caches pooled in slots (ops.h): slot and at are [N] i32. */
qvl_tid qvl_g_store_slot_rows(qvl_graph *g, qvl_tid dst, qvl_tid src, qvl_tid slot, qvl_tid at);
qvl_tid qvl_g_attention_slots(qvl_graph *g, qvl_tid q, qvl_tid k, qvl_tid v, qvl_tid slot,
                              qvl_tid at, float scale);

/* ---- inspecting -------------------------------------------------------------------------- */
size_t qvl_graph_n_tensors(const qvl_graph *g);
/* Number of live NODE tensors (ops), not counting inputs and weights. */
size_t qvl_graph_n_nodes(const qvl_graph *g);
/* Count of live nodes with this op. */
size_t qvl_graph_count_op(const qvl_graph *g, qvl_op op);
qvl_tensor_kind qvl_graph_kind(const qvl_graph *g, qvl_tid t);
const qvl_tensor_desc *qvl_graph_desc(const qvl_graph *g, qvl_tid t);
const char *qvl_graph_tensor_name(const qvl_graph *g, qvl_tid t);
qvl_op qvl_graph_op(const qvl_graph *g, qvl_tid t);
/* Inputs of a node (n = qvl_op_max_inputs, -1 for absent). */
const qvl_tid *qvl_graph_srcs(const qvl_graph *g, qvl_tid t);
const qvl_params *qvl_graph_params(const qvl_graph *g, qvl_tid t);
bool qvl_graph_is_live(const qvl_graph *g, qvl_tid t); /* false for nodes removed by fusion */
int32_t qvl_graph_group(const qvl_graph *g, qvl_tid t); /* qvl_g_set_group; -1 for a bad tid */
/* Can one graph serve every step of a sequence, only its inputs set again? True when no live
 * node takes the sequence position as a parameter: a cache write, a causal mask or attention
 * gets it from an `at` input (STORE_ROWS_AT, MASK_CAUSAL_AT, ATTENTION with mask CAUSAL_AT),
 * every other node depends on the position only through its inputs. *first (may be NULL)
 * receives the first node that fixes a position, else -1. A property of the graph, fused or
 * not: the primitive attention chain qualifies as much as the fused node (ops.h states what
 * its cache rows must hold). */
bool qvl_graph_position_free(const qvl_graph *g, qvl_tid *first);
/* Look up an input, weight or output by name; -1 if absent. */
qvl_tid qvl_graph_find(const qvl_graph *g, const char *name);
size_t qvl_graph_n_outputs(const qvl_graph *g);
qvl_tid qvl_graph_output(const qvl_graph *g, size_t i, const char **name);

/* ---- validating -------------------------------------------------------------------------- */
/* Re-infers every live node: arity, dtypes, shapes, views inside their storage, no cycles. */
qvl_status qvl_graph_validate(const qvl_graph *g, qvl_error *err);

/* ---- fusion ------------------------------------------------------------------------------ */
#define QVL_FUSION_MAX_RULES 16
typedef struct qvl_fusion_report {
    size_t n_rules;
    const char *rule[QVL_FUSION_MAX_RULES]; /* "norm+linear", "attention+softmax", ... */
    size_t fired[QVL_FUSION_MAX_RULES];
    size_t declined[QVL_FUSION_MAX_RULES]; /* matched, but the backend does not run the node */
    size_t nodes_before, nodes_after;
} qvl_fusion_report;
/* Apply every rule until none fires, then validate. Fusion negotiates with the backend that
 * will run the graph: a match becomes a fused node only when qvl_backend_check(iface, be,
 * fused node) says yes, so a backend with primitive kernels only gets the graph unfused and
 * still runs it. iface NULL: no backend in view (dumps, tests), every match the op contract
 * allows is fused. report may be NULL. */
qvl_status qvl_graph_fuse(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be,
                          qvl_fusion_report *report, qvl_error *err);

/* ---- planning ---------------------------------------------------------------------------- */
typedef struct qvl_plan_stats {
    size_t peak_bytes;    /* arena size: peak of simultaneously live activations */
    size_t total_bytes;   /* sum of all activation sizes without reuse */
    size_t n_buffers;     /* activations that own storage (views excluded) */
} qvl_plan_stats;
/* Order nodes, compute lifetimes and assign arena offsets (alignment 256 bytes). With
 * reuse=false every activation keeps its own storage (cross-check needs all outputs).
 * Inputs are placed in the arena too; weights are not. */
qvl_status qvl_graph_plan(qvl_graph *g, bool reuse, qvl_plan_stats *stats, qvl_error *err);
/* What running g (fused for be, planned here when it is not yet) takes on backend be beside its
 * weights: arena_bytes, the arena once the inputs for which `bound(ctx, name)` is true are
 * bound to memory of the caller's (a KV cache: they take no room in it, as in qvl_exec), and
 * scratch_bytes, what the backend's kernels would hold beside it (extension QVL_EXT_SCRATCH;
 * 0 for a backend without it). scratch may be NULL; otherwise it holds QVL_SCRATCH_SLOTS sizes
 * that are raised, not reset, so graphs that run one after another on one backend add up to
 * the scratch it ends with (*scratch_bytes is then the sum over all of them). bound may be
 * NULL (every input in the arena). */
qvl_status qvl_graph_memory(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be,
                            bool (*bound)(void *ctx, const char *name), void *ctx,
                            size_t *arena_bytes, size_t *scratch, size_t *scratch_bytes,
                            qvl_error *err);
/* After planning: arena offset of a tensor that owns storage, or the storage root's offset
 * plus the view offset for views; (size_t)-1 for weights. */
size_t qvl_graph_offset(const qvl_graph *g, qvl_tid t);

/* ---- dumping ----------------------------------------------------------------------------- */
typedef enum qvl_dump_format { QVL_DUMP_TEXT = 0, QVL_DUMP_DOT = 1 } qvl_dump_format;
qvl_status qvl_graph_dump(const qvl_graph *g, FILE *f, qvl_dump_format fmt);

/* ---- executing --------------------------------------------------------------------------- */
typedef struct qvl_exec qvl_exec;

/* Plan (if not yet planned) and allocate the arena on the backend. The graph must outlive
 * the executor and stay unchanged. Fails naming the op and backend when a node is not
 * supported. */
qvl_status qvl_exec_create(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be,
                           qvl_exec **out, qvl_error *err);
void qvl_exec_free(qvl_exec *ex);
/* Point a WEIGHT (or INPUT) tensor at backend memory the caller owns (e.g. uploaded weights).
 * The memory must hold the tensor's descriptor (contiguous). The arena is allocated at the
 * first set/get/run/addr that needs it; inputs bound before then (a KV cache) take no space
 * in it. */
qvl_status qvl_exec_bind(qvl_exec *ex, qvl_tid t, void *backend_addr, qvl_error *err);
/* Copy host data into an INPUT (or bound WEIGHT); bytes must equal the tensor's size. */
qvl_status qvl_exec_set(qvl_exec *ex, qvl_tid t, const void *host, size_t bytes,
                        qvl_error *err);
/* Run every node in plan order. All weights and inputs must be bound/set. */
qvl_status qvl_exec_run(qvl_exec *ex, qvl_error *err);
/* Copy a tensor (typically an output) to host; contiguous tensors only, bytes must match. */
qvl_status qvl_exec_get(qvl_exec *ex, qvl_tid t, void *host, size_t bytes, qvl_error *err);
/* Free the arena (activations, and the inputs it holds: set them again before the next run),
 * keeping the plan and the bindings; the next set/get/run/addr allocates it again. For an
 * executor kept between runs whose memory another graph needs in the meantime. */
void qvl_exec_release_arena(qvl_exec *ex);
/* Bytes of the executor's arena on its backend (the planned peak until it is allocated). */
size_t qvl_exec_arena_bytes(const qvl_exec *ex);
/* Backend address of a tensor (after create). */
void *qvl_exec_addr(const qvl_exec *ex, qvl_tid t);

/* ---- profiling --------------------------------------------------------------------------- */
/* Wall time per op kind. With profiling on, qvl_exec_run runs node by node (never the
 * backend's run_graph), synchronises the backend after every node and adds the node's time to
 * its op's total; with it off (the default) nothing is timed and nothing changes. Totals add
 * up over runs from qvl_exec_create on. */
typedef struct qvl_op_profile {
    double seconds[QVL_OP_COUNT];
    uint64_t calls[QVL_OP_COUNT];
    double flops[QVL_OP_COUNT]; /* the timed nodes' qvl_node_flops, summed */
} qvl_op_profile;
/* Floating-point operations of a node's matrix products and attention (2 per multiply-add),
 * from its shapes; 0 for the other ops and where the work depends on data (CAUSAL_AT, slot
 * attention). What a profile divides by the time to give an op's rate. */
double qvl_node_flops(const qvl_node *nd);
void qvl_exec_set_profiling(qvl_exec *ex, bool on);
/* The totals so far (all zero when profiling was never on). */
void qvl_exec_profile(const qvl_exec *ex, qvl_op_profile *out);
/* Back to zero (an executor reused for many runs reports each run on its own). */
void qvl_exec_profile_reset(qvl_exec *ex);
/* acc += p, op by op. */
void qvl_op_profile_add(qvl_op_profile *acc, const qvl_op_profile *p);

/* ---- progress ----------------------------------------------------------------------------- */
/* A long run's progress (the vision encoder on a CPU takes minutes): with fn set, qvl_exec_run
 * calls fn(arg, done, total) after each node, in work units: the nodes' qvl_node_flops (each
 * node counts 1 where the whole graph has none), done reaching total after the last node. A
 * backend that queues its work reports ahead of it; a whole-graph run (run_graph) reports once,
 * at its end. fn NULL: off. fn runs on the thread that called qvl_exec_run. */
typedef void (*qvl_exec_progress_fn)(void *arg, double done, double total);
void qvl_exec_set_progress(qvl_exec *ex, qvl_exec_progress_fn fn, void *arg);
/* The work units of one run (the total fn is given), and its nodes' qvl_node_flops alone. */
double qvl_exec_work(const qvl_exec *ex);
double qvl_exec_flops(const qvl_exec *ex);

/* ---- cross-checking ---------------------------------------------------------------------- */
typedef struct qvl_crosscheck_result {
    /* Isolated: every node run on backend b from backend a's values of its inputs, so each
     * op is judged on its own (this is the verdict). */
    size_t nodes_compared;
    qvl_tid worst;        /* node with the largest error relative to its tolerance */
    double worst_abs, worst_rel;
    qvl_tid first_bad;    /* first node (plan order) beyond tolerance, -1 if none */
    double bad_abs, bad_rel;
    /* End to end: both backends run the whole graph on their own; differences add up along
     * the graph (in a deep network with random weights they can grow past any per-op
     * tolerance without any op being wrong), so these are reported, not judged. */
    qvl_tid e2e_worst, e2e_first_beyond;
    double e2e_worst_abs, e2e_worst_rel;
} qvl_crosscheck_result;
/* Fill weights and inputs with seeded random values (weights in their dtype; i32 inputs via
 * the fill callback, which must be given when the graph has i32 inputs), run the graph on
 * both backends, compare every node's output end to end, then run every node again on b from
 * a's inputs and compare (isolated). A node fails when max_abs > atol + rtol * max|reference|
 * with (atol, rtol) from the tolerance table for the output's dtype. Returns QVL_E_MISMATCH,
 * naming the first node that fails in isolation, when one does. */
typedef void (*qvl_fill_i32_fn)(qvl_tid t, const char *name, int32_t *data, int64_t n,
                                void *user);
qvl_status qvl_graph_crosscheck(qvl_graph *g, const qvl_backend_iface *ia, qvl_backend *a,
                                const qvl_backend_iface *ib, qvl_backend *b, uint64_t seed,
                                qvl_fill_i32_fn fill_i32, void *user,
                                qvl_crosscheck_result *res, qvl_error *err);
/* The same, calling progress after each node of the isolated pass (the long one: a node at
 * a time on b): done of total nodes, t the node just judged (in plan order; views are not
 * counted). progress may be NULL. */
typedef void (*qvl_crosscheck_progress_fn)(qvl_tid t, size_t done, size_t total, void *user);
qvl_status qvl_graph_crosscheck_progress(qvl_graph *g, const qvl_backend_iface *ia,
                                         qvl_backend *a, const qvl_backend_iface *ib,
                                         qvl_backend *b, uint64_t seed, qvl_fill_i32_fn fill_i32,
                                         void *user, qvl_crosscheck_progress_fn progress,
                                         void *progress_user, qvl_crosscheck_result *res,
                                         qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
