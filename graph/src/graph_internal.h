/* What the graph library's files share: the tensor records, use counts, ordering and storage
 * helpers, and the fusion rule table's types. Not installed; tests include it only to build
 * deliberately corrupted graphs. */
#ifndef QVL_GRAPH_INTERNAL_H
#define QVL_GRAPH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/graph.h"

/* Offset of a tensor that has no place in the arena (weights, or not planned yet). */
#define QVL_GI_NO_OFFSET ((size_t)-1)
/* Alignment of every buffer the planner places in the arena. */
#define QVL_GI_ALIGN ((size_t)256)

typedef struct qvl_gtensor {
    qvl_tensor_kind kind;
    bool live;                /* false once fusion removed the node */
    qvl_op op;                /* nodes only */
    qvl_params params;        /* nodes only */
    qvl_tid src[QVL_MAX_SRC]; /* nodes only; -1 for absent and unused slots */
    qvl_tensor_desc desc;
    char *name;               /* NULL for unnamed nodes */
    size_t offset;            /* planned arena byte offset (QVL_GI_NO_OFFSET: none) */
    int32_t group;            /* placement group (qvl_g_set_group) current when it was added */
} qvl_gtensor;

typedef struct qvl_goutput {
    qvl_tid t;
    char *name;
} qvl_goutput;

/* One entry of the unique-name index (graph_names.c): a leaf (out = -1) or output number out
 * of tensor tid; tid < 0 marks an empty or removed slot. */
typedef struct qvl_gi_name_slot {
    uint64_t hash;
    qvl_tid tid;
    int32_t out;
} qvl_gi_name_slot;

/* A node about to change, recorded while g->tracking is on (see qvl_gi_note_change): its id and
 * its sources before the change. */
typedef struct qvl_gi_change {
    qvl_tid t;
    qvl_tid src[QVL_MAX_SRC];
} qvl_gi_change;

struct qvl_graph {
    qvl_gtensor *t;
    size_t n, cap;
    qvl_goutput *out;
    size_t n_out, cap_out;
    qvl_error err; /* first builder error (status QVL_OK while none) */
    int32_t cur_group; /* the group of tensors added from now on (qvl_g_set_group) */
    qvl_gi_name_slot *names; /* index of leaf and output names (graph_names.c) */
    size_t names_cap, names_used;

    /* While fusion runs: the changes since its uses index was last brought up to date. */
    bool tracking, track_lost; /* track_lost: a change could not be recorded (no memory) */
    /* While fusion runs: the backend asked about every fused node (NULL: none), and how many
     * matches it declined. */
    const qvl_backend_iface *fuse_iface;
    qvl_backend *fuse_be;
    size_t fuse_declined;
    qvl_gi_change *changes;
    size_t n_changes, cap_changes;

    /* Set by qvl_graph_plan, cleared by any change to the graph. */
    bool planned;
    bool has_offsets; /* some tensor has a planned offset */
    bool plan_reuse;
    qvl_tid *order; /* live nodes in execution order */
    size_t n_order;
    qvl_plan_stats stats;
};

/* ---- graph_build.c ---- */
/* Appends a tensor record (kind, desc, name copied); -1 and a sticky error on failure. */
qvl_tid qvl_gi_append(qvl_graph *g, qvl_tensor_kind kind, const qvl_tensor_desc *desc,
                      const char *name);
/* Drops the plan after any change to the graph. */
void qvl_gi_invalidate_plan(qvl_graph *g);
/* Records node t (its current sources) as about to change, when g->tracking is on. Every
 * change to a node's sources or liveness goes through here (qvl_gi_append, qvl_gi_replace,
 * qvl_gi_kill), so fusion can update its uses index instead of rebuilding it. */
void qvl_gi_note_change(qvl_graph *g, qvl_tid t);
/* Marks node t dead (fused away). */
void qvl_gi_kill(qvl_graph *g, qvl_tid t);

/* ---- graph_names.c: inputs, weights and outputs share one namespace ---- */
/* Indexes leaf tid (out = -1) or output number out of tensor tid under its current name. */
bool qvl_gi_names_add(qvl_graph *g, qvl_tid tid, int32_t out);
/* Drops that entry (name: the name it was indexed under). */
void qvl_gi_names_remove(qvl_graph *g, const char *name, qvl_tid tid, int32_t out);
/* Is name used by a leaf or an output of any tensor other than self? */
bool qvl_gi_names_taken(const qvl_graph *g, const char *name, qvl_tid self);
/* The tensor of the output named name, else the leaf named name, else -1. */
qvl_tid qvl_gi_names_find(const qvl_graph *g, const char *name);

