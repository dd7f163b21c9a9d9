/* qvl-graph's per-layer accounting (see graph_groups.h). */
#include "graph_groups.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/qwen3vl_graph.h"

static const char *const GROUP_PLURAL[GR_COUNT] = {"decoder layers", "vision blocks",
                                                   "deepstack mergers"};
static const char *const GROUP_ONE[GR_COUNT] = {"layer", "block", "merger"};

static bool index_after(const char *name, const char *marker, bool at_start, int *idx) {
    const char *p = at_start ? (strncmp(name, marker, strlen(marker)) == 0 ? name : NULL)
                             : strstr(name, marker);
    if (!p) return false;
    p += strlen(marker);
    if (*p < '0' || *p > '9') return false;
    long v = 0;
    while (*p >= '0' && *p <= '9' && v < 1000000) v = v * 10 + (*p++ - '0');
    if (*p != '.' && *p != '\0') return false;
    *idx = (int)v;
    return true;
}

/* Which layer/block/merger a weight or input belongs to, from its checkpoint-style name. */
static bool group_of(const char *name, group_kind *k, int *idx) {
    if (!name) return false;
    if (index_after(name, ".layers.", false, idx) || index_after(name, "kv.", true, idx)) {
        *k = GR_LAYER;
        return true;
    }
    if (index_after(name, ".blocks.", false, idx)) {
        *k = GR_BLOCK;
        return true;
    }
    if (index_after(name, ".deepstack_merger_list.", false, idx)) {
        *k = GR_DEEPSTACK;
        return true;
    }
    return false;
}

/* The group of a node that reads weights itself: that of its weights (false when they belong
 * to no layer, like the final norm and the output projection). */
static bool own_weights_group(const qvl_graph *g, qvl_tid t, bool *has_weights, group_kind *k_out,
                              int *idx_out) {
    const qvl_tid *src = qvl_graph_srcs(g, t);
    uint32_t ns = qvl_op_max_inputs(qvl_graph_op(g, t));
    int best = -1;
    *has_weights = false;
    for (uint32_t s = 0; s < ns; s++) {
        if (src[s] < 0 || qvl_graph_kind(g, src[s]) != QVL_TENSOR_WEIGHT) continue;
        *has_weights = true;
        group_kind k;
        int idx;
        if (group_of(qvl_graph_tensor_name(g, src[s]), &k, &idx) && idx > best) {
            best = idx;
            *k_out = k;
        }
    }
    *idx_out = best;
    return best >= 0;
}

/* Breadth-first walk up from t: the group of the nearest weight/input that has one (only of
 * kind `want` unless want == GR_COUNT). Among equally near ones the highest index wins. */
static bool nearest_group(const qvl_graph *g, qvl_tid t, group_kind want, uint8_t *seen,
                          qvl_tid *front, qvl_tid *next, group_kind *k_out, int *idx_out) {
    const size_t n = qvl_graph_n_tensors(g);
    memset(seen, 0, n);
    size_t nf = 1, found = 0;
    front[0] = t;
    seen[t] = 1;
    int best = -1;
    group_kind best_k = GR_COUNT;
    for (int depth = 0; depth < 12 && nf > 0 && !found; depth++) {
        size_t nn = 0;
        for (size_t i = 0; i < nf; i++) {
            qvl_tid x = front[i];
            if (qvl_graph_kind(g, x) != QVL_TENSOR_NODE) {
                group_kind k;
                int idx;
                if (group_of(qvl_graph_tensor_name(g, x), &k, &idx) &&
                    (want == GR_COUNT || k == want) && idx > best) {
                    best = idx;
                    best_k = k;
                    found++;
                }
                continue;
            }
            const qvl_tid *src = qvl_graph_srcs(g, x);
            uint32_t ns = qvl_op_max_inputs(qvl_graph_op(g, x));
            for (uint32_t s = 0; s < ns; s++) {
                if (src[s] < 0 || seen[src[s]]) continue;
                seen[src[s]] = 1;
                next[nn++] = src[s];
            }
        }
        memcpy(front, next, nn * sizeof *front);
        nf = nn;
    }
    if (!found) return false;
    *k_out = best_k;
    *idx_out = best;
    return true;
}

