/* The GGUF writer (qvl/gguf_write.h), read back by qvl's reader (qvl/gguf.h): every value type,
 * tensors from buffers and from fill callbacks (chunked, in order, whole 256-element groups),
 * row-major shapes stored innermost first, 32-byte aligned data; copying a file's values through
 * qvl_gguf_writer_value reproduces it byte for byte; bad additions are refused in one line; a
 * failing fill leaves no file. gguf-py reads the writer's files in cli_quantize_gguf. */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/ggml_types.h"
#include "qvl/gguf.h"
#include "qvl/gguf_write.h"
#include "test_scratch_dir.h"

static int setup_dir(void **state) {
    (void)state;
    return scratch_dir_make("qvl-gguf-write");
}

static int teardown_dir(void **state) {
    (void)state;
    return scratch_dir_remove();
}

/* Element i of the fill tensors: a float pattern. */
static float pattern(uint64_t i) { return (float)(i % 1000) * 0.25f - 100.0f; }

typedef struct fill_log {
    uint64_t next;     /* the byte offset the next chunk must start at */
    int calls;
    bool fail;
} fill_log;

static qvl_status fill_f32(void *user, size_t index, uint64_t off, void *dst, size_t n,
                           qvl_error *err) {
    fill_log *l = user;
    (void)index;
    assert_int_equal(off, l->next);            /* consecutive, in order */
    assert_int_equal(off % (256 * 4), 0);      /* whole 256-element groups */
    assert_int_equal(n % 4, 0);
    l->next += n;
    l->calls++;
    if (l->fail) return qvl_fail(err, QVL_E_IO, "fill refused at byte %llu", (unsigned long long)off);
    float *f = dst;
    for (size_t i = 0; i < n / 4; i++) f[i] = pattern(off / 4 + i);
    return QVL_OK;
}

static const int32_t i32s[4] = {6, 5, -5, 0};
static const float f32s[3] = {0.5f, -1.25f, 3e-7f};
static const unsigned char bools[3] = {1, 0, 1};
static const char *const strs[3] = {"<|im_end|>", "", "h\0i"};
static const size_t str_lens[3] = {10, 0, 3};

#define BIG_ROWS 2
#define BIG_COLS (1 << 20) /* 8 MiB of f32: more than one 4 MiB chunk */

