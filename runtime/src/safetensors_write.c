/* Safetensors writer: header first, then each tensor's bytes streamed in bounded chunks. */
#define _POSIX_C_SOURCE 200809L
#include "qvl/safetensors.h"

#include "qvl/file_write.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/checked.h"

/* Bytes handed to a fill callback at a time: a multiple of every element size. */
#define ST_CHUNK_BYTES ((size_t)4 << 20)

const char *qvl_st_dtype_name(qvl_dtype t) {
    switch (t) {
    case QVL_F32: return "F32";
    case QVL_F16: return "F16";
    case QVL_BF16: return "BF16";
    case QVL_Q8_0:
    case QVL_Q4_K:
    case QVL_Q6_K: return "U8";
    default: return NULL;
    }
}

/* ---- a growable text buffer for the header ---- */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_u64(strbuf *b, uint64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped; UTF-8 passes through. */
static void sb_json_string(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Elements of one row along which a quantised tensor's blocks run (the whole tensor when 1-D);
 * false on overflow. */
static bool quant_row(const qvl_st_write_tensor *t, int64_t *row) {
    *row = t->ndim == 1 ? t->shape[0] : 1;
    for (int d = 1; d < t->ndim; d++)
        if (!qvl_mul_i64(*row, t->shape[d], row)) return false;
    return true;
}

/* The shape a quantised tensor is stored under as U8: [d0, row_bytes], or [bytes] when 1-D. */
static int storage_shape(const qvl_st_write_tensor *t, uint64_t *shape) {
    int64_t row = 0;
    size_t row_bytes = 0;
    quant_row(t, &row); /* checked by check_tensors */
    qvl_dtype_row_bytes(t->dtype, row, &row_bytes);
    if (t->ndim == 1) {
        shape[0] = row_bytes;
        return 1;
    }
    shape[0] = (uint64_t)t->shape[0];
    shape[1] = row_bytes;
    return 2;
}

/* Check every tensor description and compute its byte size. */
static qvl_status check_tensors(const char *path, const qvl_st_write_tensor *t, size_t n,
                                uint64_t *sizes, qvl_error *err) {
    for (size_t i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name || !*name || !strcmp(name, "__metadata__"))
            return qvl_fail(err, QVL_E_INVALID, "%s: tensor %zu: missing or reserved name", path,
                            i);
        if (!qvl_st_dtype_name(t[i].dtype))
            return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: tensor '%s': dtype %s cannot be written",
                            path, name, qvl_dtype_name(t[i].dtype));
        if (t[i].ndim < 0 || t[i].ndim > QVL_ST_MAX_DIMS)
            return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': rank %d out of range", path, name,
                            (int)t[i].ndim);
        size_t bytes = t[i].dtype == QVL_F32 ? 4 : 2;
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0 || !qvl_mul_size(bytes, (size_t)t[i].shape[d], &bytes))
                return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': bad or too large shape", path,
                                name);
        }
        if (qvl_dtype_is_quant(t[i].dtype)) {
            int64_t row;
            size_t row_bytes;
            if (t[i].ndim < 1 || !quant_row(&t[i], &row))
                return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': bad shape for %s", path,
                                name, qvl_dtype_name(t[i].dtype));
            if (!qvl_dtype_row_bytes(t[i].dtype, row, &row_bytes))
                return qvl_fail(err, QVL_E_SHAPE, "%s: tensor '%s': rows of %lld elements are not "
                                "whole %s blocks", path, name, (long long)row,
                                qvl_dtype_name(t[i].dtype));
            if (!qvl_mul_size(row_bytes, t[i].ndim == 1 ? 1 : (size_t)t[i].shape[0], &bytes))
                return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': too large", path, name);
        }
        if (bytes && !t[i].data && !t[i].fill)
            return qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': neither data nor fill given",
                            path, name);
        sizes[i] = bytes;
    }
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) names[i] = t[i].name;
    qsort(names, n, sizeof *names, cmp_str_ptr);
    qvl_status s = QVL_OK;
    for (size_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) {
            s = qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': given twice", path, names[i]);
            break;
        }
    free(names);
    return s;
}

