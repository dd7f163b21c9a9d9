/* qvl's GGUF reader and dequantisers against gguf-py: the file tests/gguf_dequant_make.py
 * writes (run by it: `test_gguf_dequant FILE.gguf`).
 *
 * Checks, for every tensor type in the file's "test.types": the tensor's type, shapes and size;
 * qvl_ggml_to_f32 equal bit for bit to gguf-py's dequantisation ("NAME.expect"); for the native
 * types, core's own dtype reading the bytes in place gives the same bits (qvl's q8_0/q4_k/q6_k
 * have GGUF's layout); the conversion to the backend dtype qvl_ggml_convert_target picks, exact
 * (zero error, same bits) where the header promises it, and its relative RMS error (printed).
 * Also every metadata value gguf-py wrote, through the typed getters. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/ggml_types.h"
#include "qvl/gguf.h"

static int failures;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                      \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fprintf(stderr, "\n");                                                                \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)

static void check_metadata(const qvl_gguf *g) {
    qvl_error err = {0};
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    qvl_gguf_str s;
    CHECK(qvl_gguf_get_uint(g, "test.u8", 255, &u, &err) == QVL_OK && u == 200, "%s", err.msg);
    CHECK(qvl_gguf_get_int(g, "test.i8", &i, &err) == QVL_OK && i == -100, "%s", err.msg);
    CHECK(qvl_gguf_get_uint(g, "test.u16", UINT64_MAX, &u, &err) == QVL_OK && u == 60000, "%s", err.msg);
    CHECK(qvl_gguf_get_int(g, "test.i16", &i, &err) == QVL_OK && i == -30000, "%s", err.msg);
    CHECK(qvl_gguf_get_uint(g, "test.u32", UINT64_MAX, &u, &err) == QVL_OK && u == 4000000000u,
          "%s", err.msg);
    CHECK(qvl_gguf_get_int(g, "test.i32", &i, &err) == QVL_OK && i == -2000000000, "%s", err.msg);
    CHECK(qvl_gguf_get_float(g, "test.f32", &f, &err) == QVL_OK && f == 0.15625, "%s", err.msg);
    CHECK(qvl_gguf_get_bool(g, "test.bool", &b, &err) == QVL_OK && b, "%s", err.msg);
    CHECK(qvl_gguf_get_str(g, "test.string", &s, &err) == QVL_OK &&
              qvl_gguf_str_eq(s, "Qwen3-VL \xc3\xa9\xe4\xb8\xad"), "%s", err.msg);
    CHECK(qvl_gguf_get_uint(g, "test.u64", UINT64_MAX, &u, &err) == QVL_OK &&
              u == ((uint64_t)1 << 63) + 5, "%s", err.msg);
    CHECK(qvl_gguf_get_int(g, "test.u64", &i, &err) == QVL_E_INVALID, "u64 beyond int64");
    CHECK(qvl_gguf_get_int(g, "test.i64", &i, &err) == QVL_OK && i == -((int64_t)1 << 62), "%s", err.msg);
    CHECK(qvl_gguf_get_float(g, "test.f64", &f, &err) == QVL_OK && f == -1.0e300, "%s", err.msg);
    CHECK(qvl_gguf_get_str(g, "general.architecture", &s, &err) == QVL_OK &&
              qvl_gguf_str_eq(s, "qvltest"), "%s", err.msg);

    const qvl_gguf_value *a;
    const char *strs[] = {"a", "", "\xc4\xa0the", "x y"};
    CHECK(qvl_gguf_get_array(g, "test.strings", QVL_GGUF_STRING, &a, &err) == QVL_OK &&
              a->v.arr.count == 4, "%s", err.msg);
    for (uint64_t k = 0; k < 4; k++)
        CHECK(qvl_gguf_arr_str(a, k, &s) && qvl_gguf_str_eq(s, strs[k]), "string %llu",
              (unsigned long long)k);
    CHECK(!qvl_gguf_arr_str(a, 4, &s), "past the end");
    CHECK(qvl_gguf_get_array(g, "test.ints", QVL_GGUF_I32, &a, &err) == QVL_OK, "%s", err.msg);
    CHECK(qvl_gguf_arr_int(a, 0, &i) && i == 1 && qvl_gguf_arr_int(a, 1, &i) && i == -2 &&
              qvl_gguf_arr_int(a, 2, &i) && i == 3 && !qvl_gguf_arr_int(a, 3, &i), "ints");
    CHECK(qvl_gguf_get_array(g, "test.floats", QVL_GGUF_F32, &a, &err) == QVL_OK, "%s", err.msg);
    CHECK(qvl_gguf_arr_float(a, 0, &f) && f == 0.5 && qvl_gguf_arr_float(a, 1, &f) && f == -2.25,
          "floats");
    CHECK(qvl_gguf_get_array(g, "test.nested", QVL_GGUF_ARRAY, &a, &err) == QVL_OK &&
              a->v.arr.count == 2, "%s", err.msg);
    const qvl_gguf_value *in0 = qvl_gguf_arr_item(a, 0), *in1 = qvl_gguf_arr_item(a, 1);
    CHECK(in0 && in1 && in0->v.arr.count == 2 && in1->v.arr.count == 1, "nested counts");
    CHECK(in0 && qvl_gguf_arr_str(in0, 1, &s) && qvl_gguf_str_eq(s, "q"), "nested[0][1]");
    CHECK(in1 && qvl_gguf_arr_str(in1, 0, &s) && qvl_gguf_str_eq(s, "r"), "nested[1][0]");

    /* wrong types are one line naming the key and the type found */
    CHECK(qvl_gguf_get_uint(g, "test.string", 10, &u, &err) == QVL_E_DTYPE &&
              strstr(err.msg, "key 'test.string' has type string, not an unsigned integer"),
          "%s", err.msg);
    CHECK(qvl_gguf_get_str(g, "test.nested", &s, &err) == QVL_E_DTYPE &&
              strstr(err.msg, "has type array of array"), "%s", err.msg);
    CHECK(qvl_gguf_get_uint(g, "test.u16", 100, &u, &err) == QVL_E_INVALID &&
              strstr(err.msg, "60000, outside 0..100"), "%s", err.msg);
    CHECK(qvl_gguf_get_bool(g, "test.absent", &b, &err) == QVL_E_NOT_FOUND &&
              strstr(err.msg, "key 'test.absent' is missing"), "%s", err.msg);
}

