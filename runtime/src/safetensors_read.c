/* Safetensors reader: maps the file read-only and validates the header against the file size
 * before any tensor pointer is handed out. */
#define _POSIX_C_SOURCE 200809L
#include "qvl/safetensors.h"

#include "qvl/mapped_files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/checked.h"
#include "qvl/json_bounds.h"

/* A valid header nests 3 deep (root, entry, array); anything much deeper is hostile. */
#define ST_MAX_NESTING 8
/* Longer arrays are refused before parsing; a shape a little over QVL_ST_MAX_DIMS still gets
 * the entry's own message (which names the tensor). */
#define ST_MAX_ARRAY 64
/* At most this many __metadata__ entries (a string each; writers store a handful). */
#define ST_MAX_META 4096
/* An entry's values: its object, dtype, shape array and dims, offsets array and two offsets. */
#define ST_VALUES_PER_ENTRY (5 + QVL_ST_MAX_DIMS + 1)
#define ST_MAX_INT 9007199254740992.0 /* 2^53: JSON numbers above it are not exact doubles */

/* One "__metadata__" pair; used marks a quantised-tensor description that a tensor took. */
typedef struct meta_entry {
    char *key, *value;
    bool used;
} meta_entry;

struct qvl_safetensors {
    char *path;
    const unsigned char *map;
    size_t map_size;
    int map_slot;                  /* qvl_mapped_register's slot: SIGBUS names this file */
    const unsigned char *data;     /* first byte after the header */
    size_t data_size;
    qvl_st_tensor *tensors;        /* header order */
    size_t n_tensors;
    const qvl_st_tensor **by_name; /* sorted by name, for find */
    meta_entry *meta;              /* sorted by key, for lookups */
    size_t n_meta;
};

/* Safetensors dtype names; the unsupported ones are listed so the message can say so. */
static const struct { const char *name; int qvl; /* -1 = known but unsupported */ } st_dtypes[] = {
    {"F32", QVL_F32}, {"F16", QVL_F16}, {"BF16", QVL_BF16},
    {"F64", -1}, {"I64", -1}, {"I32", -1}, {"I16", -1}, {"I8", -1}, {"U64", -1}, {"U32", -1},
    {"U16", -1}, {"U8", -1}, {"BOOL", -1}, {"F8_E4M3", -1}, {"F8_E5M2", -1}, {"F8_E8M0", -1},
    {"F4", -1}, {"F6_E2M3", -1}, {"F6_E3M2", -1}, {"C64", -1},
};

static size_t elem_bytes(qvl_dtype t) {
    return t == QVL_F32 ? 4 : 2;
}

static int cmp_meta(const void *a, const void *b) {
    return strcmp(((const meta_entry *)a)->key, ((const meta_entry *)b)->key);
}

static meta_entry *find_meta(const qvl_safetensors *st, const char *key) {
    meta_entry k = {.key = (char *)key};
    return st->n_meta ? bsearch(&k, st->meta, st->n_meta, sizeof k, cmp_meta) : NULL;
}

