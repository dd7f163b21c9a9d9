/* run_graph for cuda_sm61: capture a node sequence into CUDA graphs and replay them.
 *
 * The model runs one executor per decode step shape: the same nodes, the same addresses,
 * only input data (ids, positions, `at`) changes. Such a sequence is recognised by its
 * signature, the bytes of every node that a kernel launch depends on (op, params, and for
 * every tensor its address, dtype, shape and strides). The first time a signature is seen
 * the executor runs the nodes one by one (run_graph declines); the second time in a row they
 * are captured and launched; from then on the captured graphs are replayed with
 * cudaGraphLaunch on the backend's stream, where uploads and downloads are queued too.
 *
 * Nodes whose host side reads data back (GET_ROWS checks its ids, MASK_SEGMENTS and segment
 * ATTENTION their bounds: a sync each) cannot be captured: they run
 * as plain launches between captured runs. A capture that fails for any reason (a kernel that
 * would grow scratch, an unsupported call) falls back to plain launches of that run. Captured
 * graphs hold scratch addresses, so they are dropped when scratch moves (scratch_gen).
 *
 * Off with option `graphs: 0` or QVL_CUDA_GRAPHS=0 in the environment (A/B benchmarks). */
#include <stdlib.h>
#include <string.h>

#include "cu_graph.h"
#include "cu_launch_groups.h"

#define CU_GRAPH_CACHE 4     /* captured sequences kept (LRU) */
#define CU_GRAPH_MIN_RUN 2   /* shorter capturable runs are launched plainly */

/* A run of nodes [begin, end): replayed through exec, or launched plainly when exec is NULL. */
typedef struct cu_seg {
    size_t begin, end;
    cudaGraphExec_t exec;
} cu_seg;

typedef struct cu_graph_entry {
    unsigned char *sig;
    size_t len;
    uint64_t hash, gen, used;
    cu_seg *segs;
    size_t n_segs;
} cu_graph_entry;

typedef struct cu_bytes {
    unsigned char *p;
    size_t len, cap;
    uint64_t hash;
} cu_bytes;

struct cu_graph_cache {
    cu_graph_entry e[CU_GRAPH_CACHE];
    cu_bytes cur, cand; /* the signature being run, the last one run plainly */
    uint64_t clock;
};

static bool put(cu_bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return true;
}

static bool put_tensor(cu_bytes *b, const qvl_tensor *t) {
    unsigned char present = t != NULL;
    if (!put(b, &present, 1)) return false;
    if (!t) return true;
    const qvl_tensor_desc *d = &t->desc;
    int32_t head[2] = {(int32_t)d->dtype, d->ndim};
    int nd = d->ndim >= 1 && d->ndim <= QVL_MAX_DIMS ? d->ndim : QVL_MAX_DIMS;
    return put(b, &t->data, sizeof t->data) && put(b, head, sizeof head) &&
           put(b, d->shape, (size_t)nd * sizeof d->shape[0]) &&
           put(b, d->stride, (size_t)nd * sizeof d->stride[0]);
}

/* FNV-1a over 8-byte words (the signature is ~100 KiB per decode step, hashed every step):
 * a quick first comparison before memcmp. */
