/* What the Qwen3-VL graph tests (test_model_graphs_text.c, test_model_graphs_vision.c) share:
 * the small config both use, building and fusing checks, and running a graph on the reference
 * backend with deterministic weights by name. */
#ifndef QVL_TEST_MODEL_GRAPHS_UTIL_H
#define QVL_TEST_MODEL_GRAPHS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/graph.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/qwen3vl_graph.h"
#include "test_backend.h"

/* 2 layers, hidden 64, 4/2 heads of 16, mrope [4,2,2]; vision depth 4, hidden 32, 2 heads,
 * deepstack after blocks 1 and 2, a 4x4 position table. */
extern const char SMALL[];

void load_cfg(const char *json, qvl_qwen3vl_config *c);
/* Fuse g (every rule) into rep and validate the result. */
void fuse(qvl_graph *g, qvl_fusion_report *rep);
/* How often the rule whose name contains `part` fired. */
size_t fired(const qvl_fusion_report *rep, const char *part);
/* Tensor `name` of g has dtype dt and ndim dims d0, d1, d2 (as many as ndim). */
void expect_shape(const qvl_graph *g, const char *name, qvl_dtype dt, int ndim, int64_t d0,
                  int64_t d1, int64_t d2);
/* The tensor behind output `name`. */
qvl_tid output(const qvl_graph *g, const char *name);

#ifdef QVL_REFERENCE_SO

/* Deterministic weights by name, shared by every graph of a test so that two graphs of the
 * same model see the same parameters. */
typedef struct wstore {
    qvl_test_backend *tb;
    size_t n;
    char *names[512];
    qvl_buffer bufs[512];
} wstore;

float next_uniform(uint64_t *s); /* [-1, 1) */
/* The host values of weight `name` with descriptor d (malloc'd f32). */
float *gen_weight(const char *name, const qvl_tensor_desc *d);
void wstore_free(wstore *ws);

typedef struct input_data {
    const char *name;
    const void *data;
    size_t bytes;
} input_data;

/* The KV caches live in buffers the caller owns and binds, as the engine keeps them across
 * runs (an input set by copy lives in the arena, which the planner reuses after its last
 * reader). */
typedef struct kv_buffers {
    size_t n;
    char names[8][16];
    qvl_buffer buf[8];
    size_t bytes;
} kv_buffers;

/* Create an executor, bind weights (and the KV caches when given), set the named inputs and
 * run. */
qvl_exec *run_kv(qvl_graph *g, wstore *ws, const input_data *in, size_t n_in, kv_buffers *kv);
qvl_exec *run(qvl_graph *g, wstore *ws, const input_data *in, size_t n_in);
/* Tensor t of a run as malloc'd f32 (its element count in *n_out when not NULL). */
float *get(qvl_exec *ex, qvl_tid t, const qvl_graph *g, int64_t *n_out);
double max_abs(const float *a, int64_t n);
/* a and b within rtol * max(1, max|a|). */
void expect_close(const char *what, const float *a, const float *b, int64_t n, double rtol);
/* The reference backend as the group state (cmocka group setup and teardown). */
int setup_backend(void **state);
int teardown_backend(void **state);

#endif /* QVL_REFERENCE_SO */

#endif