/* A writer holding one of everything; *log is the big tensor's fill. */
static qvl_gguf_writer *make_writer(fill_log *log, uint16_t *f16, unsigned char *q8) {
    qvl_error err = {0};
    qvl_gguf_writer *w = NULL;
    assert_int_equal(qvl_gguf_writer_new("test", &w, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_str(w, "general.architecture", "qwen3vl", 7, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_u32(w, "a.u32", 4096, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_f32(w, "a.f32", 1e-6f, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_bool(w, "a.bool", true, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_array(w, "a.i32s", QVL_GGUF_I32, i32s, 4, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_array(w, "a.f32s", QVL_GGUF_F32, f32s, 3, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_array(w, "a.bools", QVL_GGUF_BOOL, bools, 3, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_array(w, "a.empty", QVL_GGUF_U8, NULL, 0, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_str_array(w, "a.strs", strs, str_lens, 3, &err), QVL_OK);
    static const float vec[5] = {1, 2, 3, 4, 5};
    const int64_t s1[1] = {5}, s2[2] = {3, 4}, s4[4] = {2, 3, 1, 32}, sq[2] = {2, 64};
    const int64_t sb[2] = {BIG_ROWS, BIG_COLS};
    for (int i = 0; i < 12; i++) f16[i] = (uint16_t)(0x3c00 + i);
    for (int i = 0; i < 4 * 34; i++) q8[i] = (unsigned char)(i * 7);
    assert_int_equal(qvl_gguf_writer_add_tensor(w, "vec", QVL_GGML_F32, 1, s1, vec, NULL, NULL,
                                                &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_add_tensor(w, "mat", QVL_GGML_F16, 2, s2, f16, NULL, NULL,
                                                &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_add_tensor(w, "q8", QVL_GGML_Q8_0, 2, sq, q8, NULL, NULL,
                                                &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_add_tensor(w, "k4", QVL_GGML_F32, 4, s4, NULL, fill_f32,
                                                &log[0], &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_add_tensor(w, "big", QVL_GGML_F32, 2, sb, NULL, fill_f32,
                                                &log[1], &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_tensor_count(w), 5);
    assert_int_equal(qvl_gguf_writer_elements(w), 5 + 12 + 128 + 192 + BIG_ROWS * BIG_COLS);
    return w;
}

static void write_file(const qvl_gguf_writer *w, const char *path) {
    qvl_error err = {0};
    qvl_new_file f = {.fd = -1};
    assert_int_equal(qvl_new_file_open(path, &f, &err), QVL_OK);
    if (qvl_gguf_writer_write(w, &f, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(qvl_new_file_commit(&f, &err), QVL_OK);
}

static void check_tensor(const qvl_gguf *g, const char *name, uint32_t type, int ndim,
                         const int64_t *shape) {
    const qvl_gguf_tensor *t = qvl_gguf_tensor_find(g, name);
    assert_non_null(t);
    assert_int_equal(t->type, type);
    assert_int_equal(t->ndim, ndim);
    for (int d = 0; d < ndim; d++) {
        assert_int_equal(t->shape[d], shape[d]);
        assert_int_equal(t->ne[d], shape[ndim - 1 - d]); /* innermost first in the file */
    }
    assert_int_equal(t->offset % 32, 0);
}

static void read_file(const char *path, char **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(*len);
    assert_non_null(*data);
    assert_int_equal(fread(*data, 1, *len, f), *len);
    fclose(f);
}

static void test_round_trip(void **state) {
    (void)state;
    char path[512], copy[512];
    scratch_path(path, sizeof path, "all.gguf");
    scratch_path(copy, sizeof copy, "copy.gguf");
    fill_log log[2] = {{0}, {0}};
    uint16_t f16[12];
    unsigned char q8[4 * 34];
    qvl_gguf_writer *w = make_writer(log, f16, q8);
    write_file(w, path);
    qvl_gguf_writer_free(w);
    assert_int_equal(log[0].calls, 1);
    assert_int_equal(log[1].calls, 2);
    assert_int_equal(log[1].next, (uint64_t)BIG_ROWS * BIG_COLS * 4);

    qvl_error err = {0};
    qvl_gguf *g = NULL;
    if (qvl_gguf_open(path, &g, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(qvl_gguf_version(g), 3);
    assert_int_equal(qvl_gguf_alignment(g), 32);
    assert_int_equal(qvl_gguf_kv_count(g), 9);
    assert_string_equal(qvl_gguf_kv_at(g, 0)->key, "general.architecture");
    assert_string_equal(qvl_gguf_kv_at(g, 8)->key, "a.strs");
    uint64_t u = 0;
    double f = 0;
    bool b = false;
    qvl_gguf_str s;
    assert_int_equal(qvl_gguf_get_str(g, "general.architecture", &s, &err), QVL_OK);
    assert_true(qvl_gguf_str_eq(s, "qwen3vl"));
    assert_int_equal(qvl_gguf_find(g, "a.u32")->type, QVL_GGUF_U32);
    assert_int_equal(qvl_gguf_get_uint(g, "a.u32", UINT32_MAX, &u, &err), QVL_OK);
    assert_int_equal(u, 4096);
    assert_int_equal(qvl_gguf_find(g, "a.f32")->type, QVL_GGUF_F32);
    assert_int_equal(qvl_gguf_get_float(g, "a.f32", &f, &err), QVL_OK);
    assert_true(f == (double)1e-6f);
    assert_int_equal(qvl_gguf_get_bool(g, "a.bool", &b, &err), QVL_OK);
    assert_true(b);
    const qvl_gguf_value *a = NULL;
    assert_int_equal(qvl_gguf_get_array(g, "a.i32s", QVL_GGUF_I32, &a, &err), QVL_OK);
    for (uint64_t i = 0; i < 4; i++) {
        int64_t v = 0;
        assert_true(qvl_gguf_arr_int(a, i, &v));
        assert_int_equal(v, i32s[i]);
    }
    assert_int_equal(qvl_gguf_get_array(g, "a.f32s", QVL_GGUF_F32, &a, &err), QVL_OK);
    for (uint64_t i = 0; i < 3; i++) {
        assert_true(qvl_gguf_arr_float(a, i, &f));
        assert_true(f == (double)f32s[i]);
    }
    assert_int_equal(qvl_gguf_get_array(g, "a.bools", QVL_GGUF_BOOL, &a, &err), QVL_OK);
    assert_memory_equal(a->v.arr.raw, bools, 3);
    assert_int_equal(qvl_gguf_get_array(g, "a.empty", QVL_GGUF_U8, &a, &err), QVL_OK);
    assert_int_equal(a->v.arr.count, 0);
    assert_int_equal(qvl_gguf_get_array(g, "a.strs", QVL_GGUF_STRING, &a, &err), QVL_OK);
    for (uint64_t i = 0; i < 3; i++) {
        assert_true(qvl_gguf_arr_str(a, i, &s));
        assert_int_equal(s.len, str_lens[i]);
        assert_memory_equal(s.ptr, strs[i], str_lens[i]);
    }

    const int64_t s1[1] = {5}, s2[2] = {3, 4}, s4[4] = {2, 3, 1, 32}, sq[2] = {2, 64};
    const int64_t sb[2] = {BIG_ROWS, BIG_COLS};
    check_tensor(g, "vec", QVL_GGML_F32, 1, s1);
    check_tensor(g, "mat", QVL_GGML_F16, 2, s2);
    check_tensor(g, "q8", QVL_GGML_Q8_0, 2, sq);
    check_tensor(g, "k4", QVL_GGML_F32, 4, s4);
    check_tensor(g, "big", QVL_GGML_F32, 2, sb);
    assert_memory_equal(qvl_gguf_tensor_find(g, "mat")->data, f16, sizeof f16);
    assert_memory_equal(qvl_gguf_tensor_find(g, "q8")->data, q8, sizeof q8);
    const float *big = qvl_gguf_tensor_find(g, "big")->data;
    for (uint64_t i = 0; i < (uint64_t)BIG_ROWS * BIG_COLS; i += 4099)
        assert_true(big[i] == pattern(i));
    assert_true(big[BIG_ROWS * BIG_COLS - 1] == pattern(BIG_ROWS * BIG_COLS - 1));

    /* every value and tensor copied into a second writer: the same file, byte for byte */
    qvl_gguf_writer *w2 = NULL;
    assert_int_equal(qvl_gguf_writer_new("copy", &w2, &err), QVL_OK);
    for (size_t i = 0; i < qvl_gguf_kv_count(g); i++) {
        const qvl_gguf_kv *kv = qvl_gguf_kv_at(g, i);
        if (qvl_gguf_writer_value(w2, kv->key, &kv->value, &err) != QVL_OK) fail_msg("%s", err.msg);
    }
    for (size_t i = 0; i < qvl_gguf_tensor_count(g); i++) {
        const qvl_gguf_tensor *t = qvl_gguf_tensor_at(g, i);
        assert_int_equal(qvl_gguf_writer_add_tensor(w2, t->name, t->type, t->ndim, t->shape,
                                                    t->data, NULL, NULL, &err), QVL_OK);
    }
    write_file(w2, copy);
    qvl_gguf_writer_free(w2);
    qvl_gguf_close(g);
    char *x, *y;
    size_t nx, ny;
    read_file(path, &x, &nx);
    read_file(copy, &y, &ny);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    assert_int_equal(nx % 32, 0); /* the data section ends padded */
    free(x);
    free(y);
}

static void expect(qvl_status got, qvl_status want, const qvl_error *err, const char *text) {
    assert_int_equal(got, want);
    if (!strstr(err->msg, text)) fail_msg("message '%s' lacks '%s'", err->msg, text);
    assert_null(strchr(err->msg, '\n'));
}

static void test_refused(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_gguf_writer *w = NULL;
    assert_int_equal(qvl_gguf_writer_new("bad.gguf", &w, &err), QVL_OK);
    assert_int_equal(qvl_gguf_writer_u32(w, "k", 1, &err), QVL_OK);
    expect(qvl_gguf_writer_u32(w, "k", 2, &err), QVL_E_INVALID, &err, "bad.gguf: key 'k' added twice");
    expect(qvl_gguf_writer_str(w, "", "x", 1, &err), QVL_E_INVALID, &err, "a metadata key must be");
    const unsigned char two[2] = {1, 2};
    expect(qvl_gguf_writer_array(w, "b", QVL_GGUF_BOOL, two, 2, &err), QVL_E_INVALID, &err,
           "bool element 1 is not 0 or 1");
    expect(qvl_gguf_writer_array(w, "c", QVL_GGUF_STRING, two, 2, &err), QVL_E_INVALID, &err,
           "arrays of string are written otherwise");
    const float data[64] = {0};
    const int64_t s[2] = {1, 48}, s5[5] = {1, 1, 1, 1, 32}, s1[1] = {32}, s0[2] = {0, 32};
    expect(qvl_gguf_writer_add_tensor(w, "t", QVL_GGML_Q8_0, 2, s, data, NULL, NULL, &err),
           QVL_E_SHAPE, &err, "tensor 't': rows of 48 values are not whole Q8_0 blocks of 32");
    expect(qvl_gguf_writer_add_tensor(w, "t", 4, 1, s1, data, NULL, NULL, &err), QVL_E_INVALID,
           &err, "unknown ggml type 4");
    expect(qvl_gguf_writer_add_tensor(w, "t", 999, 1, s1, data, NULL, NULL, &err),
           QVL_E_INVALID, &err, "unknown ggml type 999");
    expect(qvl_gguf_writer_add_tensor(w, "t", QVL_GGML_F32, 5, s5, data, NULL, NULL, &err),
           QVL_E_INVALID, &err, "5 dimensions");
    expect(qvl_gguf_writer_add_tensor(w, "t", QVL_GGML_F32, 2, s0, data, NULL, NULL, &err),
           QVL_E_INVALID, &err, "dimension 0 is 0");
    expect(qvl_gguf_writer_add_tensor(w, "t", QVL_GGML_F32, 1, s1, NULL, NULL, NULL, &err),
           QVL_E_INVALID, &err, "no data");
    assert_int_equal(qvl_gguf_writer_add_tensor(w, "t", QVL_GGML_F32, 1, s1, data, NULL, NULL,
                                                &err), QVL_OK);
    expect(qvl_gguf_writer_add_tensor(w, "t", QVL_GGML_F32, 1, s1, data, NULL, NULL, &err),
           QVL_E_INVALID, &err, "tensor 't' added twice");
    assert_int_equal(qvl_gguf_writer_tensor_count(w), 1);
    qvl_gguf_writer_free(w);
    qvl_gguf_writer_free(NULL);
}

static void test_fill_fails(void **state) {
    (void)state;
    char path[512];
    scratch_path(path, sizeof path, "failed.gguf");
    fill_log log[2] = {{0}, {.fail = true}};
    uint16_t f16[12];
    unsigned char q8[4 * 34];
    qvl_gguf_writer *w = make_writer(log, f16, q8);
    qvl_error err = {0};
    qvl_new_file f = {.fd = -1};
    assert_int_equal(qvl_new_file_open(path, &f, &err), QVL_OK);
    expect(qvl_gguf_writer_write(w, &f, &err), QVL_E_IO, &err, "fill refused at byte 0");
    qvl_new_file_abandon(&f);
    qvl_gguf_writer_free(w);
    DIR *d = opendir(scratch_dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, "failed")) fail_msg("left behind: %s", e->d_name);
    closedir(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_fill_fails),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