/* The header JSON, padded with spaces so 8 + its length is a multiple of 8. */
static qvl_status build_header(const char *path, const qvl_st_write_tensor *t, size_t n,
                               const uint64_t *sizes, const char *const *meta, size_t n_meta,
                               strbuf *b, qvl_error *err) {
    size_t n_quant = 0;
    for (size_t i = 0; i < n; i++) n_quant += qvl_dtype_is_quant(t[i].dtype);
    sb_str(b, "{");
    if (n_meta || n_quant) {
        sb_str(b, "\"__metadata__\":{");
        const size_t np = strlen(QVL_ST_QUANT_PREFIX);
        for (size_t i = 0; i < n_meta; i++) {
            if (!meta[2 * i] || !meta[2 * i + 1])
                return qvl_fail(err, QVL_E_INVALID, "%s: metadata entry %zu is NULL", path, i);
            if (!strncmp(meta[2 * i], QVL_ST_QUANT_PREFIX, np))
                return qvl_fail(err, QVL_E_INVALID, "%s: metadata key '%s' is reserved", path,
                                meta[2 * i]);
            if (i) sb_str(b, ",");
            sb_json_string(b, meta[2 * i]);
            sb_str(b, ":");
            sb_json_string(b, meta[2 * i + 1]);
        }
        bool first = n_meta == 0;
        for (size_t i = 0; i < n; i++) {
            if (!qvl_dtype_is_quant(t[i].dtype)) continue;
            if (!first) sb_str(b, ",");
            first = false;
            size_t kn = strlen(QVL_ST_QUANT_PREFIX) + strlen(t[i].name) + 1;
            char *key = malloc(kn);
            if (!key) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
            snprintf(key, kn, "%s%s", QVL_ST_QUANT_PREFIX, t[i].name);
            sb_json_string(b, key);
            free(key);
            sb_str(b, ":\"");
            sb_str(b, qvl_dtype_name(t[i].dtype));
            for (int d = 0; d < t[i].ndim; d++) {
                sb_str(b, d ? "," : "[");
                sb_u64(b, (uint64_t)t[i].shape[d]);
            }
            sb_str(b, "]\"");
        }
        sb_str(b, "}");
        if (n) sb_str(b, ",");
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) sb_str(b, ",");
        sb_json_string(b, t[i].name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, qvl_st_dtype_name(t[i].dtype));
        sb_str(b, "\",\"shape\":[");
        uint64_t stored[QVL_ST_MAX_DIMS];
        int nd = t[i].ndim;
        for (int d = 0; d < nd; d++) stored[d] = (uint64_t)t[i].shape[d];
        if (qvl_dtype_is_quant(t[i].dtype)) nd = storage_shape(&t[i], stored);
        for (int d = 0; d < nd; d++) {
            if (d) sb_str(b, ",");
            sb_u64(b, stored[d]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_u64(b, offset);
        sb_str(b, ",");
        if (__builtin_add_overflow(offset, sizes[i], &offset))
            return qvl_fail(err, QVL_E_LIMIT, "%s: total size overflows", path);
        sb_u64(b, offset);
        sb_str(b, "]}");
    }
    sb_str(b, "}");
    while (!b->oom && (8 + b->len) % 8) sb_str(b, " ");
    if (b->oom) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory building the header", path);
    return QVL_OK;
}

static qvl_status write_tensor_data(qvl_new_file *f, const qvl_st_write_tensor *t,
                                    size_t index, uint64_t size, unsigned char *chunk,
                                    qvl_error *err) {
    if (t->data) return qvl_new_file_write(f, t->data, (size_t)size, err);
    /* Every chunk starts at a multiple of 256 elements, so a fill callback converting from
     * any block dtype (32 or 256 elements a block) reads whole source blocks too: for a
     * quantised dtype the step is whole groups of 256 elements, and 4 MiB of 4- or 2-byte
     * elements is one already. */
    const size_t group = qvl_dtype_block_bytes(t->dtype) *
                         (qvl_dtype_is_quant(t->dtype) ? QVL_QK_K / qvl_dtype_block_elems(t->dtype)
                                                       : 1);
    const size_t step = ST_CHUNK_BYTES / group * group;
    for (uint64_t off = 0; off < size;) {
        size_t n = size - off < step ? (size_t)(size - off) : step;
        qvl_status s = t->fill(t->fill_user, index, off, chunk, n, err);
        if (s != QVL_OK) return s;
        if ((s = qvl_new_file_write(f, chunk, n, err)) != QVL_OK) return s;
        off += n;
    }
    return QVL_OK;
}

qvl_status qvl_safetensors_write(const char *path, const qvl_st_write_tensor *tensors,
                                 size_t n_tensors, const char *const *metadata_kv,
                                 size_t n_metadata, qvl_error *err) {
    if (!path || (n_tensors && !tensors) || (n_metadata && !metadata_kv))
        return qvl_fail(err, QVL_E_INVALID, "safetensors write: missing path or tensor list");
    qvl_status s = QVL_OK;
    uint64_t *sizes = calloc(n_tensors ? n_tensors : 1, sizeof *sizes);
    unsigned char *chunk = NULL;
    strbuf hdr = {0};
    qvl_new_file f = {.fd = -1};
    if (!sizes) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    if ((s = check_tensors(path, tensors, n_tensors, sizes, err)) != QVL_OK) goto done;
    if ((s = build_header(path, tensors, n_tensors, sizes, metadata_kv, n_metadata, &hdr, err)) !=
        QVL_OK)
        goto done;
    if (!(chunk = malloc(ST_CHUNK_BYTES))) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    /* qvl/file_write.h: a regular file is replaced by rename, so a reader of the old file
     * keeps an intact mapping and a failure leaves no partial file */
    if ((s = qvl_new_file_open(path, &f, err)) != QVL_OK) goto done;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    if ((s = qvl_new_file_write(&f, len8, 8, err)) != QVL_OK) goto done;
    if ((s = qvl_new_file_write(&f, hdr.p, hdr.len, err)) != QVL_OK) goto done;
    for (size_t i = 0; i < n_tensors; i++)
        if ((s = write_tensor_data(&f, &tensors[i], i, sizes[i], chunk, err)) != QVL_OK)
            goto done;
    s = qvl_new_file_commit(&f, err);
done:
    qvl_new_file_abandon(&f);
    free(chunk);
    free(hdr.p);
    free(sizes);
    return s;
}