void count_ops(const qvl_graph *g, op_counts *c) {
    for (int op = 0; op < QVL_OP_COUNT; op++) c->n[op] = qvl_graph_count_op(g, (qvl_op)op);
}

/* "norm_linear x2, attention x1" over the fused ops; "no fused ops" when none. */
static void pattern_str(const size_t *cnt, const bool *fused, char *buf, size_t size) {
    buf[0] = '\0';
    size_t len = 0;
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        if (!fused[op] || cnt[op] == 0) continue;
        len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s x%zu",
                                len ? ", " : "", qvl_op_name((qvl_op)op), cnt[op]);
    }
    if (!buf[0]) snprintf(buf, size, "no fused ops");
}

void group_table_free(group_table *t) {
    for (int k = 0; k < GR_COUNT; k++) {
        free(t->present[k]);
        free(t->counts[k]);
    }
}

bool group_table_build(const qvl_graph *g, const bool *fused, group_table *t) {
    memset(t, 0, sizeof *t);
    const size_t n = qvl_graph_n_tensors(g);
    for (size_t i = 0; i < n; i++) {
        group_kind k;
        int idx;
        if (qvl_graph_kind(g, (qvl_tid)i) == QVL_TENSOR_NODE ||
            !group_of(qvl_graph_tensor_name(g, (qvl_tid)i), &k, &idx))
            continue;
        if (idx + 1 > t->n_idx[k]) t->n_idx[k] = idx + 1;
    }
    for (int k = 0; k < GR_COUNT; k++) {
        size_t m = (size_t)t->n_idx[k] + 1;
        t->present[k] = calloc(m, sizeof(bool));
        t->counts[k] = calloc(m * QVL_OP_COUNT, sizeof(size_t));
        if (!t->present[k] || !t->counts[k]) return false;
    }
    for (size_t i = 0; i < n; i++) {
        group_kind k;
        int idx;
        if (qvl_graph_kind(g, (qvl_tid)i) != QVL_TENSOR_NODE &&
            group_of(qvl_graph_tensor_name(g, (qvl_tid)i), &k, &idx))
            t->present[k][idx] = true;
    }
    uint8_t *seen = malloc(n ? n : 1);
    qvl_tid *front = malloc((n ? n : 1) * sizeof *front);
    qvl_tid *next = malloc((n ? n : 1) * sizeof *next);
    bool ok = seen && front && next;
    for (size_t i = 0; ok && i < n; i++) {
        qvl_tid x = (qvl_tid)i;
        if (qvl_graph_kind(g, x) != QVL_TENSOR_NODE || !qvl_graph_is_live(g, x)) continue;
        qvl_op op = qvl_graph_op(g, x);
        if (!fused[op]) continue;
        group_kind k = GR_COUNT;
        int idx = -1;
        bool has_weights = false, found = own_weights_group(g, x, &has_weights, &k, &idx);
        /* Nodes without weights of their own (attention) belong where their inputs come from. */
        if (!has_weights) found = nearest_group(g, x, GR_COUNT, seen, front, next, &k, &idx);
        if (found)
            t->counts[k][(size_t)idx * QVL_OP_COUNT + op]++;
        else
            t->outside[op]++;
    }
    free(seen);
    free(front);
    free(next);
    return ok;
}

