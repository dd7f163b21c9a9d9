/* GGUF reader: maps the file read-only and validates the header, the metadata and the tensor
 * infos against the file size before any pointer is handed out (qvl/gguf.h).
 *
 * Every read goes through a cursor that checks the bytes are there first; every count is
 * checked against the bytes left (each element needs at least its smallest encoding) and
 * against a cap before the records it implies are allocated, so memory stays proportional to
 * the file and bounded by the caps. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_internal.h"
#include "qvl/checked.h"
#include "qvl/mapped_files.h"

#define DEFAULT_ALIGNMENT 32u
#define MIN_KV_BYTES 14     /* key length u64 + a 1-byte key + type u32 + a 1-byte value */
#define MIN_TENSOR_BYTES 25 /* name length u64 + 1 byte + n_dims u32 + type u32 + offset u64 */

typedef struct cursor {
    qvl_gguf *g;
    size_t pos;
    qvl_error *err;
    const char *what; /* "header", or the key or tensor name (printable) being read */
    const char *kind; /* "key" or "tensor" when what names one; NULL for "header" */
} cursor;

/* Up to 120 bytes of a name from the file, control bytes as '?', so a message stays one line. */
static void printable(const char *s, size_t len, char *buf, size_t cap) {
    size_t n = len < cap - 4 ? len : cap - 4;
    if (n > 120) n = 120;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        buf[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    strcpy(buf + n, n < len ? "..." : "");
}

static qvl_status cfail(cursor *c, qvl_status s, const char *fmt, ...) QVL_PRINTF(3, 4);
static qvl_status cfail(cursor *c, qvl_status s, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->kind)
        return qvl_fail(c->err, s, "%s: %s '%s': %s", c->g->path, c->kind, c->what, what);
    return qvl_fail(c->err, s, "%s: header: %s", c->g->path, what);
}

static size_t left(const cursor *c) { return c->g->map_size - c->pos; }

static qvl_status need(cursor *c, uint64_t n, const char *field) {
    if (n <= left(c)) return QVL_OK;
    return cfail(c, QVL_E_PARSE, "%s (%llu bytes at byte %zu) runs past the end of the file "
                 "(%zu bytes)", field, (unsigned long long)n, c->pos, c->g->map_size);
}

static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static qvl_status rd(cursor *c, int bytes, const char *field, uint64_t *out) {
    qvl_status s = need(c, (uint64_t)bytes, field);
    if (s != QVL_OK) return s;
    *out = le(c->g->map + c->pos, bytes);
    c->pos += (size_t)bytes;
    return QVL_OK;
}

static qvl_status rd_str(cursor *c, const char *field, uint64_t max, qvl_gguf_str *out) {
    uint64_t len;
    qvl_status s = rd(c, 8, field, &len);
    if (s != QVL_OK) return s;
    if (len > max)
        return cfail(c, QVL_E_LIMIT, "%s of %llu bytes exceeds the limit of %llu", field,
                     (unsigned long long)len, (unsigned long long)max);
    if ((s = need(c, len, field)) != QVL_OK) return s;
    out->ptr = (const char *)c->g->map + c->pos;
    out->len = len;
    c->pos += (size_t)len;
    return QVL_OK;
}

/* Bytes of one scalar element; 0 for STRING, ARRAY and unknown types. */
static int scalar_bytes(uint32_t t) {
    switch (t) {
    case QVL_GGUF_U8: case QVL_GGUF_I8: case QVL_GGUF_BOOL: return 1;
    case QVL_GGUF_U16: case QVL_GGUF_I16: return 2;
    case QVL_GGUF_U32: case QVL_GGUF_I32: case QVL_GGUF_F32: return 4;
    case QVL_GGUF_U64: case QVL_GGUF_I64: case QVL_GGUF_F64: return 8;
    default: return 0;
    }
}

