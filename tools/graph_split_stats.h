/* qvl-graph --gpu-layers N: the text graph split as the model would split it (the last N
 * layers and the output head on --backend, the rest on --cpu-backend), printed part by part
 * with the activation bytes that cross between backends per run. */
#ifndef QVL_TOOLS_GRAPH_SPLIT_STATS_H
#define QVL_TOOLS_GRAPH_SPLIT_STATS_H

#include <stdio.h>

#include "qvl/graph.h"
#include "qvl/registry.h"

/* g: the unfused text graph of a model with n_layers decoder layers (it is not changed).
 * Lines start with lead ("" or "// "). */
qvl_status graph_split_stats_print(FILE *f, const char *lead, const qvl_graph *g,
                                   int64_t n_layers, int64_t gpu_layers,
                                   const qvl_loaded_backend *primary,
                                   const qvl_loaded_backend *cpu, qvl_error *err);

/* --backend NAME with fallback (its plugins.yaml entry does not say `fallback: false`): g
 * (unfused, not changed) placed per op on lbs[0] and, for the nodes it refuses, the first of
 * lbs[1..n) that takes each; prints the nodes per backend and the bytes that cross per run.
 * *all_on_first: lbs[0] took every node. */
qvl_status graph_fallback_stats_print(FILE *f, const char *lead, const qvl_graph *g,
                                      qvl_loaded_backend *const *lbs, size_t n,
                                      bool *all_on_first, qvl_error *err);

#endif