void print_groups(FILE *f, const char *lead, const group_table *t, const bool *fused) {
    char common[256], pat[256];
    for (int k = 0; k < GR_COUNT; k++) {
        int n_present = 0, first = -1;
        for (int i = 0; i < t->n_idx[k]; i++)
            if (t->present[k][i]) {
                n_present++;
                if (first < 0) first = i;
            }
        if (n_present == 0) continue;
        /* The pattern most groups share is the headline; the others are listed. */
        int best = first, best_n = 0;
        for (int i = 0; i < t->n_idx[k]; i++) {
            if (!t->present[k][i]) continue;
            pattern_str(&t->counts[k][(size_t)i * QVL_OP_COUNT], fused, pat, sizeof pat);
            int same = 0;
            for (int j = 0; j < t->n_idx[k]; j++) {
                if (!t->present[k][j]) continue;
                pattern_str(&t->counts[k][(size_t)j * QVL_OP_COUNT], fused, common, sizeof common);
                same += strcmp(pat, common) == 0;
            }
            if (same > best_n) {
                best_n = same;
                best = i;
            }
        }
        pattern_str(&t->counts[k][(size_t)best * QVL_OP_COUNT], fused, common, sizeof common);
        if (best_n == n_present)
            fprintf(f, "%s%s: %d, each with %s\n", lead, GROUP_PLURAL[k], n_present, common);
        else
            fprintf(f, "%s%s: %d, %d with %s\n", lead, GROUP_PLURAL[k], n_present, best_n, common);
        for (int i = 0; i < t->n_idx[k]; i++) {
            if (!t->present[k][i]) continue;
            pattern_str(&t->counts[k][(size_t)i * QVL_OP_COUNT], fused, pat, sizeof pat);
            if (strcmp(pat, common) != 0) fprintf(f, "%s  %s %d: %s\n", lead, GROUP_ONE[k], i, pat);
        }
    }
    bool any_outside = false;
    for (int op = 0; op < QVL_OP_COUNT; op++) any_outside |= t->outside[op] > 0;
    if (any_outside) {
        pattern_str(t->outside, fused, pat, sizeof pat);
        fprintf(f, "%soutside layers and blocks: %s\n", lead, pat);
    }
}

/* "deepstack taps after blocks 5, 11, 17": for each deepstack output, the vision block whose
 * output it reads (the nearest block weights upstream). */
void print_deepstack_taps(FILE *f, const char *lead, const qvl_graph *g) {
    const size_t n = qvl_graph_n_tensors(g);
    uint8_t *seen = malloc(n ? n : 1);
    qvl_tid *front = malloc((n ? n : 1) * sizeof *front);
    qvl_tid *next = malloc((n ? n : 1) * sizeof *next);
    if (!seen || !front || !next) goto done;
    char line[512];
    size_t len = 0, found = 0;
    line[0] = '\0';
    for (int k = 0; k < QVL_MAX_DEEPSTACK; k++) {
        char want[32];
        snprintf(want, sizeof want, "deepstack.%d", k);
        for (size_t i = 0; i < qvl_graph_n_outputs(g); i++) {
            const char *name = NULL;
            qvl_tid t = qvl_graph_output(g, i, &name);
            group_kind gk;
            int blk;
            if (!name || strcmp(name, want) != 0 ||
                !nearest_group(g, t, GR_BLOCK, seen, front, next, &gk, &blk))
                continue;
            len += (size_t)snprintf(line + len, len < sizeof line ? sizeof line - len : 0, "%s%d",
                                    found ? ", " : "", blk);
            found++;
        }
    }
    if (found) fprintf(f, "%sdeepstack taps after block%s %s\n", lead, found > 1 ? "s" : "", line);
done:
    free(seen);
    free(front);
    free(next);
}

void print_op_table(FILE *f, const char *lead, const op_counts *before,
                           const op_counts *after, bool fused) {
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        if (!before->n[op] && !after->n[op]) continue;
        if (fused)
            fprintf(f, "%s  %-14s %6zu -> %zu\n", lead, qvl_op_name((qvl_op)op), before->n[op],
                    after->n[op]);
        else
            fprintf(f, "%s  %-14s %6zu\n", lead, qvl_op_name((qvl_op)op), before->n[op]);
    }
}
