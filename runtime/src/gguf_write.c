/* GGUF writer (qvl/gguf_write.h). The metadata are serialised into one growing buffer as they
 * are added; the tensor infos and the data are laid out when the file is written. */
#define _POSIX_C_SOURCE 200809L
#include "qvl/gguf_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/ggml_types.h"

#define CHUNK_BYTES ((size_t)4 << 20)

typedef struct buf {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} buf;

typedef struct wtensor {
    char *name;
    uint32_t type;
    int ndim;
    int64_t shape[QVL_GGUF_MAX_DIMS];
    uint64_t nbytes, offset; /* offset: from the start of the data section */
    const void *data;
    qvl_gguf_fill_fn fill;
    void *fill_user;
} wtensor;

struct qvl_gguf_writer {
    char *what;
    buf kv;
    uint64_t n_kv;
    char **keys;
    size_t n_keys, cap_keys;
    wtensor *t;
    size_t n_t, cap_t;
    uint64_t data_bytes; /* the data section so far, padded */
    uint64_t elements;
};

static void put(buf *b, const void *p, size_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_le(buf *b, uint64_t v, int bytes) {
    unsigned char le[8];
    for (int i = 0; i < bytes; i++) le[i] = (unsigned char)(v >> (8 * i));
    put(b, le, (size_t)bytes);
}

static void put_str(buf *b, const char *s, size_t len) {
    put_le(b, len, 8);
    put(b, s, len);
}

static int scalar_bytes(qvl_gguf_type t) {
    switch (t) {
    case QVL_GGUF_U8: case QVL_GGUF_I8: case QVL_GGUF_BOOL: return 1;
    case QVL_GGUF_U16: case QVL_GGUF_I16: return 2;
    case QVL_GGUF_U32: case QVL_GGUF_I32: case QVL_GGUF_F32: return 4;
    case QVL_GGUF_U64: case QVL_GGUF_I64: case QVL_GGUF_F64: return 8;
    default: return 0;
    }
}

qvl_status qvl_gguf_writer_new(const char *what, qvl_gguf_writer **out, qvl_error *err) {
    *out = NULL;
    qvl_gguf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->what = strdup(what ? what : "gguf"))) {
        free(w);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    *out = w;
    return QVL_OK;
}

void qvl_gguf_writer_free(qvl_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_keys; i++) free(w->keys[i]);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->keys);
    free(w->t);
    free(w->kv.p);
    free(w->what);
    free(w);
}

bool qvl_gguf_writer_has_key(const qvl_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_keys; i++)
        if (!strcmp(w->keys[i], key)) return true;
    return false;
}

/* The key and value type; the caller appends the value. */
static qvl_status begin_kv(qvl_gguf_writer *w, const char *key, qvl_gguf_type type,
                           qvl_error *err) {
    const size_t len = key ? strlen(key) : 0;
    if (len == 0 || len > QVL_GGUF_MAX_KEY_BYTES)
        return qvl_fail(err, QVL_E_INVALID, "%s: a metadata key must be 1 to %u bytes", w->what,
                        QVL_GGUF_MAX_KEY_BYTES);
    if (qvl_gguf_writer_has_key(w, key))
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' added twice", w->what, key);
    if (w->n_keys == w->cap_keys) {
        size_t cap = w->cap_keys ? 2 * w->cap_keys : 32;
        char **nk = realloc(w->keys, cap * sizeof *nk);
        if (!nk) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", w->what);
        w->keys = nk;
        w->cap_keys = cap;
    }
    if (!(w->keys[w->n_keys] = strdup(key)))
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", w->what);
    w->n_keys++;
    w->n_kv++;
    put_str(&w->kv, key, len);
    put_le(&w->kv, (uint64_t)type, 4);
    return QVL_OK;
}

static qvl_status end_kv(qvl_gguf_writer *w, qvl_error *err) {
    return w->kv.oom ? qvl_fail(err, QVL_E_NOMEM, "%s: out of memory for the metadata", w->what)
                     : QVL_OK;
}

