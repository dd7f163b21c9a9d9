/* The linear backend: a test plugin that runs one op, MATMUL with a 2-D weight (the model's
 * linear layers: f32 or bf16 weights, an optional bias), on a pool of worker threads. Every
 * other node, and matrix products it does not take (attention's, 3-D weights), run on the
 * next backend of plugins.yaml (per-op fallback, qvl/split.h). It proves three things: a
 * backend that claims one op runs the whole model, its threads are started at init and
 * joined at release so that the process exits cleanly every time, and `fallback: false`
 * turns that off (the model is refused in one line, as before fallback existed).
 *
 * Options: threads (workers, default 3, 1..64; 0: one per core, at most 64). Host memory; weights are used in place. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qvl/backend_helpers.h"

#define NAME "linear"
#define MAX_THREADS 64

/* One product split by output columns: worker i computes columns [i*N/n, (i+1)*N/n) of every
 * row. */
typedef struct linear_job {
    const float *a;    /* [M, K] */
    const void *w;     /* [N, K], f32 or bf16 */
    const void *bias;  /* [N] or NULL */
    qvl_dtype w_dtype, bias_dtype;
    float *out;        /* [M, N] */
    int64_t M, N, K;
} linear_job;

struct qvl_backend {
    pthread_t threads[MAX_THREADS];
    int n_threads;
    pthread_mutex_t run_lock; /* one product at a time, whoever calls (the pool holds one job) */
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    uint64_t generation; /* bumped per job; a worker runs each generation once */
    int pending;         /* workers still busy with the current job */
    bool quit;
    linear_job job;
};

typedef struct worker_arg {
    qvl_backend *be;
    int index;
} worker_arg;

static float load(const void *p, qvl_dtype dt, int64_t i) {
    return dt == QVL_BF16 ? qvl_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void run_columns(const linear_job *j, int index, int n_threads) {
    const int64_t lo = j->N * index / n_threads, hi = j->N * (index + 1) / n_threads;
    for (int64_t m = 0; m < j->M; m++) {
        const float *a = j->a + m * j->K;
        for (int64_t n = lo; n < hi; n++) {
            float s = 0.0f;
            for (int64_t k = 0; k < j->K; k++) s += a[k] * load(j->w, j->w_dtype, n * j->K + k);
            j->out[m * j->N + n] = s + (j->bias ? load(j->bias, j->bias_dtype, n) : 0.0f);
        }
    }
}

static void *worker(void *p) {
    worker_arg arg = *(worker_arg *)p;
    free(p);
    qvl_backend *be = arg.be;
    uint64_t seen = 0;
    pthread_mutex_lock(&be->lock);
    for (;;) {
        while (!be->quit && be->generation == seen) pthread_cond_wait(&be->start, &be->lock);
        if (be->quit) break;
        seen = be->generation;
        linear_job job = be->job;
        pthread_mutex_unlock(&be->lock);
        run_columns(&job, arg.index, be->n_threads);
        pthread_mutex_lock(&be->lock);
        if (--be->pending == 0) pthread_cond_signal(&be->done);
    }
    pthread_mutex_unlock(&be->lock);
    return NULL;
}

/* ---- the one kernel ---- */

static const qvl_backend_iface linear_iface;

static qvl_status k_matmul(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    qvl_status st = qvl_kernel_begin(&linear_iface, be, node, err);
    if (st != QVL_OK) return st;
    const qvl_tensor *a = node->src[0], *w = node->src[1], *bias = qvl_node_src(node, 2);
    linear_job j = {
        .a = a->data, .w = w->data, .bias = bias ? bias->data : NULL,
        .w_dtype = w->desc.dtype, .bias_dtype = bias ? bias->desc.dtype : QVL_F32,
        .out = node->dst->data,
        .M = qvl_desc_n_rows(&a->desc), .N = w->desc.shape[0], .K = w->desc.shape[1],
    };
    pthread_mutex_lock(&be->run_lock);
    pthread_mutex_lock(&be->lock);
    be->job = j;
    be->pending = be->n_threads;
    be->generation++;
    pthread_cond_broadcast(&be->start);
    while (be->pending > 0) pthread_cond_wait(&be->done, &be->lock);
    pthread_mutex_unlock(&be->lock);
    pthread_mutex_unlock(&be->run_lock);
    return QVL_OK;
}

/* Only linear layers: a 2-D weight, every tensor contiguous (the kernel walks plain rows). */
static qvl_status linear_accepts(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    (void)be;
    const qvl_tensor *bias = qvl_node_src(node, 2);
    if (node->src[1]->desc.ndim != 2)
        return qvl_node_fail(NAME, node, err, QVL_E_UNSUPPORTED, "only 2-D weights");
    if (!qvl_desc_is_contiguous(&node->src[0]->desc) ||
        !qvl_desc_is_contiguous(&node->src[1]->desc) ||
        (bias && !qvl_desc_is_contiguous(&bias->desc)))
        return qvl_node_fail(NAME, node, err, QVL_E_UNSUPPORTED, "only contiguous tensors");
    return QVL_OK;
}

#define F32 QVL_DTYPE_BIT(QVL_F32)
#define F32_BF16 (QVL_DTYPE_BIT(QVL_F32) | QVL_DTYPE_BIT(QVL_BF16))
static const qvl_op_impl linear_ops[QVL_OP_COUNT] = {
    [QVL_OP_MATMUL] = {k_matmul, {F32, F32_BF16, F32_BF16}},
};

/* ---- instance: the pool lives from init to release ---- */

static void stop_workers(qvl_backend *be, int started) {
    pthread_mutex_lock(&be->lock);
    be->quit = true;
    pthread_cond_broadcast(&be->start);
    pthread_mutex_unlock(&be->lock);
    for (int i = 0; i < started; i++) pthread_join(be->threads[i], NULL);
}

static void destroy(qvl_backend *be) {
    pthread_cond_destroy(&be->done);
    pthread_cond_destroy(&be->start);
    pthread_mutex_destroy(&be->lock);
    pthread_mutex_destroy(&be->run_lock);
    free(be);
}

static qvl_status linear_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    long threads;
    qvl_status st = qvl_options_get_int(opts, "threads", 3, &threads, err);
    if (st != QVL_OK) return st;
    /* 0 is what `qvl -t 0` passes to every backend: all cores, here capped at MAX_THREADS. */
    if (threads == 0) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : cores;
    }
    if (threads < 1 || threads > MAX_THREADS)
        return qvl_fail(err, QVL_E_INVALID, NAME ": threads %ld is not in 0..%d", threads,
                        MAX_THREADS);
    qvl_backend *be = calloc(1, sizeof *be);
    if (!be) return qvl_fail(err, QVL_E_NOMEM, NAME ": out of memory");
    pthread_mutex_init(&be->run_lock, NULL);
    pthread_mutex_init(&be->lock, NULL);
    pthread_cond_init(&be->start, NULL);
    pthread_cond_init(&be->done, NULL);
    be->n_threads = (int)threads;
    for (int i = 0; i < be->n_threads; i++) {
        worker_arg *arg = malloc(sizeof *arg);
        if (arg) *arg = (worker_arg){be, i};
        if (!arg || pthread_create(&be->threads[i], NULL, worker, arg) != 0) {
            free(arg);
            stop_workers(be, i);
            destroy(be);
            return qvl_fail(err, QVL_E_NOMEM, NAME ": cannot start worker %d", i);
        }
    }
    *out = be;
    return QVL_OK;
}

