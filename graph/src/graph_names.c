/* The index of unique names: inputs, weights and outputs share one namespace (node names are
 * labels and need not be unique). An open-addressing hash table of tensor ids and output
 * numbers keeps building linear in the number of tensors: every leaf and output name is checked
 * against the others when it is added. Slots hold no string: an entry's name is read from the
 * graph record it points at, so renames only move the entry. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#define EMPTY (-1)
#define GONE (-2) /* a removed entry: probing walks past it */

static uint64_t hash_name(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static const char *entry_name(const qvl_graph *g, const qvl_gi_name_slot *e) {
    return e->out >= 0 ? g->out[e->out].name : g->t[e->tid].name;
}

static bool grow(qvl_graph *g) {
    size_t cap = g->names_cap ? g->names_cap * 2 : 256;
    qvl_gi_name_slot *s = malloc(cap * sizeof *s);
    if (!s) return false;
    for (size_t i = 0; i < cap; i++) s[i].tid = EMPTY;
    for (size_t i = 0; i < g->names_cap; i++) {
        qvl_gi_name_slot e = g->names[i];
        if (e.tid < 0) continue;
        size_t j = (size_t)e.hash & (cap - 1);
        while (s[j].tid != EMPTY) j = (j + 1) & (cap - 1);
        s[j] = e;
    }
    free(g->names);
    g->names = s;
    g->names_cap = cap;
    g->names_used = 0;
    for (size_t i = 0; i < cap; i++) g->names_used += s[i].tid >= 0;
    return true;
}

bool qvl_gi_names_add(qvl_graph *g, qvl_tid tid, int32_t out) {
    /* at most half full, tombstones included, so probes stay short and always end */
    if ((g->names_used + 1) * 2 > g->names_cap && !grow(g)) return false;
    qvl_gi_name_slot e = {0, tid, out};
    e.hash = hash_name(entry_name(g, &e));
    size_t j = (size_t)e.hash & (g->names_cap - 1);
    while (g->names[j].tid >= 0) j = (j + 1) & (g->names_cap - 1);
    if (g->names[j].tid == EMPTY) g->names_used++;
    g->names[j] = e;
    return true;
}

/* The slot of the entry for (tid, out) named name, or NULL. */
static qvl_gi_name_slot *slot_of(const qvl_graph *g, const char *name, qvl_tid tid, int32_t out) {
    if (!g->names_cap) return NULL;
    uint64_t h = hash_name(name);
    for (size_t j = (size_t)h & (g->names_cap - 1); g->names[j].tid != EMPTY;
         j = (j + 1) & (g->names_cap - 1)) {
        qvl_gi_name_slot *e = &g->names[j];
        if (e->tid == tid && e->out == out && e->hash == h) return e;
    }
    return NULL;
}

void qvl_gi_names_remove(qvl_graph *g, const char *name, qvl_tid tid, int32_t out) {
    qvl_gi_name_slot *e = slot_of(g, name, tid, out);
    if (e) e->tid = GONE; /* still counted in names_used until the next grow */
}

/* Calls visit on every entry named name until it returns true; returns that entry or NULL. */
static const qvl_gi_name_slot *each_named(const qvl_graph *g, const char *name,
                                          bool (*visit)(const qvl_graph *, const qvl_gi_name_slot *,
                                                        qvl_tid),
                                          qvl_tid arg) {
    if (!g->names_cap) return NULL;
    uint64_t h = hash_name(name);
    for (size_t j = (size_t)h & (g->names_cap - 1); g->names[j].tid != EMPTY;
         j = (j + 1) & (g->names_cap - 1)) {
        const qvl_gi_name_slot *e = &g->names[j];
        if (e->tid >= 0 && e->hash == h && strcmp(entry_name(g, e), name) == 0 &&
            visit(g, e, arg))
            return e;
    }
    return NULL;
}

static bool other_than(const qvl_graph *g, const qvl_gi_name_slot *e, qvl_tid self) {
    (void)g;
    return e->tid != self; /* an output's tid is the tensor it marks */
}

bool qvl_gi_names_taken(const qvl_graph *g, const char *name, qvl_tid self) {
    return each_named(g, name, other_than, self) != NULL;
}

static bool is_output(const qvl_graph *g, const qvl_gi_name_slot *e, qvl_tid unused) {
    (void)g;
    (void)unused;
    return e->out >= 0;
}

static bool any(const qvl_graph *g, const qvl_gi_name_slot *e, qvl_tid unused) {
    (void)g;
    (void)e;
    (void)unused;
    return true;
}

qvl_tid qvl_gi_names_find(const qvl_graph *g, const char *name) {
    /* outputs first: an output may carry the name of another tensor than the leaf's */
    const qvl_gi_name_slot *e = each_named(g, name, is_output, -1);
    if (!e) e = each_named(g, name, any, -1);
    return e ? e->tid : -1;
}
