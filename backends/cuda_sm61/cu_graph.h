/* run_graph for cuda_sm61 (cu_graph.c): capture node sequences into CUDA graphs and replay
 * them. */
#ifndef QVL_CU_GRAPH_H
#define QVL_CU_GRAPH_H

#include "cu_device.h"

/* The run_graph hook of the ABI table. */
qvl_status cu_run_graph(qvl_backend *be, const qvl_node *const *nodes, size_t n,
                        qvl_error *err);
/* Drops every captured graph (release, or scratch that moved). */
void cu_graph_cache_free(qvl_backend *be);
/* Captured graphs held, for describe(). */
size_t cu_graph_count(const qvl_backend *be);

#endif