static int cmp_tensor_name(const void *a, const void *b) {
    const qvl_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int cmp_tensor_begin(const void *a, const void *b) {
    const qvl_st_tensor *const *x = a, *const *y = b;
    uintptr_t pa = (uintptr_t)(*x)->data, pb = (uintptr_t)(*y)->data;
    if (pa != pb) return pa < pb ? -1 : 1;
    return (*x)->nbytes < (*y)->nbytes ? -1 : (*x)->nbytes > (*y)->nbytes;
}

/* A JSON number that is a whole number in [0, max]. */
static bool json_uint(const cJSON *v, double max, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > max || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

void qvl_safetensors_close(qvl_safetensors *st) {
    if (!st) return;
    if (st->map) {
        qvl_mapped_forget(st->map_slot);
        munmap((void *)st->map, st->map_size);
    }
    for (size_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    for (size_t i = 0; i < st->n_meta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->tensors);
    free(st->by_name);
    free(st->meta);
    free(st->path);
    free(st);
}

static qvl_status parse_metadata(qvl_safetensors *st, const cJSON *meta, qvl_error *err) {
    if (!cJSON_IsObject(meta))
        return qvl_fail(err, QVL_E_PARSE, "%s: header: __metadata__ is not an object", st->path);
    size_t n = (size_t)cJSON_GetArraySize(meta);
    st->meta = calloc(n ? n : 1, sizeof *st->meta);
    if (!st->meta) return qvl_fail(err, QVL_E_NOMEM, "%s: header: out of memory", st->path);
    for (const cJSON *kv = meta->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv) || !kv->valuestring)
            return qvl_fail(err, QVL_E_PARSE,
                            "%s: header: __metadata__ value '%.200s' is not a string", st->path,
                            kv->string ? kv->string : "");
        meta_entry *e = &st->meta[st->n_meta++];
        e->key = strdup(kv->string ? kv->string : "");
        e->value = strdup(kv->valuestring);
        if (!e->key || !e->value)
            return qvl_fail(err, QVL_E_NOMEM, "%s: header: out of memory", st->path);
    }
    qsort(st->meta, st->n_meta, sizeof *st->meta, cmp_meta);
    /* cJSON keeps repeated keys; which one a reader sees would be arbitrary */
    for (size_t i = 1; i < st->n_meta; i++)
        if (!strcmp(st->meta[i - 1].key, st->meta[i].key))
            return qvl_fail(err, QVL_E_PARSE, "%s: header: __metadata__ key '%.200s' appears twice",
                            st->path, st->meta[i].key);
    return QVL_OK;
}

/* Dimensions "d0,d1,...]" of a quantised tensor's description: decimal integers in [0, 2^53].
 * Returns the rank, or -1 when the text is not that. */
static int parse_dims(const char *p, int64_t *dims) {
    int n = 0;
    for (;;) {
        if (*p < '0' || *p > '9' || n == QVL_ST_MAX_DIMS) return -1;
        uint64_t v = 0;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (uint64_t)(*p++ - '0');
            if (v > (uint64_t)ST_MAX_INT) return -1;
        }
        dims[n++] = (int64_t)v;
        if (*p == ']') return p[1] == '\0' ? n : -1;
        if (*p++ != ',') return -1;
    }
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* A U8 tensor that __metadata__ describes as "DTYPE[d0,...]": check that its bytes are exactly
 * those of that dtype and logical shape stored as the writer lays them out, then make t that
 * logical tensor. */
static qvl_status apply_quant(qvl_safetensors *st, const char *name, meta_entry *desc,
                              qvl_st_tensor *t, qvl_error *err) {
    const char *v = desc->value;
    const char *lb = strchr(v, '[');
    char dname[16];
    if (!lb || (size_t)(lb - v) >= sizeof dname)
        return qvl_fail(err, QVL_E_PARSE, "%s: tensor '%.200s': __metadata__ '%.200s' is '%.100s', "
                        "not DTYPE[dims]", st->path, name, desc->key, v);
    memcpy(dname, v, (size_t)(lb - v));
    dname[lb - v] = '\0';
    qvl_dtype q;
    if (!qvl_dtype_parse(dname, &q) || !qvl_dtype_is_quant(q))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: tensor '%.200s': unknown qvl dtype '%s' in "
                        "__metadata__ (q8_0, q4_k and q6_k are stored as U8)", st->path, name,
                        dname);
    int64_t dims[QVL_ST_MAX_DIMS];
    int nd = parse_dims(lb + 1, dims);
    if (nd < 1)
        return qvl_fail(err, QVL_E_PARSE, "%s: tensor '%.200s': __metadata__ '%.200s' is '%.100s', "
                        "not DTYPE[dims]", st->path, name, desc->key, v);
    /* Blocks run along the row: all dimensions after the first (the whole tensor when 1-D). */
    int64_t row = nd == 1 ? dims[0] : 1;
    for (int i = 1; i < nd; i++)
        if (!qvl_mul_i64(row, dims[i], &row))
            return qvl_fail(err, QVL_E_LIMIT, "%s: tensor '%.200s': shape is too large", st->path,
                            name);
    size_t row_bytes;
    if (!qvl_dtype_row_bytes(q, row, &row_bytes))
        return qvl_fail(err, QVL_E_SHAPE, "%s: tensor '%.200s': rows of %lld elements are not "
                        "whole %s blocks", st->path, name, (long long)row, dname);
    int64_t want[2] = {nd == 1 ? (int64_t)row_bytes : dims[0], (int64_t)row_bytes};
    int want_nd = nd == 1 ? 1 : 2;
    bool same = t->ndim == want_nd && (uint64_t)row_bytes <= (uint64_t)ST_MAX_INT;
    for (int i = 0; same && i < want_nd; i++) same = t->shape[i] == want[i];
    if (!same) {
        char got_s[96], want_s[64], logical[128];
        shape_text(got_s, sizeof got_s, t->ndim, t->shape);
        shape_text(want_s, sizeof want_s, want_nd, want);
        shape_text(logical, sizeof logical, nd, dims);
        return qvl_fail(err, QVL_E_SHAPE, "%s: tensor '%.200s': stored as U8 %s, but %s %s is U8 "
                        "%s", st->path, name, got_s, dname, logical, want_s);
    }
    t->dtype = q;
    t->ndim = nd;
    memset(t->shape, 0, sizeof t->shape);
    memcpy(t->shape, dims, (size_t)nd * sizeof *dims);
    desc->used = true;
    return QVL_OK;
}