static uint64_t hash_of(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static bool signature(cu_bytes *b, const qvl_node *const *nodes, size_t n) {
    b->len = 0;
    if (!put(b, &n, sizeof n)) return false;
    for (size_t k = 0; k < n; k++) {
        const qvl_node *nd = nodes[k];
        int32_t op = (int32_t)nd->op;
        uint32_t n_src = nd->n_src <= QVL_MAX_SRC ? nd->n_src : QVL_MAX_SRC;
        if (!put(b, &op, sizeof op) || !put(b, &nd->params, sizeof nd->params) ||
            !put(b, &n_src, sizeof n_src))
            return false;
        for (uint32_t i = 0; i < n_src; i++)
            if (!put_tensor(b, nd->src[i])) return false;
        if (!put_tensor(b, nd->dst)) return false;
    }
    b->hash = hash_of(b->p, b->len);
    return true;
}

static bool same(const cu_bytes *b, const unsigned char *sig, size_t len, uint64_t hash) {
    return sig && b->hash == hash && b->len == len && memcmp(b->p, sig, len) == 0;
}

/* Nodes whose host side waits for the device (see the top of the file). */
static bool capturable(const qvl_node *nd) {
    switch (nd->op) {
    case QVL_OP_GET_ROWS:
    case QVL_OP_MASK_SEGMENTS: return false;
    case QVL_OP_ATTENTION: return nd->params.attention.mask != QVL_MASK_SEGMENTS;
    default: return true;
    }
}

static void entry_free(cu_graph_entry *e) {
    for (size_t i = 0; i < e->n_segs; i++)
        if (e->segs[i].exec) cudaGraphExecDestroy(e->segs[i].exec);
    free(e->segs);
    free(e->sig);
    memset(e, 0, sizeof *e);
}

void cu_graph_cache_free(qvl_backend *be) {
    cu_graph_cache *gc = be->graphs_cache;
    if (!gc) return;
    for (int i = 0; i < CU_GRAPH_CACHE; i++) entry_free(&gc->e[i]);
    free(gc->cur.p);
    free(gc->cand.p);
    free(gc);
    be->graphs_cache = NULL;
}

size_t cu_graph_count(const qvl_backend *be) {
    size_t n = 0;
    if (be->graphs_cache)
        for (int i = 0; i < CU_GRAPH_CACHE; i++) n += be->graphs_cache->e[i].sig != NULL;
    return n;
}

/* Node by node, except that a decode step's q/k rotations and KV-cache writes share one
 * launch (cu_run_rope_store_group), and otherwise two neighbouring independent small nodes of
 * one op share a launch (cu_run_pair). */
static qvl_status run_plain(qvl_backend *be, const qvl_node *const *nodes, size_t begin,
                            size_t end, qvl_error *err) {
    for (size_t k = begin; k < end; k++) {
        if (k + 3 < end && cu_rope_store_group(nodes + k)) {
            qvl_status s = cu_run_rope_store_group(be, nodes + k, err);
            if (s != QVL_OK) return s;
            k += 3;
            continue;
        }
        if (k + 1 < end && cu_pairable(nodes[k], nodes[k + 1])) {
            qvl_status s = cu_run_pair(be, nodes[k], nodes[k + 1], err);
            if (s != QVL_OK) return s;
            k++;
            continue;
        }
        qvl_kernel_fn fn = qvl_backend_kernel(be->iface, nodes[k]->op);
        if (!fn)
            return qvl_fail(err, QVL_E_UNSUPPORTED, "cuda_sm61: no kernel for %s",
                            qvl_op_name(nodes[k]->op));
        qvl_status s = fn(be, nodes[k], err);
        if (s != QVL_OK) return s;
    }
    return QVL_OK;
}

static qvl_status replay(qvl_backend *be, const cu_graph_entry *e, const qvl_node *const *nodes,
                         qvl_error *err) {
    for (size_t i = 0; i < e->n_segs; i++) {
        const cu_seg *sg = &e->segs[i];
        if (!sg->exec) {
            qvl_status s = run_plain(be, nodes, sg->begin, sg->end, err);
            if (s != QVL_OK) return s;
            continue;
        }
        cudaError_t ce = cudaGraphLaunch(sg->exec, be->stream);
        if (ce != cudaSuccess) return cu_cuda_fail(err, ce, "cudaGraphLaunch");
    }
    return QVL_OK;
}

/* Capture nodes [begin, end) into an executable graph and launch it; NULL (and nothing
 * launched, nothing left half-captured) when that does not work. */
static cudaGraphExec_t capture(qvl_backend *be, const qvl_node *const *nodes, size_t begin,
                               size_t end) {
    if (cudaStreamBeginCapture(be->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    qvl_error e = {0};
    qvl_status s = run_plain(be, nodes, begin, end, &e);
    cudaGraph_t graph = NULL;
    cudaError_t ce = cudaStreamEndCapture(be->stream, &graph);
    cudaGraphExec_t exec = NULL;
    if (s == QVL_OK && ce == cudaSuccess && graph &&
        cudaGraphInstantiateWithFlags(&exec, graph, 0) != cudaSuccess)
        exec = NULL;
    if (graph) cudaGraphDestroy(graph);
    if (exec && cudaGraphLaunch(exec, be->stream) != cudaSuccess) {
        cudaGraphExecDestroy(exec);
        exec = NULL;
    }
    if (!exec) cudaGetLastError(); /* capture errors are not sticky: clear them */
    return exec;
}

/* Run the nodes, capturing every capturable run, and keep the result in e. */
static qvl_status capture_all(qvl_backend *be, const qvl_node *const *nodes, size_t n,
                              cu_graph_entry *e, qvl_error *err) {
    e->segs = calloc(n ? n : 1, sizeof *e->segs);
    if (!e->segs) return qvl_fail(err, QVL_E_NOMEM, "cuda_sm61: out of memory for a graph");
    for (size_t k = 0; k < n;) {
        bool cap = capturable(nodes[k]);
        size_t end = k + 1;
        while (end < n && capturable(nodes[end]) == cap) end++;
        cu_seg *sg = &e->segs[e->n_segs++];
        sg->begin = k;
        sg->end = end;
        if (cap && end - k >= CU_GRAPH_MIN_RUN) sg->exec = capture(be, nodes, k, end);
        if (!sg->exec) {
            qvl_status s = run_plain(be, nodes, k, end, err);
            if (s != QVL_OK) return s;
        }
        k = end;
    }
    return QVL_OK;
}

static cu_graph_entry *slot_for_new(cu_graph_cache *gc) {
    cu_graph_entry *best = &gc->e[0];
    for (int i = 0; i < CU_GRAPH_CACHE; i++) {
        if (!gc->e[i].sig) return &gc->e[i];
        if (gc->e[i].used < best->used) best = &gc->e[i];
    }
    entry_free(best);
    return best;
}

qvl_status cu_run_graph(qvl_backend *be, const qvl_node *const *nodes, size_t n,
                        qvl_error *err) {
    if (!be->graphs) return qvl_fail(err, QVL_E_UNSUPPORTED, "cuda_sm61: CUDA graphs are off");
    cu_graph_cache *gc = be->graphs_cache;
    if (!gc && !(gc = be->graphs_cache = calloc(1, sizeof *gc)))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "cuda_sm61: out of memory for graphs");
    if (!signature(&gc->cur, nodes, n))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "cuda_sm61: out of memory for a signature");
    gc->clock++;

    for (int i = 0; i < CU_GRAPH_CACHE; i++) {
        cu_graph_entry *e = &gc->e[i];
        if (!same(&gc->cur, e->sig, e->len, e->hash)) continue;
        if (e->gen != be->scratch_gen) { /* scratch moved: the graph points at freed memory */
            entry_free(e);
            break;
        }
        e->used = gc->clock;
        return replay(be, e, nodes, err);
    }

    if (!same(&gc->cur, gc->cand.p, gc->cand.len, gc->cand.hash)) {
        /* First sighting: remember it, let the executor run the nodes one by one. */
        cu_bytes t = gc->cand;
        gc->cand = gc->cur;
        gc->cur = t;
        return qvl_fail(err, QVL_E_UNSUPPORTED, "cuda_sm61: first run of this sequence");
    }

    /* Seen twice in a row: capture. */
    cu_graph_entry *e = slot_for_new(gc);
    uint64_t gen = be->scratch_gen;
    qvl_status s = capture_all(be, nodes, n, e, err);
    if (s != QVL_OK || be->scratch_gen != gen) { /* not worth keeping */
        entry_free(e);
        return s;
    }
    e->sig = malloc(gc->cur.len ? gc->cur.len : 1);
    if (!e->sig) { /* it ran; it just is not kept */
        entry_free(e);
        return QVL_OK;
    }
    memcpy(e->sig, gc->cur.p, gc->cur.len);
    e->len = gc->cur.len;
    e->hash = gc->cur.hash;
    e->gen = gen;
    e->used = gc->clock;
    gc->cand.len = 0;
    gc->cand.hash = 0;
    return QVL_OK;
}
