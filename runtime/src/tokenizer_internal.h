/* Private pieces of the tokenizer shared by the tokenizer_*.c files. */
#ifndef QVL_TOKENIZER_INTERNAL_H
#define QVL_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "qvl/status.h"
#include "qvl/tokenizer.h"

/* ---- growable buffers (tokenizer_containers.c) ---- */

typedef struct tok_bytes {
    char *data;
    size_t len, cap;
} tok_bytes;

typedef struct tok_ids {
    int32_t *data;
    size_t len, cap;
} tok_ids;

bool qvl_tok_bytes_append(tok_bytes *b, const void *src, size_t n);
bool qvl_tok_ids_push(tok_ids *v, int32_t id);
bool qvl_tok_ids_reserve(tok_ids *v, size_t extra);

/* ---- hash maps (tokenizer_containers.c) ---- */

/* Byte-string keys (copied into the map's own pool) to int32 values. */
typedef struct tok_strmap_slot {
    uint32_t hash;
    uint32_t key_len;
    uint32_t key_off; /* offset in pool; UINT32_MAX marks an empty slot */
    int32_t value;
} tok_strmap_slot;

typedef struct tok_strmap {
    tok_strmap_slot *slots;
    size_t mask;  /* slot count - 1 (power of two) */
    size_t count;
    tok_bytes pool;
} tok_strmap;

bool qvl_tok_strmap_init(tok_strmap *m, size_t expected);
void qvl_tok_strmap_free(tok_strmap *m);
void qvl_tok_strmap_clear(tok_strmap *m);
/* Returns the value or -1. */
int32_t qvl_tok_strmap_get(const tok_strmap *m, const char *key, size_t len);
/* Inserts or overwrites. *previous (optional) gets the old value or -1. False on OOM. */
bool qvl_tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t value,
                        int32_t *previous);

/* (left id, right id) -> (rank, merged id) for BPE merges. */
typedef struct tok_pairmap_slot {
    uint64_t key; /* UINT64_MAX marks an empty slot */
    uint32_t rank;
    int32_t merged;
} tok_pairmap_slot;

typedef struct tok_pairmap {
    tok_pairmap_slot *slots;
    size_t mask;
    size_t count;
} tok_pairmap;

bool qvl_tok_pairmap_init(tok_pairmap *m, size_t expected);
void qvl_tok_pairmap_free(tok_pairmap *m);
/* Inserts or overwrites (a later merge of the same pair wins, as in `tokenizers`). */
bool qvl_tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, uint32_t rank,
                         int32_t merged);

static inline uint64_t tok_pair_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}
static inline uint32_t tok_pair_hash(uint64_t key) {
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ull;
    key ^= key >> 29;
    return (uint32_t)(key >> 32);
}
/* Returns the slot or NULL when the pair has no merge. Inline: it is the BPE inner loop. */
static inline const tok_pairmap_slot *tok_pairmap_get(const tok_pairmap *m, int32_t left,
                                                      int32_t right) {
    uint64_t key = tok_pair_key(left, right);
    size_t i = tok_pair_hash(key) & m->mask;
    for (;;) {
        const tok_pairmap_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}

uint32_t qvl_tok_hash_bytes(const char *p, size_t n);

/* ---- UTF-8 and the GPT-2 byte map (tokenizer_utf8.c) ---- */

/* Length of the well-formed UTF-8 character at p (1-4), or 0 when the bytes there are
 * ill-formed. *bad_len (optional) gets the length of the maximal ill-formed subpart (>= 1). */
size_t qvl_tok_utf8_char_len(const unsigned char *p, size_t n, size_t *bad_len);
/* Decodes a well-formed character (caller checked it with qvl_tok_utf8_char_len). */
uint32_t qvl_tok_utf8_decode(const unsigned char *p, size_t len);
size_t qvl_tok_utf8_encode(uint32_t cp, char out[4]);
/* Appends src to out with ill-formed sequences replaced by U+FFFD. */
bool qvl_tok_utf8_sanitize_append(tok_bytes *out, const char *src, size_t n);
/* Length of the Unicode White_Space character at p, or 0. */
size_t qvl_tok_whitespace_len_at(const unsigned char *p, size_t n);
/* Length of a Unicode White_Space character ending right before p[n], or 0. */
size_t qvl_tok_whitespace_len_before(const unsigned char *p, size_t n);

/* GPT-2 bytes_to_unicode: byte -> code point, and the inverse (-1 for other code points). */
uint32_t qvl_tok_byte_to_cp(uint8_t b);
int qvl_tok_cp_to_byte(uint32_t cp);

/* ---- added tokens (tokenizer_added.c) ---- */

/* A trie of the added tokens' contents written backwards, with Aho-Corasick failure links: one
 * pass over a text from its end finds, at every position, the longest token starting there. */
typedef struct tok_trie_node {
    uint32_t first_edge; /* UINT32_MAX when the node has no children */
    uint32_t fail;       /* the node of the longest proper suffix of this node's string */
    int32_t token;       /* index into added[] of the token whose reversal ends here, or -1 */
    int32_t best;        /* the longest token ending here or along the fail chain, or -1 */
} tok_trie_node;

typedef struct tok_trie_edge {
    uint32_t child;
    uint32_t next; /* next sibling edge, UINT32_MAX at the end */
    uint8_t byte;
} tok_trie_edge;

/* A leftmost-longest matcher over a set of added tokens. */
typedef struct tok_matcher {
    tok_trie_node *nodes;
    size_t n_nodes, cap_nodes;
    tok_trie_edge *edges;
    size_t n_edges, cap_edges;
    bool empty;
} tok_matcher;

/* The positions of one text where some token starts, ascending, each with its longest token;
 * `next` is where the following search resumes. */
typedef struct tok_starts {
    size_t *pos;
    int32_t *token;
    size_t n, cap, next;
} tok_starts;

typedef struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    bool special, lstrip, rstrip, normalized;
} tok_added;