/* Fill t from one header entry; name is the entry's key. */
static qvl_status parse_entry(qvl_safetensors *st, const char *name, const cJSON *e,
                              qvl_st_tensor *t, qvl_error *err) {
#define ENTRY_FAIL(code, ...)                                                                     \
    do {                                                                                          \
        char what_[512];                                                                          \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                               \
        return qvl_fail(err, code, "%s: tensor '%.200s': %s", st->path, name, what_);             \
    } while (0)

    if (!cJSON_IsObject(e)) ENTRY_FAIL(QVL_E_PARSE, "entry is not a JSON object");
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *kv = e->child; kv; kv = kv->next) {
        const char *k = kv->string ? kv->string : "";
        const cJSON **slot = !strcmp(k, "dtype")          ? &dtype
                             : !strcmp(k, "shape")        ? &shape
                             : !strcmp(k, "data_offsets") ? &offsets
                                                          : NULL;
        if (!slot) ENTRY_FAIL(QVL_E_PARSE, "unexpected key '%.100s'", k);
        if (*slot) ENTRY_FAIL(QVL_E_PARSE, "key '%s' appears twice", k);
        *slot = kv;
    }
    if (!dtype) ENTRY_FAIL(QVL_E_PARSE, "missing \"dtype\"");
    if (!shape) ENTRY_FAIL(QVL_E_PARSE, "missing \"shape\"");
    if (!offsets) ENTRY_FAIL(QVL_E_PARSE, "missing \"data_offsets\"");

    if (!cJSON_IsString(dtype) || !dtype->valuestring)
        ENTRY_FAIL(QVL_E_PARSE, "\"dtype\" is not a string");
    int found = -2;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(dtype->valuestring, st_dtypes[i].name)) found = st_dtypes[i].qvl;
    if (found == -2) ENTRY_FAIL(QVL_E_PARSE, "unknown dtype '%.40s'", dtype->valuestring);
    /* U8 holds a quantised tensor when __metadata__ describes it under "qvl:NAME" */
    meta_entry *quant = NULL;
    if (!strcmp(dtype->valuestring, "U8")) {
        size_t kn = strlen(QVL_ST_QUANT_PREFIX) + strlen(name) + 1;
        char *key = malloc(kn);
        if (!key) ENTRY_FAIL(QVL_E_NOMEM, "out of memory");
        snprintf(key, kn, "%s%s", QVL_ST_QUANT_PREFIX, name);
        quant = find_meta(st, key);
        free(key);
    }
    if (found == -1 && !quant)
        ENTRY_FAIL(QVL_E_UNSUPPORTED, "unsupported dtype '%s' (F32, F16 and BF16 are supported, "
                   "and U8 holding a quantised tensor that __metadata__ describes)",
                   dtype->valuestring);
    t->dtype = quant ? QVL_Q8_0 : (qvl_dtype)found; /* the real dtype is set by apply_quant */

    if (!cJSON_IsArray(shape)) ENTRY_FAIL(QVL_E_PARSE, "\"shape\" is not an array");
    int rank = cJSON_GetArraySize(shape);
    if (rank > QVL_ST_MAX_DIMS)
        ENTRY_FAIL(QVL_E_LIMIT, "rank %d exceeds the limit of %d", rank, QVL_ST_MAX_DIMS);
    t->ndim = rank;
    size_t nbytes = quant ? 1 : elem_bytes(t->dtype);
    bool overflow = false;
    int d = 0;
    for (const cJSON *v = shape->child; v; v = v->next, d++) {
        uint64_t dim;
        if (!json_uint(v, ST_MAX_INT, &dim))
            ENTRY_FAIL(QVL_E_PARSE, "shape[%d] is not an integer between 0 and 2^53", d);
        t->shape[d] = (int64_t)dim;
        if (dim > SIZE_MAX || !qvl_mul_size(nbytes, (size_t)dim, &nbytes)) overflow = true;
    }
    /* A zero dimension makes the size 0 whatever the other dimensions say. */
    for (int i = 0; i < rank; i++)
        if (t->shape[i] == 0) overflow = false, nbytes = 0;
    if (overflow) ENTRY_FAIL(QVL_E_LIMIT, "shape is too large (size overflows)");

    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        ENTRY_FAIL(QVL_E_PARSE, "\"data_offsets\" is not an array of two integers");
    uint64_t begin, end;
    if (!json_uint(offsets->child, ST_MAX_INT, &begin) ||
        !json_uint(offsets->child->next, ST_MAX_INT, &end))
        ENTRY_FAIL(QVL_E_PARSE, "\"data_offsets\" are not integers between 0 and 2^53");
    if (begin > end)
        ENTRY_FAIL(QVL_E_PARSE, "data_offsets [%llu, %llu] end before they begin",
                   (unsigned long long)begin, (unsigned long long)end);
    if (end > st->data_size)
        ENTRY_FAIL(QVL_E_PARSE,
                   "data_offsets [%llu, %llu] run past the end of the data (%zu bytes)",
                   (unsigned long long)begin, (unsigned long long)end, st->data_size);
    if (end - begin != nbytes)
        ENTRY_FAIL(QVL_E_SHAPE, "data_offsets span %llu bytes but dtype %s and the shape need %llu",
                   (unsigned long long)(end - begin), dtype->valuestring,
                   (unsigned long long)nbytes);
    t->data = st->data + begin;
    t->nbytes = (size_t)nbytes;
    if (quant) {
        qvl_status qs = apply_quant(st, name, quant, t, err);
        if (qs != QVL_OK) return qs;
    }
    t->name = strdup(name);
    if (!t->name) ENTRY_FAIL(QVL_E_NOMEM, "out of memory");
    return QVL_OK;
