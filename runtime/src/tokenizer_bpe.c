/* Byte-level BPE of one pre-tokenized piece.
 *
 * The piece starts as one symbol per byte (the byte's single-character token) in a linked list.
 * A min-heap holds candidate merges ordered by (rank, position); stale entries are skipped when
 * popped by checking the pair again. That applies merges in the same order as `tokenizers`
 * (lowest rank first, leftmost on ties) in O(n log n), so a megabyte-long piece is fine.
 * Results of short pieces are cached because text repeats its words. */
#include <stdlib.h>
#include <string.h>

#include "qvl/checked.h"
#include "tokenizer_internal.h"

/* Pieces longer than this are not cached; the cache is emptied when it holds this many. */
#define CACHE_MAX_PIECE 128
#define CACHE_MAX_ENTRIES 65536
#define CACHE_MAX_IDS ((size_t)1 << 20)

typedef struct tok_symbol {
    int32_t id; /* -1 once merged into its left neighbour */
    int32_t prev, next;
} tok_symbol;

typedef struct tok_heap_item {
    uint32_t rank;
    int32_t pos; /* the left symbol of the pair */
} tok_heap_item;

static inline bool heap_less(tok_heap_item a, tok_heap_item b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static bool heap_push(qvl_tokenizer *tok, size_t *n, tok_heap_item item) {
    if (*n == tok->heap_cap) {
        size_t cap = tok->heap_cap ? tok->heap_cap * 2 : 256, bytes;
        if (!qvl_mul_size(cap, sizeof(tok_heap_item), &bytes)) return false;
        tok_heap_item *p = realloc(tok->heap, bytes);
        if (!p) return false;
        tok->heap = p;
        tok->heap_cap = cap;
    }
    tok_heap_item *h = tok->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(item, h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = item;
    return true;
}

static tok_heap_item heap_pop(tok_heap_item *h, size_t *n) {
    tok_heap_item top = h[0], last = h[--(*n)];
    size_t i = 0, size = *n;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= size) break;
        if (child + 1 < size && heap_less(h[child + 1], h[child])) child++;
        if (!heap_less(h[child], last)) break;
        h[i] = h[child];
        i = child;
    }
    if (size) h[i] = last;
    return top;
}

/* Pushes the merge of symbol pos with its right neighbour, if the pair has one. */
static bool push_pair(qvl_tokenizer *tok, size_t *n, int32_t pos) {
    const tok_symbol *s = &tok->syms[pos];
    if (s->next < 0) return true;
    const tok_pairmap_slot *m = tok_pairmap_get(&tok->merges, s->id, tok->syms[s->next].id);
    if (!m) return true;
    return heap_push(tok, n, (tok_heap_item){m->rank, pos});
}

bool qvl_tok_push_byte(qvl_tokenizer *tok, uint8_t byte, tok_ids *out) {
    int32_t id = tok->byte_token[byte];
    if (id >= 0) return qvl_tok_ids_push(out, id);
    if (tok->unk_id < 0) return true; /* like `tokenizers` without unk_token: dropped */
    if (tok->fuse_unk && out->len && out->data[out->len - 1] == tok->unk_id) return true;
    return qvl_tok_ids_push(out, tok->unk_id);
}

static bool cache_lookup(qvl_tokenizer *tok, const char *piece, size_t len, tok_ids *out) {
    int32_t off = qvl_tok_strmap_get(&tok->cache, piece, len);
    if (off < 0) return false;
    const int32_t *p = tok->cache_ids.data + off;
    int32_t count = p[0];
    if (!qvl_tok_ids_reserve(out, (size_t)count)) return false; /* caller recomputes and fails */
    memcpy(out->data + out->len, p + 1, (size_t)count * sizeof *p);
    out->len += (size_t)count;
    return true;
}

/* Best effort: a full or failing cache only costs speed. */
static void cache_store(qvl_tokenizer *tok, const char *piece, size_t len, const int32_t *ids,
                        size_t count) {
    if (tok->cache.count >= CACHE_MAX_ENTRIES || tok->cache_ids.len + count + 1 > CACHE_MAX_IDS) {
        qvl_tok_strmap_clear(&tok->cache);
        tok->cache_ids.len = 0;
    }
    size_t off = tok->cache_ids.len;
    if (!qvl_tok_ids_reserve(&tok->cache_ids, count + 1)) return;
    tok->cache_ids.data[off] = (int32_t)count;
    memcpy(tok->cache_ids.data + off + 1, ids, count * sizeof *ids);
    if (qvl_tok_strmap_put(&tok->cache, piece, len, (int32_t)off, NULL))
        tok->cache_ids.len += count + 1;
}