qvl_status qvl_gguf_writer_u32(qvl_gguf_writer *w, const char *key, uint32_t v, qvl_error *err) {
    qvl_status st = begin_kv(w, key, QVL_GGUF_U32, err);
    if (st != QVL_OK) return st;
    put_le(&w->kv, v, 4);
    return end_kv(w, err);
}

qvl_status qvl_gguf_writer_f32(qvl_gguf_writer *w, const char *key, float v, qvl_error *err) {
    qvl_status st = begin_kv(w, key, QVL_GGUF_F32, err);
    if (st != QVL_OK) return st;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_le(&w->kv, bits, 4);
    return end_kv(w, err);
}

qvl_status qvl_gguf_writer_bool(qvl_gguf_writer *w, const char *key, bool v, qvl_error *err) {
    qvl_status st = begin_kv(w, key, QVL_GGUF_BOOL, err);
    if (st != QVL_OK) return st;
    put_le(&w->kv, v ? 1 : 0, 1);
    return end_kv(w, err);
}

qvl_status qvl_gguf_writer_str(qvl_gguf_writer *w, const char *key, const char *s, size_t len,
                               qvl_error *err) {
    qvl_status st = begin_kv(w, key, QVL_GGUF_STRING, err);
    if (st != QVL_OK) return st;
    put_str(&w->kv, s, len);
    return end_kv(w, err);
}

/* Scalars in the file's byte order from a packed host array (qvl runs little-endian only, as
 * the reader does, so this is a copy; BOOL is checked to be 0 or 1). */
static qvl_status put_scalars(qvl_gguf_writer *w, const char *key, qvl_gguf_type elem,
                              const void *raw, uint64_t n, qvl_error *err) {
    const int eb = scalar_bytes(elem);
    if (elem == QVL_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const unsigned char *)raw)[i] > 1)
                return qvl_fail(err, QVL_E_INVALID, "%s: key '%s': bool element %llu is not 0 "
                                "or 1", w->what, key, (unsigned long long)i);
    if (n > SIZE_MAX / (size_t)eb)
        return qvl_fail(err, QVL_E_LIMIT, "%s: key '%s': array too large", w->what, key);
    put(&w->kv, raw, (size_t)n * (size_t)eb);
    return QVL_OK;
}

qvl_status qvl_gguf_writer_array(qvl_gguf_writer *w, const char *key, qvl_gguf_type elem,
                                 const void *raw, uint64_t n, qvl_error *err) {
    if (!scalar_bytes(elem))
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s': arrays of %s are written otherwise",
                        w->what, key ? key : "?", qvl_gguf_type_name(elem));
    qvl_status st = begin_kv(w, key, QVL_GGUF_ARRAY, err);
    if (st != QVL_OK) return st;
    put_le(&w->kv, (uint64_t)elem, 4);
    put_le(&w->kv, n, 8);
    if ((st = put_scalars(w, key, elem, raw, n, err)) != QVL_OK) return st;
    return end_kv(w, err);
}

qvl_status qvl_gguf_writer_str_array(qvl_gguf_writer *w, const char *key,
                                     const char *const *strs, const size_t *lens, uint64_t n,
                                     qvl_error *err) {
    qvl_status st = begin_kv(w, key, QVL_GGUF_ARRAY, err);
    if (st != QVL_OK) return st;
    put_le(&w->kv, QVL_GGUF_STRING, 4);
    put_le(&w->kv, n, 8);
    for (uint64_t i = 0; i < n; i++) put_str(&w->kv, strs[i], lens[i]);
    return end_kv(w, err);
}