#undef ENTRY_FAIL
}

static qvl_status parse_header(qvl_safetensors *st, const char *hdr, size_t n, qvl_error *err) {
    /* Before cJSON (which recurses per level and allocates 60-100 bytes per value) builds it: a
     * valid header nests 3 deep, its arrays are shapes (at most QVL_ST_MAX_DIMS) and offsets
     * (2), an entry object has 3 members and the metadata a few, so its values number at most
     * ST_VALUES_PER_ENTRY per top-level entry plus the metadata's: memory stays proportional to
     * the tensors it describes (a header of "0,0,0,..." is refused here, not after 4 GB). */
    qvl_json_shape sh;
    qvl_json_measure(hdr, n, &sh);
    const size_t keys = sh.root_members;
    if (sh.max_depth > ST_MAX_NESTING)
        return qvl_fail(err, QVL_E_LIMIT, "%s: header: JSON nests deeper than %d levels", st->path,
                        ST_MAX_NESTING);
    if (keys > QVL_ST_MAX_TENSORS + 1)
        return qvl_fail(err, QVL_E_LIMIT, "%s: header: %zu entries exceed the limit of %u tensors",
                        st->path, keys, QVL_ST_MAX_TENSORS);
    if (sh.max_array > ST_MAX_ARRAY)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: header: a JSON array of %zu elements (shapes have at most %d)",
                        st->path, sh.max_array, QVL_ST_MAX_DIMS);
    if (sh.max_members > ST_MAX_META)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: header: a JSON object of %zu members (at most %d metadata entries)",
                        st->path, sh.max_members, ST_MAX_META);
    if (sh.values > ST_VALUES_PER_ENTRY * keys + ST_MAX_META + 1)
        return qvl_fail(err, QVL_E_LIMIT, "%s: header: %zu JSON values for %zu entries", st->path,
                        sh.values, keys);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + n ? (size_t)(end - hdr) : 0;
        return qvl_fail(err, QVL_E_PARSE, "%s: header: not valid JSON (near byte %zu of %zu)",
                        st->path, at, n);
    }
    qvl_status s = QVL_OK;
    for (const char *p = end; p && p < hdr + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = qvl_fail(err, QVL_E_PARSE,
                         "%s: header: unexpected bytes after the JSON object (byte %zu)", st->path,
                         (size_t)(p - hdr));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        s = qvl_fail(err, QVL_E_PARSE, "%s: header: not a JSON object", st->path);
        goto done;
    }
    size_t count = 0;
    for (const cJSON *e = root->child; e; e = e->next) count++;
    if (count > QVL_ST_MAX_TENSORS + 1) {
        s = qvl_fail(err, QVL_E_LIMIT, "%s: header: %zu entries exceed the limit of %u tensors",
                     st->path, count, QVL_ST_MAX_TENSORS);
        goto done;
    }
    st->tensors = calloc(count ? count : 1, sizeof *st->tensors);
    st->by_name = calloc(count ? count : 1, sizeof *st->by_name);
    if (!st->tensors || !st->by_name) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: header: out of memory", st->path);
        goto done;
    }
    /* The metadata first: it describes the quantised tensors, wherever it sits. */
    bool seen_meta = false;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!e->string || strcmp(e->string, "__metadata__")) continue;
        if (seen_meta) {
            s = qvl_fail(err, QVL_E_PARSE, "%s: header: __metadata__ appears twice", st->path);
            goto done;
        }
        seen_meta = true;
        if ((s = parse_metadata(st, e, err)) != QVL_OK) goto done;
    }
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *name = e->string ? e->string : "";
        if (!strcmp(name, "__metadata__")) continue;
        if (!*name) {
            s = qvl_fail(err, QVL_E_PARSE, "%s: header: a tensor has an empty name", st->path);
            goto done;
        }
        if ((s = parse_entry(st, name, e, &st->tensors[st->n_tensors], err)) != QVL_OK) goto done;
        st->n_tensors++;
    }
    if (st->n_tensors > QVL_ST_MAX_TENSORS) {
        s = qvl_fail(err, QVL_E_LIMIT, "%s: header: %zu tensors exceed the limit of %u", st->path,
                     st->n_tensors, QVL_ST_MAX_TENSORS);
        goto done;
    }
    /* A description no U8 tensor took would mean a tensor read in the wrong format. */
    const size_t np = strlen(QVL_ST_QUANT_PREFIX);
    for (size_t i = 0; i < st->n_meta; i++)
        if (!strncmp(st->meta[i].key, QVL_ST_QUANT_PREFIX, np) && !st->meta[i].used) {
            s = qvl_fail(err, QVL_E_PARSE, "%s: header: __metadata__ '%.200s' describes no U8 "
                         "tensor of that name", st->path, st->meta[i].key);
            goto done;
        }
