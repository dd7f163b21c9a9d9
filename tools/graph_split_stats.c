/* Printing a text graph's split across two backends (graph_split_stats.h). */
#include "graph_split_stats.h"

#include <stdlib.h>

#include "qvl/qwen3vl_graph.h"
#include "qvl/split.h"

static bool host_memory(const qvl_loaded_backend *lb) {
    qvl_device_info info = {.host_memory = false};
    return lb->iface->describe && lb->iface->describe(lb->be, &info) == QVL_OK && info.host_memory;
}

qvl_status graph_split_stats_print(FILE *f, const char *lead, const qvl_graph *g,
                                   int64_t n_layers, int64_t gpu_layers,
                                   const qvl_loaded_backend *primary,
                                   const qvl_loaded_backend *cpu, qvl_error *err) {
    const qvl_loaded_backend *lbs[2] = {primary, cpu};
    qvl_split_target targets[2];
    for (int i = 0; i < 2; i++)
        targets[i] = (qvl_split_target){lbs[i]->iface, lbs[i]->be, host_memory(lbs[i]), false};
    int32_t *place = malloc(qvl_text_n_groups(n_layers) * sizeof *place);
    if (!place) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_qwen3vl_text_placement(n_layers, gpu_layers, 0, 1, place);
    qvl_split_options o = {.target_of_group = place, .n_groups = qvl_text_n_groups(n_layers)};
    qvl_split *sp = NULL;
    qvl_status st = qvl_split_create(g, targets, 2, &o, NULL, &sp, err);
    free(place);
    if (st != QVL_OK) return st;
    fprintf(f, "%splacement (--gpu-layers %lld): %zu part(s)\n", lead, (long long)gpu_layers,
            qvl_split_n_parts(sp));
    for (size_t i = 0; i < qvl_split_n_parts(sp); i++) {
        qvl_split_part p = qvl_split_part_at(sp, i);
        fprintf(f, "%s  part %zu on %-10s %5zu ops before fusion, %zu nodes after (views included), %zu bytes copied in\n",
                lead, i, lbs[p.target]->name, p.n_nodes, qvl_graph_n_nodes(p.graph), p.bytes_in);
    }
    fprintf(f, "%sbytes copied between backends per run: %zu\n", lead, qvl_split_copy_bytes(sp));
    qvl_split_free(sp);
    return QVL_OK;
}

qvl_status graph_fallback_stats_print(FILE *f, const char *lead, const qvl_graph *g,
                                      qvl_loaded_backend *const *lbs, size_t n,
                                      bool *all_on_first, qvl_error *err) {
    qvl_split_target targets[16];
    int32_t order[16];
    if (n == 0 || n > 16) return qvl_fail(err, QVL_E_LIMIT, "1 to 16 backends, not %zu", n);
    for (size_t i = 0; i < n; i++) {
        targets[i] = (qvl_split_target){lbs[i]->iface, lbs[i]->be, host_memory(lbs[i]),
                                        lbs[i]->no_fallback};
        order[i] = (int32_t)i; /* lbs come in plugins.yaml's priority order after the first */
    }
    qvl_split_options o = {.fallback_order = order, .n_fallback = n};
    qvl_split *sp = NULL;
    qvl_status st = qvl_split_create(g, targets, n, &o, NULL, &sp, err);
    if (st != QVL_OK) return st;
    size_t nodes[16] = {0};
    for (size_t i = 0; i < qvl_split_n_parts(sp); i++) {
        qvl_split_part p = qvl_split_part_at(sp, i);
        nodes[p.target] += p.n_nodes;
    }
    fprintf(f, "%splacement per op (fallback in plugins.yaml order):", lead);
    for (size_t i = 0; i < n; i++)
        if (nodes[i] || i == 0) fprintf(f, "%s %zu nodes on %s", i ? "," : "", nodes[i], lbs[i]->name);
    fprintf(f, "\n%s%zu part(s); bytes copied between backends per run: %zu\n", lead,
            qvl_split_n_parts(sp), qvl_split_copy_bytes(sp));
    *all_on_first = qvl_split_n_parts(sp) == 1 && qvl_split_part_at(sp, 0).target == 0;
    qvl_split_free(sp);
    return QVL_OK;
}
