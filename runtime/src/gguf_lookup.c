/* GGUF reader queries: metadata by key with typed getters, array elements, tensors by name
 * (qvl/gguf.h). Nothing here reads past what gguf_read.c validated. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_internal.h"

static const char *const type_names[QVL_GGUF_TYPE_COUNT] = {
    [QVL_GGUF_U8] = "u8",     [QVL_GGUF_I8] = "i8",         [QVL_GGUF_U16] = "u16",
    [QVL_GGUF_I16] = "i16",   [QVL_GGUF_U32] = "u32",       [QVL_GGUF_I32] = "i32",
    [QVL_GGUF_F32] = "f32",   [QVL_GGUF_BOOL] = "bool",     [QVL_GGUF_STRING] = "string",
    [QVL_GGUF_ARRAY] = "array", [QVL_GGUF_U64] = "u64",     [QVL_GGUF_I64] = "i64",
    [QVL_GGUF_F64] = "f64",
};

const char *qvl_gguf_type_name(qvl_gguf_type t) {
    return (unsigned)t < QVL_GGUF_TYPE_COUNT ? type_names[t] : "?";
}

const char *qvl_gguf_path(const qvl_gguf *g) { return g ? g->path : NULL; }
uint32_t qvl_gguf_version(const qvl_gguf *g) { return g ? g->version : 0; }
uint32_t qvl_gguf_alignment(const qvl_gguf *g) { return g ? g->alignment : 0; }
uint64_t qvl_gguf_data_offset(const qvl_gguf *g) { return g ? g->data_offset : 0; }
size_t qvl_gguf_kv_count(const qvl_gguf *g) { return g ? g->n_kv : 0; }
size_t qvl_gguf_tensor_count(const qvl_gguf *g) { return g ? g->n_tensors : 0; }

const qvl_gguf_kv *qvl_gguf_kv_at(const qvl_gguf *g, size_t i) {
    return g && i < g->n_kv ? &g->kvs[i] : NULL;
}

const qvl_gguf_tensor *qvl_gguf_tensor_at(const qvl_gguf *g, size_t i) {
    return g && i < g->n_tensors ? &g->tensors[i] : NULL;
}

static int cmp_key(const void *k, const void *e) {
    return strcmp(k, (*(const qvl_gguf_kv *const *)e)->key);
}

static int cmp_name(const void *k, const void *e) {
    return strcmp(k, (*(const qvl_gguf_tensor *const *)e)->name);
}

const qvl_gguf_value *qvl_gguf_find(const qvl_gguf *g, const char *key) {
    if (!g || !key || !g->n_kv) return NULL;
    const qvl_gguf_kv *const *hit = bsearch(key, g->kv_by_key, g->n_kv, sizeof *g->kv_by_key, cmp_key);
    return hit ? &(*hit)->value : NULL;
}

const qvl_gguf_tensor *qvl_gguf_tensor_find(const qvl_gguf *g, const char *name) {
    if (!g || !name || !g->n_tensors) return NULL;
    const qvl_gguf_tensor *const *hit =
        bsearch(name, g->by_name, g->n_tensors, sizeof *g->by_name, cmp_name);
    return hit ? *hit : NULL;
}

char *qvl_gguf_str_dup(qvl_gguf_str s) {
    if (s.len >= SIZE_MAX) return NULL;
    char *p = malloc((size_t)s.len + 1);
    if (!p) return NULL;
    if (s.len) memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

bool qvl_gguf_str_eq(qvl_gguf_str s, const char *text) {
    return text && strlen(text) == s.len && (!s.len || !memcmp(s.ptr, text, (size_t)s.len));
}

/* ---- typed getters ------------------------------------------------------------------------ */

static bool is_int(qvl_gguf_type t) {
    return t == QVL_GGUF_U8 || t == QVL_GGUF_I8 || t == QVL_GGUF_U16 || t == QVL_GGUF_I16 ||
           t == QVL_GGUF_U32 || t == QVL_GGUF_I32 || t == QVL_GGUF_U64 || t == QVL_GGUF_I64;
}

static bool is_signed(qvl_gguf_type t) {
    return t == QVL_GGUF_I8 || t == QVL_GGUF_I16 || t == QVL_GGUF_I32 || t == QVL_GGUF_I64;
}

/* "u32", "array of string", for messages. */
static void describe(const qvl_gguf_value *v, char *buf, size_t cap) {
    if (v->type == QVL_GGUF_ARRAY)
        snprintf(buf, cap, "array of %s", qvl_gguf_type_name(v->v.arr.type));
    else
        snprintf(buf, cap, "%s", qvl_gguf_type_name(v->type));
}

static qvl_status lookup(const qvl_gguf *g, const char *key, const qvl_gguf_value **v,
                         qvl_error *err) {
    if (!g || !key) return qvl_fail(err, QVL_E_INVALID, "gguf: no file or key given");
    *v = qvl_gguf_find(g, key);
    if (!*v) return qvl_fail(err, QVL_E_NOT_FOUND, "%s: key '%.200s' is missing", g->path, key);
    return QVL_OK;
}

static qvl_status wrong_type(const qvl_gguf *g, const char *key, const qvl_gguf_value *v,
                             const char *wanted, qvl_error *err) {
    char found[64];
    describe(v, found, sizeof found);
    return qvl_fail(err, QVL_E_DTYPE, "%s: key '%.200s' has type %s, not %s", g->path, key, found,
                    wanted);
}