done:
    cJSON_Delete(root);
    return s;
}

/* Names must be unique (cJSON keeps duplicate keys) and byte ranges must not overlap. */
static qvl_status check_layout(qvl_safetensors *st, qvl_error *err) {
    size_t n = st->n_tensors;
    for (size_t i = 0; i < n; i++) st->by_name[i] = &st->tensors[i];
    qsort(st->by_name, n, sizeof *st->by_name, cmp_tensor_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(st->by_name[i - 1]->name, st->by_name[i]->name))
            return qvl_fail(err, QVL_E_PARSE, "%s: tensor '%.200s': appears twice in the header",
                            st->path, st->by_name[i]->name);

    const qvl_st_tensor **by_pos = malloc((n ? n : 1) * sizeof *by_pos);
    if (!by_pos) return qvl_fail(err, QVL_E_NOMEM, "%s: header: out of memory", st->path);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (st->tensors[i].nbytes) by_pos[m++] = &st->tensors[i];
    qsort(by_pos, m, sizeof *by_pos, cmp_tensor_begin);
    qvl_status s = QVL_OK;
    for (size_t i = 1; i < m; i++) {
        const qvl_st_tensor *a = by_pos[i - 1], *b = by_pos[i];
        if ((const unsigned char *)a->data + a->nbytes > (const unsigned char *)b->data) {
            s = qvl_fail(err, QVL_E_PARSE, "%s: tensor '%.200s': data overlaps tensor '%.200s'",
                         st->path, b->name, a->name);
            break;
        }
    }
    free(by_pos);
    return s;
}

