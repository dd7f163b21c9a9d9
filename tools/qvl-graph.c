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
#include <unistd.h>

#include "cli.h"
#include "graph_groups.h"
#include "graph_split_stats.h"
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
    "Graphviz DOT. --backend NAME checks that the backend supports every node; when it does not\n"
    "and its plugins.yaml entry allows fallback, the nodes it refuses are placed on the next\n"
    "backends of plugins.yaml that take them (as qvl run places them), and the nodes per\n"
    "backend and the bytes that cross between them per run are printed.\n"
    "--cross-check A,B runs the graph on backends A and B with seeded random weights and\n"
    "compares every node: end to end (reported), and each node run on B from A's values of its\n"
    "inputs (judged: exit status 1 when a node differs beyond its dtype's tolerance).";

typedef struct tool_args {
    const char *config, *graph, *grid, *format, *cross, *plugins, *backend, *cpu_backend;
    const char *gpu_layers, *kv_type;
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

/* ---- backends ------------------------------------------------------------------------------ */

/* Ask the backend about every live node of the graph, as the executor would hand it over.
 * lead NULL: only the answer, nothing printed. */
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
        bool ok = qvl_op_is_view(op) || qvl_backend_supports(lb->iface, lb->be, &node);
        if (!ok) {
            if (!first_bad) {
                first_bad = node.name ? node.name : "(unnamed)";
                first_op = op;
            }
            n_bad++;
        }
    }
    if (n_bad) {
        if (lead)
            fprintf(stderr, PROG ": backend %s does not support %zu of %zu nodes (first: %s, %s)\n",
                    lb->name, n_bad, n_nodes, first_bad, qvl_op_name(first_op));
        return EXIT_FAIL;
    }
    if (!lead) return 0; /* asked quietly */
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

/* ", declined N by BACKEND" when the backend fusion asked refused some matches of rule r. */
static const char *declined_note(const qvl_fusion_report *rep, size_t r,
                                 const qvl_loaded_backend *target, char *buf, size_t size) {
    buf[0] = '\0';
    if (rep->declined[r] && target)
        snprintf(buf, size, ", declined %zu by %s", rep->declined[r], target->name);
    return buf;
}

/* Per node of the cross-check's isolated pass, on stderr: a fraction redrawn in place on a
 * terminal, else one plain line per node (a log then shows how far a slow check got). */
typedef struct cross_progress {
    const qvl_graph *g;
    bool tty;
} cross_progress;

static void on_cross_node(qvl_tid t, size_t done, size_t total, void *user) {
    const cross_progress *p = user;
    const char *name = qvl_graph_tensor_name(p->g, t);
    if (p->tty) {
        fprintf(stderr, "\r\033[Kcross-check: node %zu/%zu %s", done, total, name ? name : "");
        if (done == total) fputs("\r\033[K", stderr);
    } else {
        fprintf(stderr, "cross-check: node %zu/%zu %s\n", done, total, name ? name : "");
    }
    fflush(stderr);
}