typedef struct tok_match {
    size_t start, end; /* span consumed, whitespace taken by lstrip/rstrip included */
    int32_t id;
} tok_match;

/* Builds the matcher over the added tokens whose `normalized` flag equals normalized. */
qvl_status qvl_tok_matcher_build(tok_matcher *m, const tok_added *added, size_t n_added,
                             bool normalized, qvl_error *err);
void qvl_tok_matcher_free(tok_matcher *m);
/* Every position of text[0, len) where a token starts, with the longest one: time linear in len
 * (plus the matches), whatever the tokens' lengths. */
qvl_status qvl_tok_matcher_scan(const tok_matcher *m, const char *text, size_t len,
                                tok_starts *out, qvl_error *err);
/* The leftmost match at or after `from` (then the longest), from a scan of the same text; its
 * span includes what lstrip/rstrip take (not reaching before `floor`). False when none. */
bool qvl_tok_starts_next(tok_starts *s, const tok_added *added, const char *text, size_t len,
                         size_t from, size_t floor, tok_match *out);
void qvl_tok_starts_free(tok_starts *s);

/* ---- the tokenizer ---- */

enum {
    TOK_PRESENT = 1,
    TOK_ADDED = 2,
    TOK_SPECIAL = 4
};

typedef struct tok_entry {
    uint32_t off; /* raw bytes in qvl_tokenizer.piece_bytes */
    uint32_t len;
    uint8_t flags;
} tok_entry;

#define TOK_MAX_SPLIT_STAGES 4

/* tokenizer.json nests about 6 deep (root, pre_tokenizer, pretokenizers, one, pattern); more than
 * this is refused before cJSON recurses into it. */
#define QVL_TOKENIZER_MAX_JSON_DEPTH 32

/* The work one pre-tokenizer match may cost, in PCRE2 match-limit steps: QVL_TOK_REGEX_BASE_STEPS
 * plus QVL_TOK_REGEX_STEPS_PER_BYTE for every byte it moves on (the gap searched before the match
 * and the match itself), so a whole text costs at most BASE per match plus PER_BYTE per byte
 * (tokenizer_pretok.c). Then PCRE2's own limits of one attempt: nested backtracking points and
 * KiB of backtracking memory (pcre2_set_depth_limit, pcre2_set_heap_limit). */
#ifndef QVL_TOK_REGEX_BASE_STEPS
#define QVL_TOK_REGEX_BASE_STEPS 2000
#endif
#ifndef QVL_TOK_REGEX_STEPS_PER_BYTE
#define QVL_TOK_REGEX_STEPS_PER_BYTE 16
#endif
#ifndef QVL_TOK_REGEX_DEPTH_LIMIT
#define QVL_TOK_REGEX_DEPTH_LIMIT 10000
#endif
#ifndef QVL_TOK_REGEX_HEAP_LIMIT_KIB
#define QVL_TOK_REGEX_HEAP_LIMIT_KIB 65536
#endif

typedef struct tok_split_stage {
    pcre2_code *code;
    bool jit;
} tok_split_stage;