/* ---- plan.c ---- */
/* Lifetimes along order and arena placement of every buffer owner (inputs, unless
 * exclude[t], and computing nodes): offsets[t] (n entries; QVL_GI_NO_OFFSET for the rest) and
 * the stats. The executor calls it again to leave out inputs bound to outside memory. */
qvl_status qvl_gi_place(const qvl_graph *g, const qvl_tid *order, size_t n_order, bool reuse,
                        const bool *exclude, size_t *offsets, qvl_plan_stats *stats,
                        qvl_error *err);

/* ---- graph_query.c ---- */
bool qvl_gi_valid_tid(const qvl_graph *g, qvl_tid t);
bool qvl_gi_is_node(const qvl_graph *g, qvl_tid t); /* live NODE */
/* Node t as a backend is asked about it (accepts(), the scratch extension): its op, params,
 * name and tensors' descriptors, data NULL; in and dst hold the tensors node points at. */
void qvl_gi_probe_node(const qvl_graph *g, qvl_tid t, qvl_tensor in[QVL_MAX_SRC], qvl_tensor *dst,
                       qvl_node *node);
/* "name" or "#12" for unnamed tensors, written into buf (which is returned). */
const char *qvl_gi_label(const qvl_graph *g, qvl_tid t, char *buf, size_t size);
/* Input slots of t's op (0 for inputs and weights). */
uint32_t qvl_gi_n_src(const qvl_graph *g, qvl_tid t);
/* Follows VIEW and STORE_ROWS (an alias of its destination) down to the tensor that owns the
 * storage; *elem_off receives t's element 0 as an element offset into that storage. */
qvl_tid qvl_gi_storage_root(const qvl_graph *g, qvl_tid t, int64_t *elem_off);
/* True when t's output aliases another tensor's storage (VIEW, STORE_ROWS). */
bool qvl_gi_is_alias(const qvl_graph *g, qvl_tid t);
/* STORE_ROWS, STORE_ROWS_AT and STORE_SLOT_ROWS: write into their destination and alias it. */
static inline bool qvl_gi_is_store_op(qvl_op op) {
    return op == QVL_OP_STORE_ROWS || op == QVL_OP_STORE_ROWS_AT || op == QVL_OP_STORE_SLOT_ROWS;
}
/* Bytes of a contiguous tensor's storage; false on overflow or a bad layout. */
bool qvl_gi_bytes(const qvl_tensor_desc *d, size_t *out);
/* Live nodes in an execution order: each node after its inputs, otherwise by index. Fails with
 * QVL_E_INVALID naming a node on a cycle. *order is malloc'd (free it). */
qvl_status qvl_gi_topo_order(const qvl_graph *g, qvl_tid **order, size_t *n, qvl_error *err);
/* Input descriptors of node t, NULL for absent slots (size QVL_MAX_SRC). */
void qvl_gi_src_descs(const qvl_graph *g, qvl_tid t, const qvl_tensor_desc **out);
/* "[4, 64] f32, [64, 64] f32 -> [4, 64] f32" for messages. */
void qvl_gi_shapes_str(const qvl_graph *g, qvl_tid t, char *buf, size_t size);

/* ---- graph_uses.c ---- */
/* Who reads what, for the fusion matchers: list[t].v[0 .. n) are the live nodes reading t
 * (one entry per slot, ascending by node index). */
typedef struct qvl_gi_user_list {
    qvl_tid *v;
    uint32_t n, cap;
} qvl_gi_user_list;
typedef struct qvl_gi_uses {
    size_t n;
    qvl_gi_user_list *list;
    bool *is_output;
} qvl_gi_uses;
qvl_status qvl_gi_uses_build(const qvl_graph *g, qvl_gi_uses *u, qvl_error *err);
/* Brings u up to date with the changes g recorded since (and forgets them). */
qvl_status qvl_gi_uses_update(qvl_graph *g, qvl_gi_uses *u, qvl_error *err);
/* True when u lists exactly the uses of g (a check for debug builds). */
bool qvl_gi_uses_current(const qvl_graph *g, const qvl_gi_uses *u);
void qvl_gi_uses_free(qvl_gi_uses *u);
static inline uint32_t qvl_gi_n_uses(const qvl_gi_uses *u, qvl_tid t) {
    return u->list[t].n;
}
static inline qvl_tid qvl_gi_user(const qvl_gi_uses *u, qvl_tid t, uint32_t i) {
    return u->list[t].v[i];
}
/* Read by exactly one node, once, and not a graph output: what a fused-away intermediate
 * must be. */