/* A value read by qvl/gguf.h: scalars from the union, arrays element by element. */
static qvl_status put_value(qvl_gguf_writer *w, const char *key, const qvl_gguf_value *v,
                            int depth, qvl_error *err) {
    if (depth >= QVL_GGUF_MAX_NESTING)
        return qvl_fail(err, QVL_E_LIMIT, "%s: key '%s': arrays nest too deep", w->what, key);
    switch (v->type) {
    case QVL_GGUF_STRING: put_str(&w->kv, v->v.s.ptr, (size_t)v->v.s.len); return QVL_OK;
    case QVL_GGUF_F32: {
        float f = (float)v->v.f;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        put_le(&w->kv, bits, 4);
        return QVL_OK;
    }
    case QVL_GGUF_F64: {
        uint64_t bits;
        memcpy(&bits, &v->v.f, sizeof bits);
        put_le(&w->kv, bits, 8);
        return QVL_OK;
    }
    case QVL_GGUF_I8: case QVL_GGUF_I16: case QVL_GGUF_I32: case QVL_GGUF_I64:
        put_le(&w->kv, (uint64_t)v->v.i, scalar_bytes(v->type));
        return QVL_OK;
    case QVL_GGUF_ARRAY: break;
    default:
        if (!scalar_bytes(v->type))
            return qvl_fail(err, QVL_E_INVALID, "%s: key '%s': unknown value type %d", w->what,
                            key, (int)v->type);
        put_le(&w->kv, v->v.u, scalar_bytes(v->type));
        return QVL_OK;
    }
    const qvl_gguf_type et = v->v.arr.type;
    put_le(&w->kv, (uint64_t)et, 4);
    put_le(&w->kv, v->v.arr.count, 8);
    if (et == QVL_GGUF_STRING) {
        for (uint64_t i = 0; i < v->v.arr.count; i++)
            put_str(&w->kv, v->v.arr.strs[i].ptr, (size_t)v->v.arr.strs[i].len);
        return QVL_OK;
    }
    if (et == QVL_GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->v.arr.count; i++) {
            qvl_status st = put_value(w, key, &v->v.arr.items[i], depth + 1, err);
            if (st != QVL_OK) return st;
        }
        return QVL_OK;
    }
    if (!scalar_bytes(et))
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s': unknown element type %d", w->what,
                        key, (int)et);
    return v->v.arr.count ? put_scalars(w, key, et, v->v.arr.raw, v->v.arr.count, err) : QVL_OK;
}

qvl_status qvl_gguf_writer_value(qvl_gguf_writer *w, const char *key, const qvl_gguf_value *v,
                                 qvl_error *err) {
    qvl_status st = begin_kv(w, key, v->type, err);
    if (st == QVL_OK) st = put_value(w, key, v, 0, err);
    return st == QVL_OK ? end_kv(w, err) : st;
}

qvl_status qvl_gguf_writer_add_tensor(qvl_gguf_writer *w, const char *name, uint32_t type,
                                      int ndim, const int64_t *shape, const void *data,
                                      qvl_gguf_fill_fn fill, void *fill_user, qvl_error *err) {
    const size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen > QVL_GGUF_MAX_NAME_BYTES)
        return qvl_fail(err, QVL_E_INVALID, "%s: a tensor name must be 1 to %u bytes", w->what,
                        QVL_GGUF_MAX_NAME_BYTES);
    const qvl_ggml_type_info *info = qvl_ggml_type_get(type);
    if (!info || info->support == QVL_GGML_REMOVED)
        return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': unknown ggml type %u", w->what,
                        name, type);
    if (ndim < 1 || ndim > QVL_GGUF_MAX_DIMS)
        return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': %d dimensions (1 to %d)", w->what,
                        name, ndim, QVL_GGUF_MAX_DIMS);
    if (!data && !fill)
        return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': no data", w->what, name);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s' added twice", w->what, name);
    int64_t rows = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || (d < ndim - 1 && rows > INT64_MAX / shape[d]))
            return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': dimension %d is %lld", w->what,
                            name, d, (long long)shape[d]);
        if (d < ndim - 1) rows *= shape[d];
    }
    const int64_t row = shape[ndim - 1];
    uint64_t row_bytes, bytes, padded;
    if (row % (int64_t)info->block_elems)
        return qvl_fail(err, QVL_E_SHAPE, "%s: tensor '%s': rows of %lld values are not whole %s "
                        "blocks of %u", w->what, name, (long long)row, info->name,
                        info->block_elems);
    if (!qvl_ggml_row_bytes(type, row, &row_bytes) ||
        __builtin_mul_overflow(row_bytes, (uint64_t)rows, &bytes) ||
        __builtin_add_overflow(bytes, QVL_GGUF_WRITE_ALIGNMENT - 1, &padded) ||
        __builtin_add_overflow(w->data_bytes, padded / QVL_GGUF_WRITE_ALIGNMENT *
                                                  QVL_GGUF_WRITE_ALIGNMENT, &padded))
        return qvl_fail(err, QVL_E_LIMIT, "%s: tensor '%s' is too large", w->what, name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", w->what);
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", w->what);
    t->type = type;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->nbytes = bytes;
    t->offset = w->data_bytes;
    t->data = data;
    t->fill = fill;
    t->fill_user = fill_user;
    w->data_bytes = padded;
    w->elements += (uint64_t)(rows * row);
    w->n_t++;
    return QVL_OK;
}