qvl_status qvl_safetensors_open(const char *path, qvl_safetensors **out, qvl_error *err) {
    if (!path || !out) return qvl_fail(err, QVL_E_INVALID, "safetensors: no path or output given");
    *out = NULL;
    qvl_safetensors *st = calloc(1, sizeof *st);
    if (st) st->map_slot = -1; /* not registered until mapped */
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    }
    char *hdr = NULL;
    unsigned char *map;
    qvl_status s = qvl_mapped_open(path, &map, &st->map_size, &st->map_slot, err);
    st->map = map;
    if (s != QVL_OK) goto fail;
    size_t size = st->map_size;
    if (size < 8) {
        s = qvl_fail(err, QVL_E_PARSE,
                     "%s: header: file is %zu bytes, shorter than the 8-byte header length", path,
                     size);
        goto fail;
    }

    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | st->map[i];
    if (n > QVL_ST_MAX_HEADER_BYTES) {
        s = qvl_fail(err, QVL_E_LIMIT, "%s: header: length %llu exceeds the limit of %llu bytes",
                     path, (unsigned long long)n, (unsigned long long)QVL_ST_MAX_HEADER_BYTES);
        goto fail;
    }
    if (n > size - 8) {
        s = qvl_fail(err, QVL_E_PARSE,
                     "%s: header: length %llu runs past the end of the file (%zu bytes)", path,
                     (unsigned long long)n, size);
        goto fail;
    }
    st->data = st->map + 8 + n;
    st->data_size = size - 8 - (size_t)n;
    /* A private NUL-terminated copy: the JSON parser then never reads past the header. */
    hdr = malloc((size_t)n + 1);
    if (!hdr) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: header: out of memory", path);
        goto fail;
    }
    memcpy(hdr, st->map + 8, (size_t)n);
    hdr[n] = '\0';
    if ((s = parse_header(st, hdr, (size_t)n, err)) != QVL_OK) goto fail;
    if ((s = check_layout(st, err)) != QVL_OK) goto fail;
    free(hdr);
    *out = st;
    return QVL_OK;
fail:
    free(hdr);
    qvl_safetensors_close(st);
    return s;
}

const char *qvl_safetensors_path(const qvl_safetensors *st) {
    return st ? st->path : NULL;
}

size_t qvl_safetensors_count(const qvl_safetensors *st) {
    return st ? st->n_tensors : 0;
}

const qvl_st_tensor *qvl_safetensors_at(const qvl_safetensors *st, size_t i) {
    return st && i < st->n_tensors ? &st->tensors[i] : NULL;
}

const qvl_st_tensor *qvl_safetensors_find(const qvl_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    qvl_st_tensor key = {.name = name};
    const qvl_st_tensor *kp = &key;
    const qvl_st_tensor **hit =
        bsearch(&kp, st->by_name, st->n_tensors, sizeof *st->by_name, cmp_tensor_name);
    return hit ? *hit : NULL;
}

const char *qvl_safetensors_metadata(const qvl_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    const meta_entry *e = find_meta(st, key);
    return e ? e->value : NULL;
}