/* With ignore_merges, a piece that is itself a vocab token is taken whole. */
static int32_t whole_piece_token(qvl_tokenizer *tok, const char *piece, size_t len) {
    tok->scratch.len = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)piece[i];
        if (!qvl_tok_bytes_append(&tok->scratch, tok->byte_char[b], tok->byte_char_len[b]))
            return -1;
    }
    return qvl_tok_strmap_get(&tok->vocab, tok->scratch.data, tok->scratch.len);
}

qvl_status qvl_tok_bpe_piece(qvl_tokenizer *tok, const char *piece, size_t len, tok_ids *out,
                         qvl_error *err) {
    if (len == 0) return QVL_OK;
    bool cacheable = len <= CACHE_MAX_PIECE;
    if (cacheable && cache_lookup(tok, piece, len, out)) return QVL_OK;
    size_t first = out->len;
    if (tok->ignore_merges) {
        int32_t id = whole_piece_token(tok, piece, len);
        if (id >= 0) {
            if (!qvl_tok_ids_push(out, id)) goto oom;
            return QVL_OK;
        }
    }

    if (len > INT32_MAX / 2)
        return qvl_fail(err, QVL_E_LIMIT, "tokenizer: piece of %zu bytes is too long", len);
    if (len > tok->syms_cap) {
        size_t bytes;
        if (!qvl_mul_size(len, sizeof(tok_symbol), &bytes)) goto oom;
        tok_symbol *p = realloc(tok->syms, bytes);
        if (!p) goto oom;
        tok->syms = p;
        tok->syms_cap = len;
    }
    tok_symbol *syms = tok->syms;
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->byte_token[(uint8_t)piece[i]];
        if (id < 0) {
            if (tok->unk_id < 0) continue;
            if (tok->fuse_unk && n > 0 && syms[n - 1].id == tok->unk_id) continue;
            id = tok->unk_id;
        }
        syms[n] = (tok_symbol){id, n - 1, n + 1};
        n++;
    }
    if (n == 0) return QVL_OK;
    syms[n - 1].next = -1;

    size_t heap_n = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        if (!push_pair(tok, &heap_n, i)) goto oom;
    while (heap_n) {
        tok_heap_item top = heap_pop(tok->heap, &heap_n);
        tok_symbol *s = &syms[top.pos];
        if (s->id < 0 || s->next < 0) continue;
        const tok_pairmap_slot *m = tok_pairmap_get(&tok->merges, s->id, syms[s->next].id);
        if (!m || m->rank != top.rank) continue; /* stale: a neighbour changed since */
        tok_symbol *right = &syms[s->next];
        s->id = m->merged;
        right->id = -1;
        s->next = right->next;
        if (s->next >= 0) syms[s->next].prev = top.pos;
        if (s->prev >= 0 && !push_pair(tok, &heap_n, s->prev)) goto oom;
        if (!push_pair(tok, &heap_n, top.pos)) goto oom;
    }

    /* symbols only ever merge into their left neighbour, so symbol 0 heads the list */
    for (int32_t i = 0; i >= 0; i = syms[i].next)
        if (!qvl_tok_ids_push(out, syms[i].id)) goto oom;
    if (cacheable) cache_store(tok, piece, len, out->data + first, out->len - first);
    return QVL_OK;
oom:
    return qvl_fail(err, QVL_E_NOMEM, "tokenizer: out of memory encoding a piece of %zu bytes",
                    len);
}

void qvl_tok_bpe_free_scratch(qvl_tokenizer *tok) {
    free(tok->syms);
    free(tok->heap);
    free(tok->scratch.data);
    free(tok->cache_ids.data);
    qvl_tok_strmap_free(&tok->cache);
    tok->syms = NULL;
    tok->heap = NULL;
    tok->syms_cap = tok->heap_cap = 0;
    memset(&tok->scratch, 0, sizeof tok->scratch);
    memset(&tok->cache_ids, 0, sizeof tok->cache_ids);
}
