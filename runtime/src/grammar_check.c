/* What makes a parsed grammar safe to match (qvl/grammar.h):
 *   - every rule reachable from root has a finite derivation, so whatever the matcher accepts
 *     can still be finished (min_len, found by a fixpoint over the rules, is that length in
 *     code points and also guides random generators towards an end);
 *   - no left recursion: a rule that reaches itself through rules that can all be empty
 *     before it would make the matcher's expansion of a position endless. */
#include <stdlib.h>

#include "grammar_internal.h"

#define INF_LEN INT64_MAX

static int64_t add_len(int64_t a, int64_t b) {
    return (a == INF_LEN || b == INF_LEN || a > INF_LEN - b) ? INF_LEN : a + b;
}

static void compute_min_len(qvl_grammar *g) {
    for (size_t r = 0; r < g->n_rules; r++) g->min_len[r] = INF_LEN;
    bool changed = true;
    while (changed) {
        changed = false;
        for (size_t r = 0; r < g->n_rules; r++) {
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                int64_t sum = 0;
                for (const g_elem *e = &g->elems[g->alt_start[a]]; e->type != GE_END; e++)
                    sum = add_len(sum, e->type == GE_RULE ? g->min_len[e->v] : 1);
                if (sum < g->min_len[r]) {
                    g->min_len[r] = sum;
                    changed = true;
                }
            }
        }
    }
}

/* Rules reachable from root; marks in seen[]. */
static bool mark_reachable(const qvl_grammar *g, uint8_t *seen) {
    int32_t *pending = malloc((g->n_rules + 1) * sizeof *pending);
    if (!pending) return false;
    size_t n = 0;
    pending[n++] = g->root;
    seen[g->root] = 1;
    while (n > 0) {
        int32_t r = pending[--n];
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
            for (const g_elem *e = &g->elems[g->alt_start[a]]; e->type != GE_END; e++)
                if (e->type == GE_RULE && !seen[e->v]) {
                    seen[e->v] = 1;
                    pending[n++] = e->v;
                }
    }
    free(pending);
    return true;
}

/* Left-corner edges r -> s: s can begin r after rules that may all be empty. */
typedef struct corner_it {
    int32_t rule;
    uint32_t alt;
    int32_t pos; /* element within the alternative, -1 when the alternative is done */
} corner_it;

/* The next left-corner successor of it's rule, or -1 when there is none left. */
static int32_t next_corner(const qvl_grammar *g, corner_it *it) {
    while (it->alt < g->alt_off[it->rule + 1]) {
        if (it->pos < 0) it->pos = g->alt_start[it->alt];
        const g_elem *e = &g->elems[it->pos];
        if (e->type == GE_RULE) {
            bool go_on = g->min_len[e->v] == 0;
            int32_t s = e->v;
            if (go_on) it->pos++;
            else {
                it->alt++;
                it->pos = -1;
            }
            return s;
        }
        it->alt++;
        it->pos = -1;
    }
    return -1;
}

static qvl_status check_left_recursion(const qvl_grammar *g, qvl_error *err) {
    uint8_t *color = calloc(g->n_rules, 1); /* 0 new, 1 on the path, 2 done */
    corner_it *stack = malloc((g->n_rules + 1) * sizeof *stack);
    if (!color || !stack) {
        free(color);
        free(stack);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    }
    qvl_status st = QVL_OK;
    for (size_t start = 0; st == QVL_OK && start < g->n_rules; start++) {
        if (color[start]) continue;
        size_t n = 0;
        stack[n++] = (corner_it){(int32_t)start, g->alt_off[start], -1};
        color[start] = 1;
        while (n > 0 && st == QVL_OK) {
            int32_t s = next_corner(g, &stack[n - 1]);
            if (s < 0) {
                color[stack[--n].rule] = 2;
            } else if (color[s] == 1) {
                st = qvl_fail(err, QVL_E_PARSE, "grammar: rule '%s' can reach itself without "
                              "consuming input (left recursion)", g->names[s]);
            } else if (color[s] == 0) {
                color[s] = 1;
                stack[n++] = (corner_it){s, g->alt_off[s], -1};
            }
        }
    }
    free(color);
    free(stack);
    return st;
}

qvl_status qvl_g_check(qvl_grammar *g, qvl_error *err) {
    compute_min_len(g);
    uint8_t *seen = calloc(g->n_rules, 1);
    if (!seen || !mark_reachable(g, seen)) {
        free(seen);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    }
    qvl_status st = QVL_OK;
    if (g->min_len[g->root] == INF_LEN)
        st = qvl_fail(err, QVL_E_PARSE, "grammar: root has no finite derivation (the output "
                      "could never end)");
    for (size_t r = 0; st == QVL_OK && r < g->n_rules; r++)
        if (seen[r] && g->min_len[r] == INF_LEN)
            st = qvl_fail(err, QVL_E_PARSE, "grammar: rule '%s' has no finite derivation (an "
                          "output that enters it could never end)", g->names[r]);
    free(seen);
    if (st == QVL_OK) st = check_left_recursion(g, err);
    return st;
}
