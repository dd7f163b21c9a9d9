/* The compiled grammar shared by the parser, the checks, the matcher and the token walk.
 *
 * Every rule is a list of alternatives; every alternative is a run of elements in one flat
 * array ended by a GE_END element. A position (index into elems) names "what comes next".
 * Repetitions and groups are already rewritten into plain rules by the parser, so only three
 * kinds of element are left: a character test, a rule reference and the end of an
 * alternative. */
#ifndef QVL_GRAMMAR_INTERNAL_H
#define QVL_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/grammar.h"

enum {
    GE_END = 0,  /* end of an alternative */
    GE_CP = 1,   /* v: one code point */
    GE_CLASS = 2, /* v: index into classes */
    GE_ANY = 3,  /* any code point */
    GE_RULE = 4, /* v: rule index */
};

typedef struct g_elem {
    int32_t type, v;
} g_elem;

/* A class is a sorted run of disjoint, non-adjacent inclusive ranges (negated classes are
 * complemented at parse time, so matching never needs a negation flag). */
typedef struct g_class {
    uint32_t first, count; /* into ranges, pairs (lo, hi) */
} g_class;

struct qvl_grammar {
    g_elem *elems;
    size_t n_elems;
    uint32_t *alt_off;   /* rule r's alternatives: alt_start[alt_off[r] .. alt_off[r + 1]) */
    int32_t *alt_start;  /* element index where each alternative begins */
    size_t n_rules;
    int32_t root;
    g_class *classes;
    size_t n_classes;
    uint32_t *ranges;    /* 2 per range */
    char **names;        /* per rule, for messages */
    int64_t *min_len;    /* per rule: fewest code points of a derivation (for generators) */
};

/* Does element e match code point cp / some code point in [lo, hi]? (e is a character test.) */
bool qvl_g_elem_matches(const qvl_grammar *g, const g_elem *e, uint32_t cp);
bool qvl_g_elem_overlaps(const qvl_grammar *g, const g_elem *e, uint32_t lo, uint32_t hi);
/* Does element e match every code point in [lo, hi]? */
bool qvl_g_elem_covers(const qvl_grammar *g, const g_elem *e, uint32_t lo, uint32_t hi);

/* grammar_check.c: undefined rules are caught by the parser; this refuses a grammar without
 * a finite derivation of root and one with left recursion, and fills min_len. */
qvl_status qvl_g_check(qvl_grammar *g, qvl_error *err);

/* ---- matcher internals (grammar_match.c), used by the token walk (grammar_vocab.c) ---- */

/* One frame of a parse stack: continue at pos, then return to parent (-1: the bottom). hash
 * covers the whole chain, so equal chains compare quickly. */
typedef struct g_frame {
    int32_t pos, parent;
    uint32_t hash;
} g_frame;

/* A matcher state: the tops of its stacks (frame indices, in tops[off .. off + n)), whether
 * the output so far is a complete derivation, and a partly received UTF-8 character (need >
 * 0 bytes still to come; acc holds the bits so far, len the character's full length). */
typedef struct g_state {
    size_t off;
    int32_t n;
    bool accept;
    uint8_t need, len;
    uint32_t acc;
} g_state;

/* Growable arenas. A token walk marks their sizes and rewinds to them; the committed state
 * is compacted now and then so they do not grow with the length of the output. */
typedef struct g_arena {
    g_frame *frames;
    size_t n_frames, cap_frames;
    int32_t *tops;
    size_t n_tops, cap_tops;
} g_arena;

struct qvl_grammar_matcher {
    const qvl_grammar *g;
    g_arena a;
    g_state cur;
    size_t live_frames; /* frames reachable after the last compaction */
    size_t bulk;        /* tokens the last walk allowed by whole subtrees (grammar_vocab.c) */
};

/* from -> *to by one byte: 1 accepted, 0 rejected (to undefined), -1 error (err set). New
 * frames and tops go to the end of the arenas. */
int qvl_g_advance(const qvl_grammar *g, g_arena *a, const g_state *from, uint8_t byte,
                  g_state *to, qvl_error *err);
/* The UTF-8 decoding of one more byte after from (need, len, acc only): false for a byte no
 * well-formed text can hold there; else to's need, len and acc, and [*lo, *hi] the code points
 * the character can still be (the one, once need is 0). */
bool qvl_g_utf8_step(const g_state *from, uint8_t byte, g_state *to, uint32_t *lo, uint32_t *hi);
/* Whether x and y hold the same stacks (compared by content, in any order), the same accept
 * flag and the same partial character, if any. */
bool qvl_g_same_state(const g_arena *a, const g_state *x, const g_state *y);

#endif