static void linear_release(qvl_backend *be) {
    if (!be) return;
    stop_workers(be, be->n_threads);
    destroy(be);
}

static qvl_status linear_describe(qvl_backend *be, qvl_device_info *info) {
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "host (linear layers on %d threads)", be->n_threads);
    info->host_memory = true;
    return QVL_OK;
}

static qvl_status linear_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out, qvl_error *err) {
    (void)be;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return qvl_fail(err, QVL_E_NOMEM, NAME ": cannot allocate %zu bytes", bytes);
    *out = (qvl_buffer){.data = p, .size = bytes, .handle = p};
    return QVL_OK;
}

static void linear_free(qvl_backend *be, qvl_buffer *buf) {
    (void)be;
    free(buf->handle);
    *buf = (qvl_buffer){0};
}

static qvl_status linear_wrap(qvl_backend *be, void *ptr, size_t bytes, qvl_buffer *out,
                              qvl_error *err) {
    (void)be;
    (void)err;
    *out = (qvl_buffer){.data = ptr, .size = bytes, .handle = NULL};
    return QVL_OK;
}

static qvl_status linear_copy(qvl_backend *be, void *dst, const void *src, size_t bytes,
                              qvl_error *err) {
    (void)be;
    (void)err;
    if (bytes) memcpy(dst, src, bytes);
    return QVL_OK;
}

static qvl_status linear_sync(qvl_backend *be, qvl_error *err) {
    (void)be;
    (void)err;
    return QVL_OK; /* k_matmul returns when every worker is done */
}

static const qvl_backend_iface linear_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = NAME,
    .description = "test backend: linear layers only, on a worker-thread pool",
    .init = linear_init,
    .release = linear_release,
    .describe = linear_describe,
    .buffer_alloc = linear_alloc,
    .buffer_free = linear_free,
    .buffer_wrap_host = linear_wrap,
    .upload = linear_copy,
    .download = linear_copy,
    .synchronize = linear_sync,
    .n_ops = QVL_OP_COUNT,
    .ops = linear_ops,
    .accepts = linear_accepts,
};

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) {
    return &linear_iface;
}