qvl_status qvl_gguf_get_uint(const qvl_gguf *g, const char *key, uint64_t max, uint64_t *out,
                             qvl_error *err) {
    const qvl_gguf_value *v;
    qvl_status s = lookup(g, key, &v, err);
    if (s != QVL_OK) return s;
    if (!is_int(v->type)) return wrong_type(g, key, v, "an unsigned integer", err);
    if (is_signed(v->type) ? v->v.i < 0 || (uint64_t)v->v.i > max : v->v.u > max) {
        char val[32];
        if (is_signed(v->type)) snprintf(val, sizeof val, "%lld", (long long)v->v.i);
        else snprintf(val, sizeof val, "%llu", (unsigned long long)v->v.u);
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%.200s' is %s, outside 0..%llu", g->path, key,
                        val, (unsigned long long)max);
    }
    *out = is_signed(v->type) ? (uint64_t)v->v.i : v->v.u;
    return QVL_OK;
}

qvl_status qvl_gguf_get_int(const qvl_gguf *g, const char *key, int64_t *out, qvl_error *err) {
    const qvl_gguf_value *v;
    qvl_status s = lookup(g, key, &v, err);
    if (s != QVL_OK) return s;
    if (!is_int(v->type)) return wrong_type(g, key, v, "an integer", err);
    if (!is_signed(v->type) && v->v.u > (uint64_t)INT64_MAX)
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%.200s' is %llu, beyond a signed 64-bit "
                        "integer", g->path, key, (unsigned long long)v->v.u);
    *out = is_signed(v->type) ? v->v.i : (int64_t)v->v.u;
    return QVL_OK;
}

qvl_status qvl_gguf_get_float(const qvl_gguf *g, const char *key, double *out, qvl_error *err) {
    const qvl_gguf_value *v;
    qvl_status s = lookup(g, key, &v, err);
    if (s != QVL_OK) return s;
    if (v->type != QVL_GGUF_F32 && v->type != QVL_GGUF_F64)
        return wrong_type(g, key, v, "a float (f32 or f64)", err);
    *out = v->v.f;
    return QVL_OK;
}

qvl_status qvl_gguf_get_bool(const qvl_gguf *g, const char *key, bool *out, qvl_error *err) {
    const qvl_gguf_value *v;
    qvl_status s = lookup(g, key, &v, err);
    if (s != QVL_OK) return s;
    if (v->type != QVL_GGUF_BOOL) return wrong_type(g, key, v, "a bool", err);
    *out = v->v.u != 0;
    return QVL_OK;
}

qvl_status qvl_gguf_get_str(const qvl_gguf *g, const char *key, qvl_gguf_str *out,
                            qvl_error *err) {
    const qvl_gguf_value *v;
    qvl_status s = lookup(g, key, &v, err);
    if (s != QVL_OK) return s;
    if (v->type != QVL_GGUF_STRING) return wrong_type(g, key, v, "a string", err);
    *out = v->v.s;
    return QVL_OK;
}

qvl_status qvl_gguf_get_array(const qvl_gguf *g, const char *key, qvl_gguf_type elem,
                              const qvl_gguf_value **out, qvl_error *err) {
    const qvl_gguf_value *v;
    qvl_status s = lookup(g, key, &v, err);
    if (s != QVL_OK) return s;
    if (v->type != QVL_GGUF_ARRAY || (elem != QVL_GGUF_TYPE_COUNT && v->v.arr.type != elem)) {
        char wanted[64];
        if (elem == QVL_GGUF_TYPE_COUNT) snprintf(wanted, sizeof wanted, "an array");
        else snprintf(wanted, sizeof wanted, "an array of %s", qvl_gguf_type_name(elem));
        return wrong_type(g, key, v, wanted, err);
    }
    *out = v;
    return QVL_OK;
}

/* ---- array elements ----------------------------------------------------------------------- */

static uint64_t raw_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static bool in_array(const qvl_gguf_value *a, uint64_t i) {
    return a && a->type == QVL_GGUF_ARRAY && i < a->v.arr.count;
}

bool qvl_gguf_arr_int(const qvl_gguf_value *a, uint64_t i, int64_t *out) {
    if (!in_array(a, i) || !is_int(a->v.arr.type)) return false;
    qvl_gguf_type t = a->v.arr.type;
    int bytes = t == QVL_GGUF_U8 || t == QVL_GGUF_I8 ? 1 : t == QVL_GGUF_U16 || t == QVL_GGUF_I16 ? 2
              : t == QVL_GGUF_U32 || t == QVL_GGUF_I32 ? 4 : 8;
    uint64_t r = raw_le(a->v.arr.raw + i * (uint64_t)bytes, bytes);
    if (!is_signed(t)) {
        if (r > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)r;
        return true;
    }
    *out = bytes == 1 ? (int8_t)r : bytes == 2 ? (int16_t)r : bytes == 4 ? (int32_t)r : (int64_t)r;
    return true;
}

bool qvl_gguf_arr_float(const qvl_gguf_value *a, uint64_t i, double *out) {
    if (!in_array(a, i)) return false;
    if (a->v.arr.type == QVL_GGUF_F32) {
        uint32_t b = (uint32_t)raw_le(a->v.arr.raw + 4 * i, 4);
        float f;
        memcpy(&f, &b, sizeof f);
        *out = f;
        return true;
    }
    if (a->v.arr.type == QVL_GGUF_F64) {
        uint64_t b = raw_le(a->v.arr.raw + 8 * i, 8);
        memcpy(out, &b, sizeof *out);
        return true;
    }
    return false;
}

bool qvl_gguf_arr_str(const qvl_gguf_value *a, uint64_t i, qvl_gguf_str *out) {
    if (!in_array(a, i) || a->v.arr.type != QVL_GGUF_STRING) return false;
    *out = a->v.arr.strs[i];
    return true;
}

const qvl_gguf_value *qvl_gguf_arr_item(const qvl_gguf_value *a, uint64_t i) {
    if (!in_array(a, i) || a->v.arr.type != QVL_GGUF_ARRAY) return NULL;
    return &a->v.arr.items[i];
}
