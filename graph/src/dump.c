/* Dumps: a text listing (one line per tensor, nodes in execution order) and Graphviz DOT.
 *
 * Text:
 *   # qvl graph: 14 tensors (2 inputs, 3 weights), 9 live nodes, 1 output
 *   # ops: matmul 3, add 1, view 2, ...
 *   input   %0 "x" [4, 64] f32
 *   weight  %1 "w" [64, 64] f32
 *   node    %5 matmul "q" [4, 64] f32 <- %0 "x", %1 "w", -
 *   output  "y" = %9 "blk.0.out"
 * Parameters follow the inputs in braces, e.g. {eps=1e-06}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

static void params_str(const qvl_gtensor *r, char *buf, size_t size) {
    const qvl_params *p = &r->params;
    buf[0] = '\0';
    switch (r->op) {
    case QVL_OP_SCALE: snprintf(buf, size, " {s=%g}", (double)p->scale.s); break;
    case QVL_OP_RMS_NORM:
    case QVL_OP_LAYER_NORM: snprintf(buf, size, " {eps=%g}", (double)p->norm.eps); break;
    case QVL_OP_ROPE:
        snprintf(buf, size, " {mode=%d theta=%g sections=%d,%d,%d,%d}", (int)p->rope.mode,
                 (double)p->rope.theta, (int)p->rope.sections[0], (int)p->rope.sections[1],
                 (int)p->rope.sections[2], (int)p->rope.sections[3]);
        break;
    case QVL_OP_NORM_ROPE:
        snprintf(buf, size, " {eps=%g mode=%d theta=%g sections=%d,%d,%d}",
                 (double)p->norm_rope.eps, (int)p->norm_rope.mode, (double)p->norm_rope.theta,
                 (int)p->norm_rope.sections[0], (int)p->norm_rope.sections[1],
                 (int)p->norm_rope.sections[2]);
        break;
    case QVL_OP_MASK_CAUSAL: snprintf(buf, size, " {n_past=%lld}", (long long)p->mask.n_past); break;
    case QVL_OP_VIEW: snprintf(buf, size, " {offset=%lld}", (long long)p->view.offset); break;
    case QVL_OP_STORE_ROWS: snprintf(buf, size, " {offset=%lld}", (long long)p->store.offset); break;
    case QVL_OP_NORM_LINEAR:
        snprintf(buf, size, " {norm=%s eps=%g n_proj=%d%s%s}",
                 p->norm_linear.norm == QVL_NORM_LAYER ? "layer" : "rms",
                 (double)p->norm_linear.eps, (int)p->norm_linear.n_proj,
                 p->norm_linear.act == QVL_ACT_NONE ? "" : " act=", /* shown when there is one */
                 p->norm_linear.act == QVL_ACT_NONE ? "" : qvl_act_name(p->norm_linear.act));
        break;
    case QVL_OP_ATTENTION: {
        static const char *const masks[] = {"none", "causal", "segments", "causal_at"};
        int m = p->attention.mask;
        if (m == QVL_MASK_CAUSAL_AT) { /* n_past is data (the "at" input), not a parameter */
            snprintf(buf, size, " {scale=%g mask=causal_at}", (double)p->attention.scale);
            break;
        }
        snprintf(buf, size, " {scale=%g mask=%s n_past=%lld}", (double)p->attention.scale,
                 m >= 0 && m < 4 ? masks[m] : "?", (long long)p->attention.n_past);
        break;
    }
    case QVL_OP_ATTENTION_SLOTS:
        snprintf(buf, size, " {scale=%g}", (double)p->attention.scale);
        break;
    case QVL_OP_MLP_RESIDUAL: snprintf(buf, size, " {act=%s}", qvl_act_name(p->mlp.act)); break;
    default: break;
    }
}

