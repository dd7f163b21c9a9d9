/* Shared by the graph tests: small Qwen3-VL-shaped graphs (a text decoder layer stack and a
 * vision block), deterministic data by tensor name, and running a graph on a backend. */
#ifndef QVL_TEST_GRAPH_UTIL_H
#define QVL_TEST_GRAPH_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/graph.h"
#include "test_backend.h"

typedef struct tg_text_dims {
    int64_t hidden, n_q_heads, n_kv_heads, head_dim, inter;
    int64_t n_tokens, n_past, kv_capacity;
    int n_layers;
    bool lm_head; /* final norm + output projection as "logits" (else "out" = residual) */
} tg_text_dims;

typedef struct tg_vision_dims {
    int64_t hidden, n_heads, head_dim, inter, n_patches;
    int n_segments; /* equal-length segments of the patches */
} tg_vision_dims;

/* hidden 64, 4 q heads, 2 kv heads, head dim 16, intermediate 96, 5 tokens after 3 cached. */
tg_text_dims tg_text_default(void);
/* hidden 32, 2 heads of 16, intermediate 64, 8 patches in 2 segments. */
tg_vision_dims tg_vision_default(void);

/* Build the primitive graphs (asserting they build). Text: inputs "x" [N, hidden], "pos"
 * [3, N] i32, "kv.<l>.k"/"kv.<l>.v"; output "logits" or "out". Vision: inputs "x" [S, hidden],
 * "rope_pos" [2, S] i32, "segments" [G+1] i32; output "out". */
qvl_graph *tg_build_text(const tg_text_dims *d);
qvl_graph *tg_build_vision(const tg_vision_dims *d);

/* i32 values by name: "pos"/"rope_pos" small positions, "segments" equal splits of the
 * n_patches given as user (int64_t *), anything else zeros. Matches qvl_fill_i32_fn. */
void tg_fill_i32(qvl_tid t, const char *name, int32_t *data, int64_t n, void *user);

/* Uniform values in [-scale, scale) derived from (seed, name): the same name gets the same
 * values in every graph. */
void tg_fill_f32(uint64_t seed, const char *name, float *out, int64_t n, float scale);

/* Loads the reference backend; false (after printing why) when it is not available. */
bool tg_open_reference(qvl_test_backend *tb);

/* Runs g on a backend with weights (scale 0.25) and inputs (scale 1) filled by name and i32
 * inputs from tg_fill_i32(user = i32_user); returns each output as a malloc'd f32 array in
 * outs[i] (order of qvl_graph_output). Asserts every step succeeds. */
void tg_run(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be, uint64_t seed,
            void *i32_user, float **outs);

/* max|a-b| <= rtol * max|a| + atol, printing the worst difference when not. */
bool tg_close(const float *a, const float *b, int64_t n, double rtol, double atol);

/* Count of live nodes whose op is op, by scanning the public accessors. */
size_t tg_count(const qvl_graph *g, qvl_op op);

#endif