size_t qvl_gguf_writer_tensor_count(const qvl_gguf_writer *w) { return w->n_t; }
uint64_t qvl_gguf_writer_elements(const qvl_gguf_writer *w) { return w->elements; }

static qvl_status write_zeros(qvl_new_file *f, uint64_t n, qvl_error *err) {
    static const unsigned char zeros[QVL_GGUF_WRITE_ALIGNMENT];
    return n ? qvl_new_file_write(f, zeros, (size_t)n, err) : QVL_OK;
}

static qvl_status write_data(const qvl_gguf_writer *w, size_t index, qvl_new_file *f,
                             unsigned char *chunk, qvl_error *err) {
    const wtensor *t = &w->t[index];
    if (t->data) return qvl_new_file_write(f, t->data, (size_t)t->nbytes, err);
    /* whole groups of 256 elements per chunk: whole blocks of every block type, so a fill
     * converting from a block dtype reads whole source blocks too */
    const qvl_ggml_type_info *info = qvl_ggml_type_get(t->type);
    const size_t group = info->block_bytes * (256 / info->block_elems);
    const size_t step = CHUNK_BYTES / group * group;
    for (uint64_t off = 0; off < t->nbytes;) {
        const size_t n = t->nbytes - off < step ? (size_t)(t->nbytes - off) : step;
        qvl_status st = t->fill(t->fill_user, index, off, chunk, n, err);
        if (st == QVL_OK) st = qvl_new_file_write(f, chunk, n, err);
        if (st != QVL_OK) return st;
        off += n;
    }
    return QVL_OK;
}

qvl_status qvl_gguf_writer_write(const qvl_gguf_writer *w, qvl_new_file *f, qvl_error *err) {
    buf h = {0};
    put(&h, "GGUF", 4);
    put_le(&h, 3, 4);
    put_le(&h, w->n_t, 8);
    put_le(&h, w->n_kv, 8);
    put(&h, w->kv.p, w->kv.len);
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_le(&h, (uint64_t)t->ndim, 4);
        for (int d = t->ndim - 1; d >= 0; d--) put_le(&h, (uint64_t)t->shape[d], 8);
        put_le(&h, t->type, 4);
        put_le(&h, t->offset, 8);
    }
    if (h.oom) {
        free(h.p);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory for the header", w->what);
    }
    const uint64_t pad = (QVL_GGUF_WRITE_ALIGNMENT - h.len % QVL_GGUF_WRITE_ALIGNMENT) %
                         QVL_GGUF_WRITE_ALIGNMENT;
    qvl_status st = qvl_new_file_write(f, h.p, h.len, err);
    free(h.p);
    if (st == QVL_OK) st = write_zeros(f, pad, err);
    unsigned char *chunk = malloc(CHUNK_BYTES);
    if (!chunk && st == QVL_OK) st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", w->what);
    uint64_t at = 0;
    for (size_t i = 0; st == QVL_OK && i < w->n_t; i++) {
        st = write_zeros(f, w->t[i].offset - at, err);
        if (st == QVL_OK) st = write_data(w, i, f, chunk, err);
        at = w->t[i].offset + w->t[i].nbytes;
    }
    /* the data section ends padded too, as ggml's writer leaves it */
    if (st == QVL_OK) st = write_zeros(f, w->data_bytes - at, err);
    free(chunk);
    return st;
}