/* Quoted tensor name (or "" for unnamed nodes), escaping quotes and backslashes. */
static void put_name(FILE *f, const char *name) {
    fputc('"', f);
    for (const char *c = name ? name : ""; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f);
        if ((unsigned char)*c < 0x20) fprintf(f, "\\x%02x", (unsigned char)*c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* A DOT string: newlines become DOT's \n line breaks, quotes and backslashes are escaped
 * and other control characters dropped, so any tensor name gives a valid file. */
static void put_dot(FILE *f, const char *text) {
    fputc('"', f);
    for (const char *c = text; *c; c++) {
        if (*c == '\n') fputs("\\n", f);
        else if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if ((unsigned char)*c >= 0x20) fputc(*c, f);
    }
    fputc('"', f);
}

static void header(const qvl_graph *g, FILE *f) {
    size_t n_in = 0, n_w = 0;
    for (size_t i = 0; i < g->n; i++) {
        n_in += g->t[i].live && g->t[i].kind == QVL_TENSOR_INPUT;
        n_w += g->t[i].live && g->t[i].kind == QVL_TENSOR_WEIGHT;
    }
    fprintf(f, "# qvl graph: %zu tensors (%zu inputs, %zu weights), %zu live nodes, %zu outputs\n",
            g->n, n_in, n_w, qvl_graph_n_nodes(g), g->n_out);
    fprintf(f, "# ops:");
    const char *sep = " ";
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        size_t c = qvl_graph_count_op(g, (qvl_op)op);
        if (!c) continue;
        fprintf(f, "%s%s %zu", sep, qvl_op_name((qvl_op)op), c);
        sep = ", ";
    }
    fprintf(f, "\n");
}

static void dump_text(const qvl_graph *g, FILE *f, const qvl_tid *order, size_t n_order) {
    char d[128], ps[160];
    header(g, f);
    for (size_t i = 0; i < g->n; i++) {
        const qvl_gtensor *r = &g->t[i];
        if (!r->live || r->kind == QVL_TENSOR_NODE) continue;
        fprintf(f, "%-7s %%%zu ", r->kind == QVL_TENSOR_INPUT ? "input" : "weight", i);
        put_name(f, r->name);
        fprintf(f, " %s\n", qvl_desc_str(&r->desc, d, sizeof d));
    }
    for (size_t k = 0; k < n_order; k++) {
        qvl_tid t = order[k];
        const qvl_gtensor *r = &g->t[t];
        fprintf(f, "node    %%%d %s ", (int)t, qvl_op_name(r->op));
        put_name(f, r->name);
        fprintf(f, " %s <-", qvl_desc_str(&r->desc, d, sizeof d));
        uint32_t ns = qvl_gi_n_src(g, t);
        for (uint32_t i = 0; i < ns; i++) {
            qvl_tid s = r->src[i];
            fprintf(f, "%s", i ? ", " : " ");
            if (s < 0) {
                fputc('-', f);
                continue;
            }
            fprintf(f, "%%%d ", (int)s);
            put_name(f, g->t[s].name);
        }
        params_str(r, ps, sizeof ps);
        fprintf(f, "%s\n", ps);
    }
    for (size_t i = 0; i < g->n_out; i++) {
        fprintf(f, "output  ");
        put_name(f, g->out[i].name);
        fprintf(f, " = %%%d ", (int)g->out[i].t);
        put_name(f, g->t[g->out[i].t].name);
        fputc('\n', f);
    }
}

/* Inputs and weights are drawn once per use, beside the node that reads them: a shared input
 * such as the positions feeds every layer, and one node with edges spanning the whole graph
 * makes Graphviz's layout take minutes on the 28-layer model. */
static void dot_leaf(const qvl_graph *g, FILE *f, qvl_tid src, qvl_tid user, uint32_t slot) {
    const qvl_gtensor *r = &g->t[src];
    char d[128], ps[768];
    bool in = r->kind == QVL_TENSOR_INPUT;
    fprintf(f, "  t%d_%d_%u [shape=%s, label=", (int)src, (int)user, slot, in ? "ellipse" : "note");
    snprintf(ps, sizeof ps, "%s %s\n%s", in ? "input" : "weight", r->name ? r->name : "",
             qvl_desc_str(&r->desc, d, sizeof d));
    put_dot(f, ps);
    fprintf(f, "];\n  t%d_%d_%u -> t%d [label=\"%u\"];\n", (int)src, (int)user, slot, (int)user,
            slot);
}

static void dump_dot(const qvl_graph *g, FILE *f, const qvl_tid *order, size_t n_order) {
    char d[128];
    fprintf(f, "digraph qvl {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n");
    for (size_t k = 0; k < n_order; k++) {
        qvl_tid t = order[k];
        const qvl_gtensor *r = &g->t[t];
        char label[1024], par[160];
        params_str(r, par, sizeof par);
        snprintf(label, sizeof label, "%%%d %s%s\n%s\n%s", (int)t, qvl_op_name(r->op), par,
                 r->name ? r->name : "", qvl_desc_str(&r->desc, d, sizeof d));
        fprintf(f, "  t%d [label=", (int)t);
        put_dot(f, label);
        fprintf(f, "%s];\n", r->op == QVL_OP_VIEW ? ", style=dashed" : "");
        uint32_t ns = qvl_gi_n_src(g, t);
        for (uint32_t i = 0; i < ns; i++) {
            qvl_tid s = r->src[i];
            if (s < 0) continue;
            if (g->t[s].kind == QVL_TENSOR_NODE)
                fprintf(f, "  t%d -> t%d [label=\"%u\"];\n", (int)s, (int)t, i);
            else
                dot_leaf(g, f, s, t, i);
        }
    }
    for (size_t i = 0; i < g->n_out; i++) {
        fprintf(f, "  out%zu [shape=doubleoctagon, label=", i);
        put_dot(f, g->out[i].name);
        fprintf(f, "];\n  t%d -> out%zu;\n", (int)g->out[i].t, i);
    }
    fprintf(f, "}\n");
}

qvl_status qvl_graph_dump(const qvl_graph *g, FILE *f, qvl_dump_format fmt) {
    if (!g || !f || (fmt != QVL_DUMP_TEXT && fmt != QVL_DUMP_DOT)) return QVL_E_INVALID;
    qvl_tid *order;
    size_t n_order;
    qvl_status s = qvl_gi_topo_order(g, &order, &n_order, NULL);
    if (s != QVL_OK) return s;
    if (fmt == QVL_DUMP_TEXT) dump_text(g, f, order, n_order);
    else dump_dot(g, f, order, n_order);
    free(order);
    return ferror(f) ? QVL_E_IO : QVL_OK;
}