struct qvl_tokenizer {
    /* model */
    tok_strmap vocab;         /* byte-level token string -> id */
    tok_pairmap merges;       /* (left, right) -> (rank, merged) */
    int32_t byte_token[256];  /* single-byte token of each byte, -1 when the vocab lacks it */
    char byte_char[256][3];   /* UTF-8 of each byte's byte-level character */
    uint8_t byte_char_len[256];
    int32_t unk_id;           /* -1 when the model has no unk_token */
    bool fuse_unk;
    bool ignore_merges;

    /* per-id table */
    tok_entry *entries;
    int32_t n_entries;        /* max id + 1 */
    tok_bytes piece_bytes;

    /* added tokens */
    tok_added *added;
    size_t n_added;
    tok_matcher raw_matcher;  /* normalized == false: matched on the raw input */
    tok_matcher norm_matcher; /* normalized == true: matched after normalization */

    /* normalizer and pre-tokenizer */
    bool nfc;
    tok_split_stage stages[TOK_MAX_SPLIT_STAGES];
    size_t n_stages;
    pcre2_match_data *match_data;
    pcre2_match_context *match_ctx;
    pcre2_jit_stack *jit_stack;

    /* encode scratch and cache (why encode is not thread-safe) */
    tok_strmap cache;          /* piece bytes -> offset in cache_ids ([count, ids...]) */
    tok_ids cache_ids;
    struct tok_symbol *syms;
    size_t syms_cap;
    struct tok_heap_item *heap;
    size_t heap_cap;
    tok_bytes scratch;
};

/* tokenizer_json.c: typed access to cJSON values with one-line errors naming the key. */
struct cJSON;
/* An integral token id in [0, QVL_TOKENIZER_MAX_ID). */
qvl_status qvl_tok_json_id(const struct cJSON *v, const char *name, const char *what, int32_t *out,
                       qvl_error *err);
/* obj[key] as a bool; absent or null gives def. */
qvl_status qvl_tok_json_bool(const struct cJSON *obj, const char *key, bool def, bool *out,
                         const char *name, const char *what, qvl_error *err);
/* obj[key] as a string; absent or null gives NULL. */
qvl_status qvl_tok_json_opt_string(const struct cJSON *obj, const char *key, const char **out,
                               const char *name, const char *what, qvl_error *err);
/* A short rendering of a JSON value for error messages. */
const char *qvl_tok_json_describe(const struct cJSON *v, char *buf, size_t size);

/* tokenizer_config.c: normalizer / pre_tokenizer / decoder sections. */
qvl_status qvl_tok_parse_normalizer(qvl_tokenizer *tok, const struct cJSON *node, const char *name,
                                qvl_error *err);
qvl_status qvl_tok_parse_pre_tokenizer(qvl_tokenizer *tok, const struct cJSON *node,
                                   const char *name, qvl_error *err);
qvl_status qvl_tok_parse_decoder(const struct cJSON *node, const char *name, qvl_error *err);
void qvl_tok_free_pre_tokenizer(qvl_tokenizer *tok);

/* tokenizer_model.c: the BPE model section; *max_id is raised to the largest vocab id. */
qvl_status qvl_tok_parse_model(qvl_tokenizer *tok, const struct cJSON *model, const char *name,
                           int32_t *max_id, qvl_error *err);

/* tokenizer_added.c: the added_tokens array. */
qvl_status qvl_tok_parse_added_tokens(qvl_tokenizer *tok, const struct cJSON *node,
                                  const char *name, qvl_error *err);

/* tokenizer_pretok.c: calls emit for every pre-tokenized piece of already-normalized text. */
typedef qvl_status (*tok_piece_fn)(qvl_tokenizer *tok, const char *piece, size_t len,
                                   tok_ids *out, qvl_error *err);
qvl_status qvl_tok_pretokenize(qvl_tokenizer *tok, const char *text, size_t len, tok_piece_fn emit,
                           tok_ids *out, qvl_error *err);
/* NFC of valid UTF-8 text; *norm is malloc'd (free()), or NULL with *norm_len 0 when the
 * text is unchanged (ASCII fast path). */
qvl_status qvl_tok_nfc(const char *text, size_t len, char **norm, size_t *norm_len, qvl_error *err);

/* tokenizer_bpe.c: BPE of one piece, ids appended to out. */
qvl_status qvl_tok_bpe_piece(qvl_tokenizer *tok, const char *piece, size_t len, tok_ids *out,
                         qvl_error *err);
void qvl_tok_bpe_free_scratch(qvl_tokenizer *tok);

/* Bytes with no token of their own go through unk (or vanish when there is none). */
bool qvl_tok_push_byte(qvl_tokenizer *tok, uint8_t byte, tok_ids *out);

#endif
