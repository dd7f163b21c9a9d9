/* qvl-graph: build a Qwen3-VL graph from config.json alone (no weights), show it before and
 * after fusion with the rule counts and planned memory, check a backend's support for it, or
 * run it on two backends with random weights and compare every node. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "qvl/graph.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/qwen3vl_graph.h"
#include "qvl/registry.h"

#define PROG "qvl-graph"
#define MAX_GRIDS 64
#define EXIT_FAIL 1
#define EXIT_USAGE 2

static const char USAGE[] =
    "usage: qvl-graph --config DIR/config.json --graph text-prefill|text-decode|vision [options]\n"
    "\n"
    "Builds the graph from the config alone (no weights needed), prints every node before and\n"
    "after fusion, how often each fusion rule fired and the planned activation memory.\n"
    "Defaults: --tokens 32 (text-prefill), --kv 4096 (text-decode: one token after kv-1 cached;\n"
    "the graph the model reuses for every step, the KV length read from the input kv_at),\n"
    "--grid 32x32 (vision; patches, h and w multiples of the merge size; several images as\n"
    "--grid 32x32,16x24 or by repeating --grid).\n"
    "--stats prints a summary instead of the node lists. --format dot prints the final graph in\n"
    "Graphviz DOT. --backend NAME checks that the backend supports every node.\n"
    "--cross-check A,B runs the graph on backends A and B with seeded random weights and\n"
    "compares every node: end to end (reported), and each node run on B from A's values of its\n"
    "inputs (judged: exit status 1 when a node differs beyond its dtype's tolerance).";

typedef struct tool_args {
    const char *config, *graph, *grid, *format, *cross, *plugins, *backend;
    int64_t tokens, kv, seed;
    bool no_fuse, stats;
    const char *grid_list[MAX_GRIDS];
    size_t n_grid_args;
} tool_args;

typedef enum graph_kind { G_PREFILL, G_DECODE, G_VISION } graph_kind;

/* ---- argument handling --------------------------------------------------------------------- */

static int usage_error(const char *fmt, ...) QVL_PRINTF(1, 2);
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* The table parser keeps only the last value of a flag; collect every --grid by walking argv
 * the same way it does (value-taking flags consume the next word). */
static int collect_grids(cli_opt *opts, size_t n_opts, int argc, char **argv, tool_args *a) {
    a->n_grid_args = 0;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--") == 0) break;
        if (strncmp(s, "--", 2) != 0) continue;
        const char *name = s + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const cli_opt *o = NULL;
        for (size_t k = 0; k < n_opts; k++)
            if (strlen(opts[k].name) == len && strncmp(opts[k].name, name, len) == 0) o = &opts[k];
        if (!o) continue;
        const char *value = NULL;
        if (o->kind != CLI_FLAG) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
        }
        if (strcmp(o->name, "grid") == 0 && value) {
            if (a->n_grid_args == MAX_GRIDS)
                return usage_error("--grid: at most %d images", MAX_GRIDS);
            a->grid_list[a->n_grid_args++] = value;
        }
    }
    return 0;
}

static bool parse_i64(const char *s, const char **end, int64_t *out) {
    char *e = NULL;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (errno || e == s || v < 1 || v > (1LL << 24)) return false;
    *out = v;
    *end = e;
    return true;
}

/* "HxW[,HxW...]" appended to grids. */
static int parse_grid_text(const char *text, qvl_image_grid *grids, size_t *n) {
    const char *p = text;
    for (;;) {
        int64_t h = 0, w = 0;
        const char *e = NULL;
        if (!parse_i64(p, &e, &h) || (*e != 'x' && *e != 'X') || !parse_i64(e + 1, &e, &w) ||
            (*e != '\0' && *e != ','))
            return usage_error("--grid: '%s' is not HxW in patches (e.g. 32x32)", text);
        if (*n == MAX_GRIDS) return usage_error("--grid: at most %d images", MAX_GRIDS);
        grids[(*n)++] = (qvl_image_grid){1, h, w};
        if (*e == '\0') return 0;
        p = e + 1;
    }
}

/* ---- per-layer accounting ------------------------------------------------------------------ */

typedef enum group_kind { GR_LAYER, GR_BLOCK, GR_DEEPSTACK, GR_COUNT } group_kind;
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

typedef struct op_counts {
    size_t n[QVL_OP_COUNT];
} op_counts;