static qvl_status keep_block(cursor *c, void *p) {
    qvl_gguf *g = c->g;
    if (g->n_blocks == g->cap_blocks) {
        size_t cap = g->cap_blocks ? 2 * g->cap_blocks : 16;
        void **nb = realloc(g->blocks, cap * sizeof *nb);
        if (!nb) {
            free(p);
            return cfail(c, QVL_E_NOMEM, "out of memory");
        }
        g->blocks = nb;
        g->cap_blocks = cap;
    }
    g->blocks[g->n_blocks++] = p;
    return QVL_OK;
}

static qvl_status read_value(cursor *c, uint32_t type, int depth, qvl_gguf_value *v);

/* An array value: element type, count, elements. Scalars stay in the mapping; strings and
 * nested arrays get an index (one record each), counted against QVL_GGUF_MAX_INDEXED. */
static qvl_status read_array(cursor *c, int depth, qvl_gguf_value *v) {
    uint64_t et, count;
    qvl_status s;
    if ((s = rd(c, 4, "array element type", &et)) != QVL_OK) return s;
    if ((s = rd(c, 8, "array length", &count)) != QVL_OK) return s;
    if (et >= QVL_GGUF_TYPE_COUNT)
        return cfail(c, QVL_E_UNSUPPORTED, "array of unknown value type %llu", (unsigned long long)et);
    if (et == QVL_GGUF_ARRAY && depth + 1 >= QVL_GGUF_MAX_NESTING)
        return cfail(c, QVL_E_LIMIT, "arrays nest deeper than %d levels", QVL_GGUF_MAX_NESTING);
    int eb = scalar_bytes((uint32_t)et);
    /* each string element needs its 8-byte length, each array its 12-byte type and length */
    uint64_t min_each = eb ? (uint64_t)eb : et == QVL_GGUF_STRING ? 8 : 12;
    if (count > left(c) / min_each)
        return cfail(c, QVL_E_PARSE, "array of %llu %s elements at byte %zu cannot fit in the "
                     "%zu bytes left", (unsigned long long)count,
                     qvl_gguf_type_name((qvl_gguf_type)et), c->pos, left(c));
    v->v.arr.type = (qvl_gguf_type)et;
    v->v.arr.count = count;
    v->v.arr.raw = c->g->map + c->pos;
    if (eb) {
        if (et == QVL_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                if (c->g->map[c->pos + i] > 1)
                    return cfail(c, QVL_E_PARSE, "bool array element %llu is %u, not 0 or 1",
                                 (unsigned long long)i, c->g->map[c->pos + i]);
        c->pos += (size_t)(count * (uint64_t)eb);
        return QVL_OK;
    }
    if (count > QVL_GGUF_MAX_INDEXED - c->g->indexed)
        return cfail(c, QVL_E_LIMIT, "more than %llu string and array elements in the metadata",
                     (unsigned long long)QVL_GGUF_MAX_INDEXED);
    c->g->indexed += count;
    if (count == 0) return QVL_OK;
    if (et == QVL_GGUF_STRING) {
        qvl_gguf_str *strs = calloc((size_t)count, sizeof *strs);
        if (!strs || (s = keep_block(c, strs)) != QVL_OK)
            return strs ? s : cfail(c, QVL_E_NOMEM, "out of memory");
        v->v.arr.strs = strs;
        for (uint64_t i = 0; i < count; i++)
            if ((s = rd_str(c, "array string", UINT64_MAX, &strs[i])) != QVL_OK) return s;
        return QVL_OK;
    }
    qvl_gguf_value *items = calloc((size_t)count, sizeof *items);
    if (!items || (s = keep_block(c, items)) != QVL_OK)
        return items ? s : cfail(c, QVL_E_NOMEM, "out of memory");
    v->v.arr.items = items;
    for (uint64_t i = 0; i < count; i++)
        if ((s = read_value(c, QVL_GGUF_ARRAY, depth + 1, &items[i])) != QVL_OK) return s;
    return QVL_OK;
}

static qvl_status read_value(cursor *c, uint32_t type, int depth, qvl_gguf_value *v) {
    v->type = (qvl_gguf_type)type;
    if (type == QVL_GGUF_STRING) return rd_str(c, "string value", UINT64_MAX, &v->v.s);
    if (type == QVL_GGUF_ARRAY) return read_array(c, depth, v);
    int eb = scalar_bytes(type);
    if (!eb) return cfail(c, QVL_E_UNSUPPORTED, "unknown value type %u", type);
    uint64_t raw;
    qvl_status s = rd(c, eb, "value", &raw);
    if (s != QVL_OK) return s;
    switch (type) {
    case QVL_GGUF_I8: v->v.i = (int8_t)raw; break;
    case QVL_GGUF_I16: v->v.i = (int16_t)raw; break;
    case QVL_GGUF_I32: v->v.i = (int32_t)raw; break;
    case QVL_GGUF_I64: v->v.i = (int64_t)raw; break;
    case QVL_GGUF_F32: {
        uint32_t b32 = (uint32_t)raw;
        float f;
        memcpy(&f, &b32, sizeof f);
        v->v.f = f;
        break;
    }
    case QVL_GGUF_F64: memcpy(&v->v.f, &raw, sizeof v->v.f); break;
    case QVL_GGUF_BOOL:
        if (raw > 1) return cfail(c, QVL_E_PARSE, "bool value %u is not 0 or 1", (unsigned)raw);
        v->v.u = raw;
        break;
    default: v->v.u = raw; break;
    }
    return QVL_OK;
}

/* A key or tensor name: a NUL-terminated copy, refusing empty names and NUL bytes. */
static qvl_status read_name(cursor *c, const char *field, uint64_t max, char **out, char *pbuf,
                            size_t pcap) {
    qvl_gguf_str s;
    qvl_status st = rd_str(c, field, max, &s);
    if (st != QVL_OK) return st;
    if (s.len == 0) return cfail(c, QVL_E_PARSE, "empty %s at byte %zu", field, c->pos - 8);
    printable(s.ptr, (size_t)s.len, pbuf, pcap);
    if (memchr(s.ptr, '\0', (size_t)s.len))
        return cfail(c, QVL_E_PARSE, "%s '%s' holds a NUL byte", field, pbuf);
    *out = qvl_gguf_str_dup(s);
    return *out ? QVL_OK : cfail(c, QVL_E_NOMEM, "out of memory");
}

static int cmp_kv(const void *a, const void *b) {
    return strcmp((*(const qvl_gguf_kv *const *)a)->key, (*(const qvl_gguf_kv *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const qvl_gguf_tensor *const *)a)->name,
                  (*(const qvl_gguf_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const qvl_gguf_tensor *x = *(const qvl_gguf_tensor *const *)a, *y = *(const qvl_gguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static qvl_status read_kvs(cursor *c, uint64_t n) {
    qvl_gguf *g = c->g;
    g->kvs = calloc(n ? (size_t)n : 1, sizeof *g->kvs);
    g->kv_by_key = calloc(n ? (size_t)n : 1, sizeof *g->kv_by_key);
    if (!g->kvs || !g->kv_by_key) return cfail(c, QVL_E_NOMEM, "out of memory");
    char pk[128];
    for (uint64_t i = 0; i < n; i++) {
        qvl_gguf_kv *kv = &g->kvs[i];
        char *key = NULL;
        qvl_status s = read_name(c, "key", QVL_GGUF_MAX_KEY_BYTES, &key, pk, sizeof pk);
        if (s != QVL_OK) return s;
        kv->key = key;
        g->n_kv++;
        c->what = pk;
        c->kind = "key";
        uint64_t type;
        if ((s = rd(c, 4, "value type", &type)) != QVL_OK) return s;
        if (type >= QVL_GGUF_TYPE_COUNT)
            return cfail(c, QVL_E_UNSUPPORTED, "unknown value type %llu", (unsigned long long)type);
        if ((s = read_value(c, (uint32_t)type, 0, &kv->value)) != QVL_OK) return s;
        c->what = "header";
        c->kind = NULL;
    }
    for (size_t i = 0; i < g->n_kv; i++) g->kv_by_key[i] = &g->kvs[i];
    qsort(g->kv_by_key, g->n_kv, sizeof *g->kv_by_key, cmp_kv);
    for (size_t i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key)) {
            printable(g->kv_by_key[i]->key, strlen(g->kv_by_key[i]->key), pk, sizeof pk);
            return qvl_fail(c->err, QVL_E_PARSE, "%s: key '%s': appears twice", g->path, pk);
        }
    return QVL_OK;
}

static qvl_status read_alignment(cursor *c) {
    qvl_gguf *g = c->g;
    g->alignment = DEFAULT_ALIGNMENT;
    const qvl_gguf_value *v = qvl_gguf_find(g, "general.alignment");
    if (!v) return QVL_OK;
    if (v->type != QVL_GGUF_U32)
        return qvl_fail(c->err, QVL_E_PARSE, "%s: key 'general.alignment' is %s, not u32", g->path,
                        qvl_gguf_type_name(v->type));
    uint64_t a = v->v.u;
    if (a == 0 || (a & (a - 1)) || a > QVL_GGUF_MAX_ALIGNMENT)
        return qvl_fail(c->err, QVL_E_PARSE, "%s: key 'general.alignment' is %llu, not a power of "
                        "two up to 2^30", g->path, (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return QVL_OK;
}

/* One tensor info; sizes and offsets are checked against the file in check_layout. */
static qvl_status read_tensor(cursor *c, qvl_gguf_tensor *t, char *pn, size_t pcap) {
    char *name = NULL;
    qvl_status s = read_name(c, "tensor name", QVL_GGUF_MAX_NAME_BYTES, &name, pn, pcap);
    if (s != QVL_OK) return s;
    t->name = name;
    c->what = pn;
    c->kind = "tensor";
    uint64_t nd, type;
    if ((s = rd(c, 4, "n_dims", &nd)) != QVL_OK) return s;
    if (nd > QVL_GGUF_MAX_DIMS)
        return cfail(c, QVL_E_LIMIT, "%llu dimensions (at most %d)", (unsigned long long)nd,
                     QVL_GGUF_MAX_DIMS);
    t->ndim = (int32_t)nd;
    int64_t total = 1;
    bool overflow = false;
    for (int d = 0; d < QVL_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < (int)nd; d++) {
        uint64_t ne;
        if ((s = rd(c, 8, "dimension", &ne)) != QVL_OK) return s;
        if (ne > (uint64_t)INT64_MAX)
            return cfail(c, QVL_E_LIMIT, "dimension %d is %llu (more than 2^63 - 1)", d,
                         (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        t->shape[nd - 1 - (uint64_t)d] = (int64_t)ne;
        if (!qvl_mul_i64(total, (int64_t)ne, &total)) overflow = true;
    }
    for (int d = 0; d < (int)nd; d++)
        if (t->ne[d] == 0) overflow = false, total = 0; /* a zero dimension: no elements at all */
    if (overflow) return cfail(c, QVL_E_LIMIT, "shape is too large (element count overflows)");
    t->nelems = total;
    if ((s = rd(c, 4, "tensor type", &type)) != QVL_OK) return s;
    const qvl_ggml_type_info *info = qvl_ggml_type_get(type > UINT32_MAX ? UINT32_MAX : (uint32_t)type);
    if (!info) return cfail(c, QVL_E_UNSUPPORTED, "unknown ggml type %llu", (unsigned long long)type);
    if (info->support == QVL_GGML_REMOVED)
        return cfail(c, QVL_E_UNSUPPORTED, "type %s (%llu) was removed from GGUF; convert the model "
                     "again", info->name, (unsigned long long)type);
    t->type = (uint32_t)type;
    t->info = info;
    if ((uint64_t)t->ne[0] % info->block_elems)
        return cfail(c, QVL_E_SHAPE, "rows of %lld values are not whole %s blocks of %u",
                     (long long)t->ne[0], info->name, info->block_elems);
    uint64_t row, bytes = 0;
    if (!qvl_ggml_row_bytes(t->type, t->ne[0], &row)) return cfail(c, QVL_E_LIMIT, "rows are too large");
    if (total && (__builtin_mul_overflow(row, (uint64_t)(total / t->ne[0]), &bytes) || bytes > SIZE_MAX))
        return cfail(c, QVL_E_LIMIT, "byte size overflows");
    t->nbytes = (size_t)bytes;
    if ((s = rd(c, 8, "tensor offset", &t->offset)) != QVL_OK) return s;
    c->what = "header";
    c->kind = NULL;
    return QVL_OK;
}

/* Every tensor aligned, inside the file, no two sharing a byte; names unique. */
static qvl_status check_layout(cursor *c) {
    qvl_gguf *g = c->g;
    char pn[128];
    for (size_t i = 0; i < g->n_tensors; i++) {
        qvl_gguf_tensor *t = &g->tensors[i];
        printable(t->name, strlen(t->name), pn, sizeof pn);
        uint64_t begin;
        if (t->offset % g->alignment)
            return qvl_fail(c->err, QVL_E_PARSE, "%s: tensor '%s': offset %llu is not a multiple of "
                            "the alignment %u", g->path, pn, (unsigned long long)t->offset,
                            g->alignment);
        if (__builtin_add_overflow(g->data_offset, t->offset, &begin) || begin > g->map_size ||
            t->nbytes > g->map_size - begin)
            return qvl_fail(c->err, QVL_E_PARSE, "%s: tensor '%s': %zu bytes at data offset %llu "
                            "run past the end of the file (data starts at byte %llu of %zu)",
                            g->path, pn, t->nbytes, (unsigned long long)t->offset,
                            (unsigned long long)g->data_offset, g->map_size);
        t->data = g->map + begin;
        g->by_name[i] = t;
    }
    qsort(g->by_name, g->n_tensors, sizeof *g->by_name, cmp_tensor_name);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->by_name[i - 1]->name, g->by_name[i]->name)) {
            printable(g->by_name[i]->name, strlen(g->by_name[i]->name), pn, sizeof pn);
            return qvl_fail(c->err, QVL_E_PARSE, "%s: tensor '%s': appears twice", g->path, pn);
        }
    const qvl_gguf_tensor **by_off = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *by_off);
    if (!by_off) return qvl_fail(c->err, QVL_E_NOMEM, "%s: header: out of memory", g->path);
    size_t m = 0;
    for (size_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].nbytes) by_off[m++] = &g->tensors[i];
    qsort(by_off, m, sizeof *by_off, cmp_tensor_offset);
    qvl_status s = QVL_OK;
    for (size_t i = 1; i < m; i++)
        if (by_off[i - 1]->offset + by_off[i - 1]->nbytes > by_off[i]->offset) {
            char pa[128];
            printable(by_off[i]->name, strlen(by_off[i]->name), pn, sizeof pn);
            printable(by_off[i - 1]->name, strlen(by_off[i - 1]->name), pa, sizeof pa);
            s = qvl_fail(c->err, QVL_E_PARSE, "%s: tensor '%s': data overlaps tensor '%s'", g->path,
                         pn, pa);
            break;
        }
    free(by_off);
    return s;
}

static qvl_status parse(cursor *c) {
    qvl_gguf *g = c->g;
    qvl_status s;
    if (g->map_size < 4 || memcmp(g->map, "GGUF", 4))
        return cfail(c, QVL_E_PARSE, "not a GGUF file (it does not start with \"GGUF\")");
    c->pos = 4;
    uint64_t version, n_tensors, n_kv;
    if ((s = rd(c, 4, "version", &version)) != QVL_OK) return s;
    uint32_t swapped = __builtin_bswap32((uint32_t)version);
    if (version != 2 && version != 3) {
        if (swapped >= 1 && swapped <= 3)
            return cfail(c, QVL_E_UNSUPPORTED, "a big-endian GGUF file (version %u byte-swapped); "
                         "qvl reads little-endian GGUF only", swapped);
        return cfail(c, QVL_E_UNSUPPORTED, "GGUF version %llu (qvl reads versions 2 and 3)",
                     (unsigned long long)version);
    }
    g->version = (uint32_t)version;
    if ((s = rd(c, 8, "tensor count", &n_tensors)) != QVL_OK) return s;
    if ((s = rd(c, 8, "metadata count", &n_kv)) != QVL_OK) return s;
    if (n_kv > QVL_GGUF_MAX_KV)
        return cfail(c, QVL_E_LIMIT, "%llu metadata entries exceed the limit of %u",
                     (unsigned long long)n_kv, QVL_GGUF_MAX_KV);
    if (n_tensors > QVL_GGUF_MAX_TENSORS)
        return cfail(c, QVL_E_LIMIT, "%llu tensors exceed the limit of %u",
                     (unsigned long long)n_tensors, QVL_GGUF_MAX_TENSORS);
    if (n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_BYTES > left(c))
        return cfail(c, QVL_E_PARSE, "%llu metadata entries and %llu tensors cannot fit in the %zu "
                     "bytes left", (unsigned long long)n_kv, (unsigned long long)n_tensors, left(c));
    if ((s = read_kvs(c, n_kv)) != QVL_OK) return s;
    if ((s = read_alignment(c)) != QVL_OK) return s;
    if (n_tensors * MIN_TENSOR_BYTES > left(c))
        return cfail(c, QVL_E_PARSE, "%llu tensor infos cannot fit in the %zu bytes left",
                     (unsigned long long)n_tensors, left(c));
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    g->by_name = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->by_name);
    if (!g->tensors || !g->by_name) return cfail(c, QVL_E_NOMEM, "out of memory");
    char pn[128];
    for (uint64_t i = 0; i < n_tensors; i++) {
        s = read_tensor(c, &g->tensors[i], pn, sizeof pn);
        if (g->tensors[i].name) g->n_tensors++;
        if (s != QVL_OK) return s;
    }
    /* the data section starts at the next multiple of the alignment (alignment <= 2^30) */
    g->data_offset = ((uint64_t)c->pos + g->alignment - 1) / g->alignment * g->alignment;
    return check_layout(c);
}

void qvl_gguf_close(qvl_gguf *g) {
    if (!g) return;
    if (g->map) {
        qvl_mapped_forget(g->map_slot);
        munmap((void *)g->map, g->map_size);
    }
    for (size_t i = 0; i < g->n_kv; i++) free((char *)g->kvs[i].key);
    for (size_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    for (size_t i = 0; i < g->n_blocks; i++) free(g->blocks[i]);
    free(g->blocks);
    free(g->kvs);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->by_name);
    free(g->path);
    free(g);
}

qvl_status qvl_gguf_open(const char *path, qvl_gguf **out, qvl_error *err) {
    if (!path || !out) return qvl_fail(err, QVL_E_INVALID, "gguf: no path or output given");
    *out = NULL;
    qvl_gguf *g = calloc(1, sizeof *g);
    if (g) g->map_slot = -1;
    if (!g || !(g->path = strdup(path))) {
        free(g);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    }
    unsigned char *map;
    qvl_status s = qvl_mapped_open(path, &map, &g->map_size, &g->map_slot, err);
    g->map = map;
    if (s != QVL_OK) goto fail;
    if (g->map_size < 24) {
        s = qvl_fail(err, QVL_E_PARSE, "%s: header: file is %lld bytes, shorter than a GGUF header "
                     "(24)", path, (long long)g->map_size);
        goto fail;
    }
    cursor c = {.g = g, .err = err, .what = "header"};
    if ((s = parse(&c)) != QVL_OK) goto fail;
    *out = g;
    return QVL_OK;
fail:
    qvl_gguf_close(g);
    return s;
}