bool qvl_gi_single_use(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t);

/* ---- fusion rules (fuse.c holds the table) ---- */
#define QVL_FUSE_MAX_ROLES 16
typedef struct qvl_fuse_match {
    qvl_tid role[QVL_FUSE_MAX_ROLES]; /* rule-specific meaning, see each rule's enum */
    qvl_params params;                /* parameters of the fused op */
} qvl_fuse_match;

typedef struct qvl_fuse_rule {
    const char *name;
    /* True when the pattern anchored at node t matches and the fused op accepts it; fills m.
     * A matcher never changes the graph. */
    bool (*match)(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t, qvl_fuse_match *m);
    /* Rewrites a match; may only fail for lack of memory (the matcher checked the rest). */
    qvl_status (*rewrite)(qvl_graph *g, const qvl_gi_uses *u, const qvl_fuse_match *m,
                          qvl_error *err);
} qvl_fuse_rule;

extern const qvl_fuse_rule qvl_fuse_norm_linear;
extern const qvl_fuse_rule qvl_fuse_attention;
extern const qvl_fuse_rule qvl_fuse_mlp;
extern const qvl_fuse_rule qvl_fuse_norm_rope;
extern const qvl_fuse_rule qvl_fuse_linear_act;

/* Helpers for rules: is v a VIEW that permutes its 3-D source x by perm (checked on shapes,
 * strides, dtype and offset, not just the op)? */
bool qvl_gi_is_permute(const qvl_graph *g, qvl_tid v, const int perm[3]);
/* Would the backend fusion negotiates with run op(src) with output out? True when there is
 * none (g->fuse_iface NULL); a refusal is counted in g->fuse_declined. */
bool qvl_gi_backend_takes(const qvl_graph *g, qvl_op op, const qvl_params *params,
                          const qvl_tid *src, const qvl_tensor_desc *out);
/* The common end of a matcher: does op(src) infer, with the shape of the node it replaces, and
 * does the backend take it (qvl_gi_backend_takes)? */
bool qvl_gi_infers_as(const qvl_graph *g, qvl_op op, const qvl_params *params,
                      const qvl_tid *src, qvl_tid anchor);
/* The common end of a rewrite: op's output descriptor from src (an error naming rule if it no
 * longer infers), the nodes of dead_roles (roles of m; absent ones and the anchor skipped)
 * marked dead, and the node of anchor_role replaced in place by op(src). */
qvl_status qvl_gi_fuse_into(qvl_graph *g, const qvl_fuse_match *m, int anchor_role, qvl_op op,
                            const qvl_tid *src, const int *dead_roles, size_t n_dead,
                            const char *rule, qvl_error *err);
/* Replaces node t in place with op(src) (unused slots -1), keeping its index and name, so its
 * readers need no rewiring. */
void qvl_gi_replace(qvl_graph *g, qvl_tid t, qvl_op op, const qvl_params *params,
                    const qvl_tid *src, uint32_t n_src, const qvl_tensor_desc *desc);
/* Infers the output of op(src) without adding it; false when the op rejects the inputs. */
bool qvl_gi_infer(const qvl_graph *g, qvl_op op, const qvl_params *params, const qvl_tid *src,
                  qvl_tensor_desc *out);

/* For the cross-check's isolated pass: move raw bytes in and out of the storage a tensor owns
 * (any kind, node outputs included; bytes = the tensor's size), and run the one kernel node
 * that computes t. */
qvl_status qvl_exec_store_raw(qvl_exec *ex, qvl_tid t, const void *host, size_t bytes,
                              qvl_error *err);
qvl_status qvl_exec_run_node(qvl_exec *ex, qvl_tid t, qvl_error *err);

#endif
