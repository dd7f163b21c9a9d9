/* qvl-graph's per-layer accounting: which decoder layer, vision block or deepstack merger
 * each node belongs to (by the names of the weights it reads, or its nearest named
 * neighbours), and the op counts of each group before and after fusion. */
#ifndef QVL_TOOLS_GRAPH_GROUPS_H
#define QVL_TOOLS_GRAPH_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "qvl/graph.h"

typedef enum group_kind { GR_LAYER, GR_BLOCK, GR_DEEPSTACK, GR_COUNT } group_kind;

typedef struct op_counts {
    size_t n[QVL_OP_COUNT];
} op_counts;

typedef struct group_table {
    int n_idx[GR_COUNT];      /* highest index + 1 seen among weights/inputs */
    bool *present[GR_COUNT];  /* [n_idx] */
    size_t *counts[GR_COUNT]; /* [n_idx * QVL_OP_COUNT] */
    size_t outside[QVL_OP_COUNT];
} group_table;

void count_ops(const qvl_graph *g, op_counts *c);
/* Op counts per group; fused[op] marks the ops fusion introduced. false: out of memory. */
bool group_table_build(const qvl_graph *g, const bool *fused, group_table *t);
void group_table_free(group_table *t);
/* One line per run of groups with the same fused-op pattern. */
void print_groups(FILE *f, const char *lead, const group_table *t, const bool *fused);
/* Which decoder layers the vision graph's deepstack outputs feed. */
void print_deepstack_taps(FILE *f, const char *lead, const qvl_graph *g);
/* The op table, before -> after fusion when fused. */
void print_op_table(FILE *f, const char *lead, const op_counts *before, const op_counts *after,
                    bool fused);

#endif