static bool exact_conversion(uint32_t type) {
    return type == QVL_GGML_Q4_0 || type == QVL_GGML_Q5_0 || type == QVL_GGML_IQ4_NL;
}

static void check_type(const qvl_gguf *g, const char *name, int64_t rows, int64_t cols) {
    char ename[64];
    snprintf(ename, sizeof ename, "%s.expect", name);
    const qvl_gguf_tensor *t = qvl_gguf_tensor_find(g, name), *e = qvl_gguf_tensor_find(g, ename);
    CHECK(t && e, "tensor %s or its .expect missing", name);
    if (!t || !e) return;
    char lower[16] = {0};
    for (size_t k = 0; k < sizeof lower - 1 && t->info->name[k]; k++)
        lower[k] = (char)tolower((unsigned char)t->info->name[k]);
    CHECK(!strcmp(lower, name), "%s has type %s", name, t->info->name);
    CHECK(t->ndim == 2 && t->ne[0] == cols && t->ne[1] == rows && t->shape[0] == rows &&
              t->shape[1] == cols && t->nelems == rows * cols, "%s shape", name);
    uint64_t want_bytes;
    CHECK(qvl_ggml_row_bytes(t->type, cols, &want_bytes) && t->nbytes == want_bytes * rows,
          "%s: %zu bytes", name, t->nbytes);
    CHECK(e->type == QVL_GGML_F32 && e->nelems == rows * cols, "%s.expect", name);
    CHECK((uintptr_t)t->data % 32 == 0, "%s data aligned", name);

    size_t n = (size_t)(rows * cols);
    float *got = malloc(n * sizeof *got), *back = malloc(n * sizeof *back);
    void *conv = malloc(n * sizeof(float));
    if (!got || !back || !conv) abort();
    CHECK(qvl_ggml_to_f32(t->type, t->data, got, (int64_t)n), "%s dequantises", name);
    size_t bad = 0, first = n;
    for (size_t k = 0; k < n; k++)
        if (memcmp(&got[k], (const float *)e->data + k, sizeof(float))) bad++, first = first < k ? first : k;
    CHECK(bad == 0, "%s: %zu values differ from gguf-py's, first [%zu] %.9g vs %.9g", name, bad,
          first, first < n ? got[first] : 0.0, first < n ? ((const float *)e->data)[first] : 0.0);

    qvl_dtype dt;
    CHECK(qvl_ggml_convert_target(t->type, cols, &dt), "%s has a target", name);
    if (t->info->support == QVL_GGML_NATIVE) {
        /* the bytes in place, read as the qvl dtype (the data is aligned) */
        CHECK(dt == t->info->native, "%s native dtype", name);
        qvl_to_f32(dt, t->data, back, (int64_t)n);
        CHECK(!memcmp(back, e->data, n * sizeof(float)), "%s read in place as %s", name,
              qvl_dtype_name(dt));
        printf("%-7s native %s\n", t->info->name, qvl_dtype_name(dt));
    } else {
        qvl_ggml_convert_error ce = {0};
        qvl_error err = {0};
        CHECK(qvl_ggml_convert(name, t->type, t->data, rows, cols, dt, conv, &ce, &err) == QVL_OK,
              "%s", err.msg);
        double rel = qvl_ggml_rel_rms(&ce);
        qvl_to_f32(dt, conv, back, (int64_t)n);
        if (exact_conversion(t->type)) {
            CHECK(dt == QVL_Q8_0 && rel == 0.0, "%s -> %s: error %g", name, qvl_dtype_name(dt), rel);
            CHECK(!memcmp(back, e->data, n * sizeof(float)), "%s -> q8_0 is not exact", name);
        } else {
            CHECK(rel > 0 && rel < 0.2, "%s -> %s: error %g", name, qvl_dtype_name(dt), rel);
        }
        printf("%-7s -> %-4s relative RMS error %.3g\n", t->info->name, qvl_dtype_name(dt), rel);
    }
    free(got);
    free(back);
    free(conv);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_gguf_dequant FILE.gguf (written by tests/gguf_dequant_make.py)\n");
        return 2;
    }
    qvl_gguf *g = NULL;
    qvl_error err = {0};
    if (qvl_gguf_open(argv[1], &g, &err) != QVL_OK) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    CHECK(qvl_gguf_version(g) == 3 && qvl_gguf_alignment(g) == 32, "version/alignment");
    check_metadata(g);
    uint64_t rows = 0, cols = 0;
    const qvl_gguf_value *types;
    CHECK(qvl_gguf_get_uint(g, "test.rows", 1 << 20, &rows, &err) == QVL_OK, "%s", err.msg);
    CHECK(qvl_gguf_get_uint(g, "test.cols", 1 << 20, &cols, &err) == QVL_OK, "%s", err.msg);
    if (qvl_gguf_get_array(g, "test.types", QVL_GGUF_STRING, &types, &err) == QVL_OK) {
        CHECK(types->v.arr.count == 15, "%llu types", (unsigned long long)types->v.arr.count);
        for (uint64_t k = 0; k < types->v.arr.count; k++) {
            qvl_gguf_str s;
            char name[32] = {0};
            if (qvl_gguf_arr_str(types, k, &s) && s.len < sizeof name) memcpy(name, s.ptr, s.len);
            check_type(g, name, (int64_t)rows, (int64_t)cols);
        }
    } else {
        CHECK(0, "%s", err.msg);
    }
    CHECK(qvl_gguf_tensor_count(g) == 30, "%zu tensors", qvl_gguf_tensor_count(g));
    qvl_gguf_close(g);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("all %s checks passed\n", argv[1]);
    return failures ? 1 : 0;
}
