/* Launch groups: the one place where cuda_sm61 looks at more than one node at a time. It is
 * part of the run_graph hook (backend.h), which receives the whole fused graph in execution
 * order; cu_graph.c asks these matchers at every position before launching a node alone.
 *
 * A group is only ever formed from nodes whose memory does not overlap in a way that
 * running them at once could observe (checked on the byte spans of every input and output),
 * so a group runs exactly what the nodes run one after another. When the nodes are not
 * neighbours in the order the executor hands over, no group forms and every node runs on
 * its own: correctness never depends on node order, only the launch count does. */
#ifndef QVL_CU_LAUNCH_GROUPS_H
#define QVL_CU_LAUNCH_GROUPS_H

#include <stdbool.h>

#include "cu_device.h"

/* Two small nodes of one kind (two NORM_ROPE, or two stores: STORE_ROWS_AT, STORE_SLOT_ROWS)
 * that do not touch each other's memory, as one launch (the q/k rotations and the K/V cache
 * writes of a decode step, alone or batched over pooled caches). */
bool cu_pairable(const qvl_node *a, const qvl_node *b);
qvl_status cu_run_pair(qvl_backend *be, const qvl_node *a, const qvl_node *b, qvl_error *err);

/* A decode step's [NORM_ROPE, NORM_ROPE, store of one's output, independent store] (n[0..3];
 * stores: STORE_ROWS_AT or STORE_SLOT_ROWS): q and k rotated, K and V cached, in one launch. */
bool cu_rope_store_group(const qvl_node *const *n);
qvl_status cu_run_rope_store_group(qvl_backend *be, const qvl_node *const *n, qvl_error *err);

#endif