static void count_ops(const qvl_graph *g, op_counts *c) {
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

typedef struct group_table {
    int n_idx[GR_COUNT];      /* highest index + 1 seen among weights/inputs */
    bool *present[GR_COUNT];  /* [n_idx] */
    size_t *counts[GR_COUNT]; /* [n_idx * QVL_OP_COUNT] */
    size_t outside[QVL_OP_COUNT];
} group_table;

static void group_table_free(group_table *t) {
    for (int k = 0; k < GR_COUNT; k++) {
        free(t->present[k]);
        free(t->counts[k]);
    }
}

static bool group_table_build(const qvl_graph *g, const bool *fused, group_table *t) {
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

static void print_groups(FILE *f, const char *lead, const group_table *t, const bool *fused) {
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
static void print_deepstack_taps(FILE *f, const char *lead, const qvl_graph *g) {
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

/* ---- backends ------------------------------------------------------------------------------ */

/* Ask the backend about every live node of the graph, as the executor would hand it over. */
static int check_support(const qvl_graph *g, const qvl_loaded_backend *lb, const char *lead) {
    size_t n_nodes = 0, n_bad = 0;
    const char *first_bad = NULL;
    qvl_op first_op = QVL_OP_COUNT;
    for (size_t i = 0; i < qvl_graph_n_tensors(g); i++) {
        qvl_tid t = (qvl_tid)i;
        if (qvl_graph_kind(g, t) != QVL_TENSOR_NODE || !qvl_graph_is_live(g, t)) continue;
        qvl_op op = qvl_graph_op(g, t);
        qvl_tensor srcs[QVL_MAX_SRC], dst;
        qvl_node node;
        memset(&node, 0, sizeof node);
        memset(srcs, 0, sizeof srcs);
        node.op = op;
        node.params = *qvl_graph_params(g, t);
        node.n_src = qvl_op_max_inputs(op);
        const qvl_tid *s = qvl_graph_srcs(g, t);
        for (uint32_t k = 0; k < node.n_src; k++) {
            if (s[k] < 0) continue;
            srcs[k].desc = *qvl_graph_desc(g, s[k]);
            node.src[k] = &srcs[k];
        }
        dst.desc = *qvl_graph_desc(g, t);
        dst.data = NULL;
        node.dst = &dst;
        node.name = qvl_graph_tensor_name(g, t);
        n_nodes++;
        bool ok = qvl_op_is_view(op) || (qvl_backend_kernel(lb->iface, op) && lb->iface->supports &&
                                         lb->iface->supports(lb->be, &node));
        if (!ok) {
            if (!first_bad) {
                first_bad = node.name ? node.name : "(unnamed)";
                first_op = op;
            }
            n_bad++;
        }
    }
    if (n_bad) {
        fprintf(stderr, PROG ": backend %s does not support %zu of %zu nodes (first: %s, %s)\n",
                lb->name, n_bad, n_nodes, first_bad, qvl_op_name(first_op));
        return EXIT_FAIL;
    }
    printf("%sbackend %s (%s): supports all %zu nodes\n", lead, lb->name, lb->library_path,
           n_nodes);
    return 0;
}

typedef struct fill_ctx {
    uint64_t rng;
    int64_t vocab, n_past;
    int64_t S, n_seg;
    int32_t *pos_idx, *rope_pos, *segments;
} fill_ctx;

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* i32 inputs get values the model would see: token ids in range, positions after the cache,
 * and the vision graph's taps, rope positions and segments from the real grids. */
static void fill_i32(qvl_tid t, const char *name, int32_t *data, int64_t n, void *user) {
    (void)t;
    fill_ctx *c = user;
    const int32_t *from = NULL;
    int64_t avail = 0;
    if (name && strcmp(name, "ids") == 0) {
        for (int64_t i = 0; i < n; i++)
            data[i] = (int32_t)(next_rand(&c->rng) % (uint64_t)c->vocab);
        return;
    }
    if (name && strcmp(name, "kv_at") == 0) { /* the reused decode graph's KV length */
        for (int64_t i = 0; i < n; i++) data[i] = (int32_t)c->n_past;
        return;
    }
    if (name && strcmp(name, "pos") == 0) {
        int64_t per_row = n / 3;
        for (int64_t i = 0; i < n; i++)
            data[i] = (int32_t)(c->n_past + (per_row ? i % per_row : 0));
        return;
    }
    if (name && strcmp(name, "pos_interp.idx") == 0)
        from = c->pos_idx, avail = 4 * c->S;
    else if (name && strcmp(name, "rope_pos") == 0)
        from = c->rope_pos, avail = 2 * c->S;
    else if (name && strcmp(name, "segments") == 0)
        from = c->segments, avail = c->n_seg;
    for (int64_t i = 0; i < n; i++) data[i] = (from && i < avail) ? from[i] : 0;
}

/* "A,B" into two names; false when it is not exactly two non-empty names. */
static bool split_pair(const char *text, char names[2][64]) {
    const char *comma = strchr(text, ',');
    size_t l0 = comma ? (size_t)(comma - text) : 0;
    if (!comma || l0 == 0 || l0 >= 64 || strlen(comma + 1) == 0 || strlen(comma + 1) >= 64 ||
        strchr(comma + 1, ','))
        return false;
    memcpy(names[0], text, l0);
    names[0][l0] = '\0';
    snprintf(names[1], 64, "%s", comma + 1);
    return true;
}

static int cross_check(qvl_graph *g, const tool_args *a, const char *label, fill_ctx *fc,
                       qvl_loaded_backend *const lb[2]) {
    qvl_error err = {0};
    int rc = EXIT_FAIL;
    qvl_crosscheck_result res;
    memset(&res, 0, sizeof res);
    qvl_status st = qvl_graph_crosscheck(g, lb[0]->iface, lb[0]->be, lb[1]->iface, lb[1]->be,
                                         (uint64_t)a->seed, fill_i32, fc, &res, &err);
    const char *worst = res.worst >= 0 ? qvl_graph_tensor_name(g, res.worst) : NULL;
    if (st == QVL_OK || st == QVL_E_MISMATCH) {
        printf("cross-check %s: %s vs %s, seed %lld: %zu nodes compared, each on the same "
               "inputs: worst %s (max abs %.3g, rel %.3g)\n",
               label, lb[0]->name, lb[1]->name, (long long)a->seed, res.nodes_compared,
               worst ? worst : "-", res.worst_abs, res.worst_rel);
        const char *e2e = res.e2e_worst >= 0 ? qvl_graph_tensor_name(g, res.e2e_worst) : NULL;
        const char *beyond =
            res.e2e_first_beyond >= 0 ? qvl_graph_tensor_name(g, res.e2e_first_beyond) : NULL;
        printf("end to end (differences accumulate, not judged): worst %s (max abs %.3g, rel "
               "%.3g)%s%s\n",
               e2e ? e2e : "-", res.e2e_worst_abs, res.e2e_worst_rel,
               beyond ? ", past the per-op tolerance from " : "", beyond ? beyond : "");
    }
    if (st == QVL_E_MISMATCH) {
        const char *bad = res.first_bad >= 0 ? qvl_graph_tensor_name(g, res.first_bad) : NULL;
        printf("cross-check: MISMATCH, first at %s (max abs %.3g, rel %.3g)\n", bad ? bad : "?",
               res.bad_abs, res.bad_rel);
        fprintf(stderr, PROG ": %s\n", err.msg);
        rc = EXIT_FAIL;
    } else if (st != QVL_OK) {
        goto fail;
    } else {
        printf("cross-check: OK\n");
        rc = 0;
    }
    return rc;
fail:
    fprintf(stderr, PROG ": %s\n", err.msg);
    return EXIT_FAIL;
}

/* ---- main ---------------------------------------------------------------------------------- */

static void print_op_table(FILE *f, const char *lead, const op_counts *before,
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

static double mib(size_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

int main(int argc, char **argv) {
    tool_args a;
    memset(&a, 0, sizeof a);
    a.format = "text";
    a.seed = 1;
    cli_opt opts[] = {
        {"config", 0, CLI_STRING, &a.config, "FILE", "config.json of the model (or its directory)",
         0, 0, false},
        {"graph", 0, CLI_STRING, &a.graph, "KIND", "text-prefill, text-decode or vision", 0, 0,
         false},
        {"tokens", 0, CLI_INT, &a.tokens, "N", "prompt tokens of text-prefill (default 32)", 1,
         1 << 24, false},
        {"kv", 0, CLI_INT, &a.kv, "N", "KV cache rows (text-decode default 4096; prefill: tokens)",
         1, 1 << 24, false},
        {"grid", 0, CLI_STRING, &a.grid, "HxW", "image grid in patches, repeatable (default 32x32)",
         0, 0, false},
        {"no-fuse", 0, CLI_FLAG, &a.no_fuse, NULL, "skip the fusion pass", 0, 0, false},
        {"format", 0, CLI_STRING, &a.format, "FMT", "text (default) or dot", 0, 0, false},
        {"stats", 0, CLI_FLAG, &a.stats, NULL, "print a summary instead of every node", 0, 0,
         false},
        {"cross-check", 0, CLI_STRING, &a.cross, "A,B", "run on backends A and B and compare", 0, 0,
         false},
        {"seed", 0, CLI_INT, &a.seed, "S", "seed of the cross-check's random data (default 1)", 0,
         9007199254740991.0, false},
        {"plugins", 0, CLI_STRING, &a.plugins, "FILE", "plugins.yaml to load backends from", 0, 0,
         false},
        {"backend", 0, CLI_STRING, &a.backend, "NAME", "check that this backend supports the graph",
         0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *positional[1];
    size_t n_pos = 0;
    int prc = cli_parse(PROG, opts, n_opts, argc - 1, argv + 1, positional, 0, &n_pos);
    if (prc == CLI_HELP) {
        cli_print_help(stdout, USAGE, opts, n_opts);
        return 0;
    }
    if (prc != CLI_OK) return EXIT_USAGE;
    if (collect_grids(opts, n_opts, argc - 1, argv + 1, &a)) return EXIT_USAGE;

    if (!a.config) return usage_error("--config is required (see --help)");
    if (!a.graph) return usage_error("--graph is required (see --help)");
    graph_kind kind;
    if (strcmp(a.graph, "text-prefill") == 0)
        kind = G_PREFILL;
    else if (strcmp(a.graph, "text-decode") == 0)
        kind = G_DECODE;
    else if (strcmp(a.graph, "vision") == 0)
        kind = G_VISION;
    else
        return usage_error("--graph: '%s' is not text-prefill, text-decode or vision", a.graph);
    qvl_dump_format fmt;
    if (strcmp(a.format, "text") == 0)
        fmt = QVL_DUMP_TEXT;
    else if (strcmp(a.format, "dot") == 0)
        fmt = QVL_DUMP_DOT;
    else
        return usage_error("--format: '%s' is not text or dot", a.format);
    if (kind == G_VISION && (a.tokens || a.kv))
        return usage_error("--tokens and --kv apply to the text graphs, not %s", a.graph);
    if (kind != G_VISION && a.n_grid_args)
        return usage_error("--grid applies to the vision graph, not %s", a.graph);
    if (kind == G_DECODE && a.tokens)
        return usage_error("--tokens: text-decode processes one token (set the cache with --kv)");
    char cross_names[2][64];
    if (a.cross && !split_pair(a.cross, cross_names))
        return usage_error("--cross-check: '%s' is not two backend names A,B", a.cross);
    if (a.cross && a.backend)
        return usage_error(
            "--backend and --cross-check exclude each other (--cross-check names both)");
    qvl_image_grid grids[MAX_GRIDS];
    size_t n_grids = 0;
    for (size_t i = 0; i < a.n_grid_args; i++)
        if (parse_grid_text(a.grid_list[i], grids, &n_grids)) return EXIT_USAGE;
    if (kind == G_VISION && n_grids == 0) grids[n_grids++] = (qvl_image_grid){1, 32, 32};

    /* A directory stands for its config.json. */
    char cfg_path[4096];
    struct stat sb;
    if (stat(a.config, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", a.config);
    else
        snprintf(cfg_path, sizeof cfg_path, "%s", a.config);

    qvl_error err = {0};
    qvl_qwen3vl_config cfg;
    if (qvl_qwen3vl_config_load(cfg_path, &cfg, &err) != QVL_OK) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return EXIT_FAIL;
    }

    /* An explicitly named plugins file must exist and parse, cross-check or not. */
    qvl_plugin_config *pc = NULL;
    qvl_loaded_backend *lb = NULL, *cross_lb[2] = {NULL, NULL};
    qvl_graph *g = NULL;
    int rc = EXIT_FAIL;
    fill_ctx fc;
    memset(&fc, 0, sizeof fc);
    /* Backends are loaded before anything is printed, so their errors come alone. An
     * explicitly named plugins file must exist and parse, cross-check or not. */
    if ((a.plugins || a.backend || a.cross) && qvl_plugins_locate(a.plugins, &pc, &err) != QVL_OK)
        goto fail;
    if (a.backend && qvl_backend_select(pc, a.backend, &lb, &err) != QVL_OK) goto fail;
    for (int i = 0; a.cross && i < 2; i++)
        if (qvl_backend_select(pc, cross_names[i], &cross_lb[i], &err) != QVL_OK) goto fail;

    qvl_dtype wdt = QVL_F32;
    if (strcmp(cfg.text.dtype, "bfloat16") == 0)
        wdt = QVL_BF16;
    else if (strcmp(cfg.text.dtype, "float16") == 0)
        wdt = QVL_F16;

    char label[160];
    fc.rng = (uint64_t)a.seed;
    fc.vocab = cfg.text.vocab_size;
    if (kind == G_VISION) {
        qvl_vision_graph_opts vo = {n_grids, grids, wdt, QVL_F32};
        if (qvl_qwen3vl_build_vision(&cfg, &vo, &g, &err) != QVL_OK) goto fail;
        int64_t S = 0, G = 0;
        for (size_t i = 0; i < n_grids; i++) {
            S += grids[i].t * grids[i].h * grids[i].w;
            G += grids[i].t;
        }
        fc.S = S;
        fc.n_seg = G + 1;
        fc.pos_idx = malloc((size_t)(4 * S) * sizeof(int32_t));
        float *pos_w = malloc((size_t)(4 * S) * sizeof(float));
        fc.rope_pos = malloc((size_t)(2 * S) * sizeof(int32_t));
        fc.segments = malloc((size_t)(G + 1) * sizeof(int32_t));
        qvl_status st = (fc.pos_idx && pos_w && fc.rope_pos && fc.segments)
                            ? qvl_qwen3vl_vision_aux(&cfg, n_grids, grids, fc.pos_idx, pos_w,
                                                     fc.rope_pos, fc.segments, &err)
                            : qvl_fail(&err, QVL_E_NOMEM, "out of memory");
        free(pos_w);
        if (st != QVL_OK) goto fail;
        int len =
            snprintf(label, sizeof label, "%lld blocks, %zu image%s:", (long long)cfg.vision.depth,
                     n_grids, n_grids > 1 ? "s" : "");
        for (size_t i = 0; i < n_grids && len > 0 && (size_t)len < sizeof label; i++)
            len += snprintf(label + len, sizeof label - (size_t)len, " %lldx%lld",
                            (long long)grids[i].h, (long long)grids[i].w);
    } else {
        qvl_text_graph_opts to;
        memset(&to, 0, sizeof to);
        to.weight_dtype = wdt;
        to.norm_dtype = QVL_F32;
        if (kind == G_PREFILL) {
            to.n_tokens = a.tokens ? a.tokens : 32;
            to.n_past = 0;
            to.kv_capacity = a.kv ? a.kv : to.n_tokens;
        } else {
            to.kv_capacity = a.kv ? a.kv : 4096;
            to.n_tokens = 1;
            to.n_past = to.kv_capacity - 1;
        }
        if (to.kv_capacity < to.n_past + to.n_tokens) {
            fprintf(stderr, PROG ": --kv %lld cannot hold %lld tokens\n", (long long)to.kv_capacity,
                    (long long)to.n_tokens);
            rc = EXIT_USAGE;
            goto done;
        }
        /* Decode: the graph the model reuses for every step, the KV length an input. */
        fc.n_past = to.n_past;
        if (kind != G_PREFILL) {
            to.kv_at_input = true;
            to.n_past = 0;
        }
        if (qvl_qwen3vl_build_text(&cfg, &to, &g, &err) != QVL_OK) goto fail;
        snprintf(label, sizeof label, "%lld layers, %lld token%s after %lld cached, kv %lld",
                 (long long)cfg.text.num_hidden_layers, (long long)to.n_tokens,
                 to.n_tokens > 1 ? "s" : "", (long long)fc.n_past, (long long)to.kv_capacity);
    }
    if (qvl_graph_validate(g, &err) != QVL_OK) goto fail;

    /* Text: the graph as built; then fuse and show it again. */
    op_counts before, after;
    count_ops(g, &before);
    size_t nodes_before = qvl_graph_n_nodes(g);
    const bool text_out = fmt == QVL_DUMP_TEXT && !a.stats && !a.cross;
    if (text_out) {
        printf("== %s (%s) ==\n", a.graph, label);
        printf("== graph before fusion: %zu nodes ==\n", nodes_before);
        if (qvl_graph_dump(g, stdout, QVL_DUMP_TEXT) != QVL_OK) {
            qvl_fail(&err, QVL_E_IO, "cannot write the dump");
            goto fail;
        }
    }
    qvl_fusion_report rep;
    memset(&rep, 0, sizeof rep);
    if (!a.no_fuse && qvl_graph_fuse(g, &rep, &err) != QVL_OK) goto fail;
    count_ops(g, &after);
    size_t nodes_after = qvl_graph_n_nodes(g);
    bool fused_ops[QVL_OP_COUNT];
    for (int op = 0; op < QVL_OP_COUNT; op++) fused_ops[op] = after.n[op] && !before.n[op];

    if (a.cross) {
        printf("%s: %zu nodes%s\n", label, nodes_after,
               a.no_fuse ? " (not fused)" : " after fusion");
        rc = cross_check(g, &a, a.graph, &fc, cross_lb);
        goto done;
    }

    qvl_plan_stats ps;
    memset(&ps, 0, sizeof ps);
    if (qvl_graph_plan(g, true, &ps, &err) != QVL_OK) goto fail;

    /* The summary: as plain lines, or as DOT comments ahead of the graph. */
    const char *lead = fmt == QVL_DUMP_DOT ? "// " : "";
    if (text_out) {
        if (a.no_fuse) {
            printf("== fusion: skipped (--no-fuse) ==\n");
        } else {
            printf("== fusion ==\n");
            for (size_t r = 0; r < rep.n_rules; r++)
                printf("%-20s fired %zu\n", rep.rule[r], rep.fired[r]);
            printf("nodes: %zu before fusion, %zu after\n", nodes_before, nodes_after);
            printf("== graph after fusion: %zu nodes ==\n", nodes_after);
            if (qvl_graph_dump(g, stdout, QVL_DUMP_TEXT) != QVL_OK) {
                qvl_fail(&err, QVL_E_IO, "cannot write the dump");
                goto fail;
            }
        }
        printf("== memory ==\n");
    } else {
        printf("%s%s (%s)\n", lead, a.graph, label);
        printf("%snodes: %zu before fusion, %zu after%s\n", lead, nodes_before, nodes_after,
               a.no_fuse ? " (--no-fuse)" : "");
        if (a.stats) {
            printf("%sops:%s\n", lead, a.no_fuse ? "" : " before -> after fusion");
            print_op_table(stdout, lead, &before, &after, !a.no_fuse);
        }
        if (!a.no_fuse) {
            printf("%sfusion rules:\n", lead);
            for (size_t r = 0; r < rep.n_rules; r++)
                printf("%s  %-20s fired %zu\n", lead, rep.rule[r], rep.fired[r]);
        }
        if (a.stats) {
            group_table gt;
            if (!group_table_build(g, fused_ops, &gt)) {
                group_table_free(&gt);
                qvl_fail(&err, QVL_E_NOMEM, "out of memory");
                goto fail;
            }
            print_groups(stdout, lead, &gt, fused_ops);
            group_table_free(&gt);
            if (kind == G_VISION) print_deepstack_taps(stdout, lead, g);
        }
    }
    printf("%splanned peak activation memory: %.2f MiB with buffer reuse, %.2f MiB without "
           "(%zu buffers)\n",
           lead, mib(ps.peak_bytes), mib(ps.total_bytes), ps.n_buffers);
    /* The planner places inputs in the arena too; for decode the KV caches dominate. */
    size_t input_bytes = 0;
    for (size_t i = 0; i < qvl_graph_n_tensors(g); i++) {
        size_t bytes = 0;
        if (qvl_graph_kind(g, (qvl_tid)i) == QVL_TENSOR_INPUT &&
            qvl_desc_span_bytes(qvl_graph_desc(g, (qvl_tid)i), &bytes))
            input_bytes += bytes;
    }
    printf("%sinputs, which the arena holds too (KV caches included): %.2f MiB\n", lead,
           mib(input_bytes));
    rc = lb ? check_support(g, lb, lead) : 0;
    if (fmt == QVL_DUMP_DOT && qvl_graph_dump(g, stdout, QVL_DUMP_DOT) != QVL_OK) {
        qvl_fail(&err, QVL_E_IO, "cannot write the dump");
        goto fail;
    }
    if (fflush(stdout) != 0) {
        qvl_fail(&err, QVL_E_IO, "cannot write to stdout");
        goto fail;
    }
    goto done;
fail:
    fprintf(stderr, PROG ": %s\n", err.msg);
    rc = EXIT_FAIL;
done:
    qvl_backend_unload(lb);
    qvl_backend_unload(cross_lb[0]);
    qvl_backend_unload(cross_lb[1]);
    qvl_plugins_free(pc);
    qvl_graph_free(g);
    free(fc.pos_idx);
    free(fc.rope_pos);
    free(fc.segments);
    return rc;
}