static int cross_check(qvl_graph *g, const tool_args *a, const char *label, fill_ctx *fc,
                       qvl_loaded_backend *const lb[2]) {
    qvl_error err = {0};
    int rc = EXIT_FAIL;
    qvl_crosscheck_result res;
    memset(&res, 0, sizeof res);
    cross_progress cp = {g, isatty(STDERR_FILENO) != 0};
    qvl_status st = qvl_graph_crosscheck_progress(g, lb[0]->iface, lb[0]->be, lb[1]->iface,
                                                  lb[1]->be, (uint64_t)a->seed, fill_i32, fc,
                                                  on_cross_node, &cp, &res, &err);
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
        {"kv-type", 0, CLI_STRING, &a.kv_type, "TYPE", "text graphs: KV cache dtype f32, f16 or q8_0 (default f16, as qvl run)",
         0, 0, false},
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
        {"gpu-layers", 0, CLI_STRING, &a.gpu_layers, "N", "text graphs: also show the split with the last N layers and the output head on --backend, the rest on --cpu-backend",
         0, 0, false},
        {"cpu-backend", 0, CLI_STRING, &a.cpu_backend, "NAME", "the other backend of --gpu-layers (default cpu_avx2)",
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
    int64_t ngl = -1;
    if (a.gpu_layers) {
        char *end;
        long long v = strtoll(a.gpu_layers, &end, 10);
        if (end == a.gpu_layers || *end || v < 0)
            return usage_error("--gpu-layers: '%s' is not a number of layers", a.gpu_layers);
        if (kind == G_VISION || !a.backend || a.cross)
            return usage_error("--gpu-layers needs a text graph and --backend (no --cross-check)");
        ngl = v;
    }
    qvl_dump_format fmt;
    if (strcmp(a.format, "text") == 0)
        fmt = QVL_DUMP_TEXT;
    else if (strcmp(a.format, "dot") == 0)
        fmt = QVL_DUMP_DOT;
    else
        return usage_error("--format: '%s' is not text or dot", a.format);
    if (kind == G_VISION && (a.tokens || a.kv || a.kv_type))
        return usage_error("--tokens, --kv and --kv-type apply to the text graphs, not %s",
                           a.graph);
    qvl_dtype kv_dtype = QVL_F16; /* qvl run's default without a backend's kv_type option */
    if (a.kv_type && (!qvl_dtype_parse(a.kv_type, &kv_dtype) ||
                      (kv_dtype != QVL_F32 && kv_dtype != QVL_F16 && kv_dtype != QVL_Q8_0)))
        return usage_error("--kv-type: '%s' is not f32, f16 or q8_0", a.kv_type);
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
    qvl_loaded_backend *lb = NULL, *cpu_lb = NULL, *cross_lb[2] = {NULL, NULL};
    qvl_loaded_backend *chain[16] = {NULL}; /* --backend, then its fallbacks */
    size_t n_chain = 0;
    bool fell_back = false;
    qvl_graph *g = NULL;
    int rc = EXIT_FAIL;
    fill_ctx fc;
    memset(&fc, 0, sizeof fc);
    /* Backends are loaded before anything is printed, so their errors come alone. An
     * explicitly named plugins file must exist and parse, cross-check or not. */
    if ((a.plugins || a.backend || a.cross) && qvl_plugins_locate(a.plugins, &pc, &err) != QVL_OK)
        goto fail;
    if (a.backend && qvl_backend_select(pc, a.backend, &lb, &err) != QVL_OK) goto fail;
    if (ngl >= 0 && qvl_backend_select(pc, a.cpu_backend ? a.cpu_backend : "cpu_avx2", &cpu_lb,
                                       &err) != QVL_OK)
        goto fail;
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
        qvl_vision_graph_opts vo = {.n_images = n_grids, .grids = grids, .weight_dtype = wdt,
                                    .norm_dtype = QVL_F32};
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
        to.kv_dtype = kv_dtype;
        if (kv_dtype == QVL_Q8_0 && cfg.text.head_dim % QVL_Q8_0_BLOCK != 0) {
            fprintf(stderr, PROG ": --kv-type q8_0 needs a head_dim that is a multiple of %d "
                    "(this model's is %lld)\n", QVL_Q8_0_BLOCK, (long long)cfg.text.head_dim);
            rc = EXIT_USAGE;
            goto done;
        }
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
    if (lb && !lb->no_fallback && ngl < 0 && check_support(g, lb, NULL) != 0) {
        /* the other backends of plugins.yaml, loaded only now that a node needs them */
        chain[n_chain++] = lb;
        for (size_t i = 0; i < pc->n && n_chain < 16; i++)
            if (strcmp(pc->specs[i].name, lb->name) != 0 &&
                qvl_backend_select(pc, pc->specs[i].name, &chain[n_chain], &err) == QVL_OK)
                n_chain++;
        bool all_first = false;
        if (graph_fallback_stats_print(stdout, fmt == QVL_DUMP_DOT ? "// " : "", g, chain, n_chain,
                                       &all_first, &err) != QVL_OK)
            goto fail;
        fell_back = !all_first;
    }
    if (ngl >= 0 && graph_split_stats_print(stdout, fmt == QVL_DUMP_DOT ? "// " : "", g,
                                            cfg.text.num_hidden_layers, ngl, lb, cpu_lb,
                                            &err) != QVL_OK)
        goto fail;

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
    /* Fusion asks the backend that will run the graph: --backend, or the cross-check's
     * second (the one under test; the first is the oracle and runs every op). */
    const qvl_loaded_backend *target = a.cross ? cross_lb[1] : lb;
    if (!a.no_fuse && qvl_graph_fuse(g, target ? target->iface : NULL, target ? target->be : NULL,
                                     &rep, &err) != QVL_OK)
        goto fail;
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
    char note[96];
    if (text_out) {
        if (a.no_fuse) {
            printf("== fusion: skipped (--no-fuse) ==\n");
        } else {
            printf("== fusion ==\n");
            for (size_t r = 0; r < rep.n_rules; r++)
                printf("%-20s fired %zu%s\n", rep.rule[r], rep.fired[r],
                       declined_note(&rep, r, target, note, sizeof note));
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
                printf("%s  %-20s fired %zu%s\n", lead, rep.rule[r], rep.fired[r],
                       declined_note(&rep, r, target, note, sizeof note));
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
    /* With fallback, a node --backend refuses runs on another backend: not a failure. */
    rc = lb && !fell_back ? check_support(g, lb, lead) : 0;
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
    for (size_t i = 1; i < n_chain; i++) qvl_backend_unload(chain[i]);
    qvl_backend_unload(lb);
    qvl_backend_unload(cpu_lb);
    qvl_backend_unload(cross_lb[0]);
    qvl_backend_unload(cross_lb[1]);
    qvl_plugins_free(pc);
    qvl_graph_free(g);
    free(fc.pos_idx);
    free(fc.rope_pos);
    free(fc.segments);
    return rc;
}
