/* Growable buffers and the open-addressing hash maps the tokenizer is built on. */
#include <stdlib.h>
#include <string.h>

#include "qvl/checked.h"
#include "tokenizer_internal.h"

static bool grow(void **data, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) {
        if (!qvl_mul_size(cap2, 2, &cap2)) return false;
    }
    size_t bytes;
    if (!qvl_mul_size(cap2, elem, &bytes)) return false;
    void *p = realloc(*data, bytes);
    if (!p) return false;
    *data = p;
    *cap = cap2;
    return true;
}

bool qvl_tok_bytes_append(tok_bytes *b, const void *src, size_t n) {
    size_t need;
    /* one spare byte so the data can always be NUL-terminated */
    if (!qvl_add_size(b->len, n, &need) || !qvl_add_size(need, 1, &need)) return false;
    if (!grow((void **)&b->data, &b->cap, need, 1)) return false;
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool qvl_tok_ids_reserve(tok_ids *v, size_t extra) {
    size_t need;
    if (!qvl_add_size(v->len, extra, &need)) return false;
    return grow((void **)&v->data, &v->cap, need, sizeof *v->data);
}

bool qvl_tok_ids_push(tok_ids *v, int32_t id) {
    if (v->len == v->cap && !qvl_tok_ids_reserve(v, 1)) return false;
    v->data[v->len++] = id;
    return true;
}

/* 32-bit hash of a byte string: 8 bytes at a time, multiply-xorshift mixing. */
uint32_t qvl_tok_hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x243f6a8885a308d3ull ^ (n * 0x9e3779b97f4a7c15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

static size_t table_size(size_t expected) {
    size_t n = 16;
    while (n < expected * 2 && n < ((size_t)1 << 40)) n *= 2;
    return n;
}

/* ---- string map ---- */

static tok_strmap_slot *strmap_alloc_slots(size_t n) {
    tok_strmap_slot *s = malloc(n * sizeof *s);
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) s[i].key_off = UINT32_MAX;
    return s;
}

bool qvl_tok_strmap_init(tok_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    size_t n = table_size(expected);
    m->slots = strmap_alloc_slots(n);
    if (!m->slots) return false;
    m->mask = n - 1;
    return true;
}

void qvl_tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    free(m->pool.data);
    memset(m, 0, sizeof *m);
}

void qvl_tok_strmap_clear(tok_strmap *m) {
    for (size_t i = 0; i <= m->mask; i++) m->slots[i].key_off = UINT32_MAX;
    m->count = 0;
    m->pool.len = 0;
}

static tok_strmap_slot *strmap_find(const tok_strmap *m, const char *key, size_t len,
                                    uint32_t hash) {
    size_t i = hash & m->mask;
    for (;;) {
        tok_strmap_slot *s = &m->slots[i];
        if (s->key_off == UINT32_MAX) return s;
        if (s->hash == hash && s->key_len == len &&
            memcmp(m->pool.data + s->key_off, key, len) == 0)
            return s;
        i = (i + 1) & m->mask;
    }
}

int32_t qvl_tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (len > UINT32_MAX) return -1;
    const tok_strmap_slot *s = strmap_find(m, key, len, qvl_tok_hash_bytes(key, len));
    return s->key_off == UINT32_MAX ? -1 : s->value;
}

static bool strmap_rehash(tok_strmap *m) {
    size_t n = (m->mask + 1) * 2;
    tok_strmap_slot *slots = strmap_alloc_slots(n);
    if (!slots) return false;
    for (size_t i = 0; i <= m->mask; i++) {
        tok_strmap_slot *s = &m->slots[i];
        if (s->key_off == UINT32_MAX) continue;
        size_t j = s->hash & (n - 1);
        while (slots[j].key_off != UINT32_MAX) j = (j + 1) & (n - 1);
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = n - 1;
    return true;
}

bool qvl_tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t value,
                        int32_t *previous) {
    if (previous) *previous = -1;
    if (len > UINT32_MAX || m->pool.len + len >= UINT32_MAX) return false;
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && !strmap_rehash(m)) return false;
    uint32_t hash = qvl_tok_hash_bytes(key, len);
    tok_strmap_slot *s = strmap_find(m, key, len, hash);
    if (s->key_off != UINT32_MAX) {
        if (previous) *previous = s->value;
        s->value = value;
        return true;
    }
    uint32_t off = (uint32_t)m->pool.len;
    if (!qvl_tok_bytes_append(&m->pool, key, len)) return false;
    s->hash = hash;
    s->key_len = (uint32_t)len;
    s->key_off = off;
    s->value = value;
    m->count++;
    return true;
}

/* ---- pair map ---- */

bool qvl_tok_pairmap_init(tok_pairmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    size_t n = table_size(expected);
    m->slots = malloc(n * sizeof *m->slots);
    if (!m->slots) return false;
    for (size_t i = 0; i < n; i++) m->slots[i].key = UINT64_MAX;
    m->mask = n - 1;
    return true;
}

void qvl_tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static bool pairmap_rehash(tok_pairmap *m) {
    size_t n = (m->mask + 1) * 2;
    tok_pairmap_slot *slots = malloc(n * sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < n; i++) slots[i].key = UINT64_MAX;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->slots[i].key == UINT64_MAX) continue;
        size_t j = tok_pair_hash(m->slots[i].key) & (n - 1);
        while (slots[j].key != UINT64_MAX) j = (j + 1) & (n - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->mask = n - 1;
    return true;
}

bool qvl_tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, uint32_t rank,
                         int32_t merged) {
    if ((m->count + 1) * 2 > (m->mask + 1) && !pairmap_rehash(m)) return false;
    uint64_t key = tok_pair_key(left, right);
    size_t i = tok_pair_hash(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & m->mask;
    if (m->slots[i].key == UINT64_MAX) m->count++;
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].merged = merged;
    return true;
}
