/* Fuzz target: the GGUF reader (header, metadata, tensor infos, data layout) and the tensor
 * types behind it. The reader maps a path, so each input is written to one memfd reopened
 * through /proc/self/fd. Every metadata value is walked (strings and scalar array elements
 * read through the accessors), every tensor byte is read, and small tensors of the types qvl
 * reads are dequantised and converted to their backend dtype, so a pointer, count or size that
 * reaches past the mapping shows up as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "fuzz_file.h"
#include "qvl/gguf.h"

#define MAX_DEQUANT_ELEMS (1 << 16)

static fuzz_file input_file = FUZZ_FILE_INIT;

static unsigned walk(const qvl_gguf_value *v, int depth) {
    unsigned sum = 0;
    FUZZ_CHECK(depth < QVL_GGUF_MAX_NESTING);
    if (v->type == QVL_GGUF_STRING) {
        for (uint64_t i = 0; i < v->v.s.len; i++) sum += (unsigned char)v->v.s.ptr[i];
        return sum;
    }
    if (v->type != QVL_GGUF_ARRAY) return (unsigned)v->v.u;
    for (uint64_t i = 0; i < v->v.arr.count; i++) {
        int64_t n;
        double f;
        qvl_gguf_str s;
        const qvl_gguf_value *item = qvl_gguf_arr_item(v, i);
        if (item) sum += walk(item, depth + 1);
        else if (qvl_gguf_arr_str(v, i, &s))
            for (uint64_t k = 0; k < s.len; k++) sum += (unsigned char)s.ptr[k];
        else if (qvl_gguf_arr_int(v, i, &n)) sum += (unsigned)n;
        else if (qvl_gguf_arr_float(v, i, &f)) sum += f > 0;
        else FUZZ_CHECK(v->v.arr.type == QVL_GGUF_BOOL || v->v.arr.type == QVL_GGUF_U64);
    }
    FUZZ_CHECK(qvl_gguf_arr_item(v, v->v.arr.count) == NULL);
    return sum;
}

static void dequantise(const qvl_gguf_tensor *t) {
    if (t->nelems > MAX_DEQUANT_ELEMS || t->ndim < 1) return;
    qvl_dtype to;
    if (!qvl_ggml_convert_target(t->type, t->ne[0], &to)) {
        FUZZ_CHECK(t->info->support == QVL_GGML_REFUSED);
        return;
    }
    float *f = malloc((size_t)(t->nelems ? t->nelems : 1) * sizeof *f);
    if (!f) abort();
    if (t->type != QVL_GGML_I32) FUZZ_CHECK(qvl_ggml_to_f32(t->type, t->data, f, t->nelems));
    if (t->info->support == QVL_GGML_CONVERTED) {
        size_t row_bytes;
        FUZZ_CHECK(qvl_dtype_row_bytes(to, t->ne[0], &row_bytes));
        int64_t rows = t->ne[0] ? t->nelems / t->ne[0] : 0;
        void *dst = malloc(row_bytes * (size_t)rows + 1);
        if (!dst) abort();
        qvl_error err = {0};
        qvl_ggml_convert_error ce = {0};
        qvl_status s = qvl_ggml_convert(t->name, t->type, t->data, rows, t->ne[0], to, dst, &ce, &err);
        if (s != QVL_OK) {
            fuzz_check_error(s, &err);
            FUZZ_CHECK(s == QVL_E_INVALID); /* a NaN or Inf scale */
        } else {
            FUZZ_CHECK(qvl_ggml_rel_rms(&ce) >= 0);
        }
        free(dst);
    }
    free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_as_file(&input_file, "qvl-fuzz-gguf", data, size);
    if (!path) {
        perror("fuzz_gguf: memfd");
        abort(); /* the harness itself failed: not a finding in the reader */
    }
    qvl_gguf *g = NULL;
    qvl_error err = {0};
    qvl_status s = qvl_gguf_open(path, &g, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        FUZZ_CHECK(g == NULL);
        return 0;
    }
    unsigned sum = 0;
    uint32_t align = qvl_gguf_alignment(g);
    FUZZ_CHECK(align && !(align & (align - 1)));
    for (size_t i = 0; i < qvl_gguf_kv_count(g); i++) {
        const qvl_gguf_kv *kv = qvl_gguf_kv_at(g, i);
        FUZZ_CHECK(kv && kv->key && kv->key[0]);
        FUZZ_CHECK(qvl_gguf_find(g, kv->key) == &kv->value);
        sum += walk(&kv->value, 0);
    }
    FUZZ_CHECK(qvl_gguf_kv_at(g, qvl_gguf_kv_count(g)) == NULL);
    uint64_t u;
    (void)qvl_gguf_get_uint(g, "general.alignment", UINT32_MAX, &u, &err);
    for (size_t i = 0; i < qvl_gguf_tensor_count(g); i++) {
        const qvl_gguf_tensor *t = qvl_gguf_tensor_at(g, i);
        FUZZ_CHECK(t && t->name && t->info && t->ndim >= 0 && t->ndim <= QVL_GGUF_MAX_DIMS);
        FUZZ_CHECK(qvl_gguf_tensor_find(g, t->name) == t);
        FUZZ_CHECK(t->offset % align == 0);
        uint64_t row;
        FUZZ_CHECK(qvl_ggml_row_bytes(t->type, t->ne[0], &row));
        FUZZ_CHECK(t->nelems == 0 ? t->nbytes == 0 : t->nbytes == row * (uint64_t)(t->nelems / t->ne[0]));
        const unsigned char *p = t->data;
        for (size_t b = 0; b < t->nbytes; b++) sum += p[b]; /* touch every byte */
        dequantise(t);
    }
    FUZZ_CHECK(qvl_gguf_tensor_at(g, qvl_gguf_tensor_count(g)) == NULL);
    qvl_gguf_close(g);
    volatile unsigned sink = sum;
    (void)sink;
    return 0;
}
