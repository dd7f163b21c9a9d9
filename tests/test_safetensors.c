/* Safetensors reader and writer: round trips through the writer, and hand-written hostile
 * files that must each yield an error naming the file and the problem. */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/safetensors.h"
#include "test_scratch_dir.h"

static int setup_dir(void **state) {
    (void)state;
    return scratch_dir_make("qvl-st");
}

static int teardown_dir(void **state) {
    (void)state;
    return scratch_dir_remove();
}

static void path_in_dir(char *buf, size_t cap, const char *name) {
    scratch_path(buf, cap, name);
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- round trips ---------------------------------------------------------------------------- */

/* Fill callback: element i of tensor k is the bf16 of (k * 1000 + i) % 251. */
static qvl_status fill_pattern_bf16(void *user, size_t index, uint64_t off, void *dst, size_t n,
                                    qvl_error *err) {
    (void)user, (void)err;
    uint16_t *p = dst;
    for (size_t i = 0; i < n / 2; i++)
        p[i] = qvl_f32_to_bf16((float)((index * 1000 + off / 2 + i) % 251));
    return QVL_OK;
}

static void test_roundtrip(void **state) {
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "small.safetensors");
    const float a[6] = {1, 2, 3, 4, 5, -6.5f};
    const uint16_t scalar = qvl_f32_to_f16(0.25f);
    qvl_st_write_tensor t[4] = {
        {.name = "layer.a", .dtype = QVL_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "b \"quoted\" \\ name", .dtype = QVL_BF16, .ndim = 1, .shape = {5},
         .fill = fill_pattern_bf16},
        {.name = "scalar", .dtype = QVL_F16, .ndim = 0, .data = &scalar},
        {.name = "empty", .dtype = QVL_F32, .ndim = 2, .shape = {0, 7}},
    };
    const char *meta[] = {"format", "pt", "note", "x"};
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_write(path, t, 4, meta, 2, &err), QVL_OK);

    /* The data starts 8-byte aligned, as Hugging Face writes it. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
    assert_int_equal((8 + n) % 8, 0);

    qvl_safetensors *st = NULL;
    assert_int_equal(qvl_safetensors_open(path, &st, &err), QVL_OK);
    assert_int_equal(qvl_safetensors_count(st), 4);
    for (size_t i = 0; i < 4; i++) assert_string_equal(qvl_safetensors_at(st, i)->name, t[i].name);
    assert_null(qvl_safetensors_at(st, 4));

    const qvl_st_tensor *x = qvl_safetensors_find(st, "layer.a");
    assert_non_null(x);
    assert_int_equal(x->dtype, QVL_F32);
    assert_int_equal(x->ndim, 2);
    assert_int_equal(x->shape[0], 2);
    assert_int_equal(x->shape[1], 3);
    assert_int_equal(x->nbytes, sizeof a);
    assert_memory_equal(x->data, a, sizeof a);

    x = qvl_safetensors_find(st, "b \"quoted\" \\ name");
    assert_non_null(x);
    assert_int_equal(x->dtype, QVL_BF16);
    assert_int_equal(x->nbytes, 10);
    for (int i = 0; i < 5; i++) {
        uint16_t v;
        memcpy(&v, (const char *)x->data + 2 * i, 2);
        assert_true(qvl_bf16_to_f32(v) == (float)((1000 + i) % 251));
    }

    x = qvl_safetensors_find(st, "scalar");
    assert_non_null(x);
    assert_int_equal(x->ndim, 0);
    assert_int_equal(x->nbytes, 2);
    assert_memory_equal(x->data, &scalar, 2);

    x = qvl_safetensors_find(st, "empty");
    assert_non_null(x);
    assert_int_equal(x->nbytes, 0);
    assert_int_equal(x->shape[1], 7);

    assert_null(qvl_safetensors_find(st, "layer"));
    assert_string_equal(qvl_safetensors_metadata(st, "format"), "pt");
    assert_string_equal(qvl_safetensors_metadata(st, "note"), "x");
    assert_null(qvl_safetensors_metadata(st, "other"));
    qvl_safetensors_close(st);
}

/* Records the chunks the writer asks for and fills f32 values equal to the element index. */
typedef struct chunk_log {
    uint64_t next;   /* offset expected next */
    int calls;
    bool in_order;
} chunk_log;

static qvl_status fill_index_f32(void *user, size_t index, uint64_t off, void *dst, size_t n,
                                 qvl_error *err) {
    (void)index, (void)err;
    chunk_log *log = user;
    if (off != log->next || n % 4) log->in_order = false;
    log->next = off + n;
    log->calls++;
    float *p = dst;
    for (size_t i = 0; i < n / 4; i++) p[i] = (float)(off / 4 + i);
    return QVL_OK;
}

static void test_streamed_tensor(void **state) {
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "big.safetensors");
    chunk_log log = {.in_order = true};
    const int64_t rows = 3000, cols = 1001; /* 12 MB: more than one chunk, not a multiple */
    qvl_st_write_tensor t = {.name = "big", .dtype = QVL_F32, .ndim = 2, .shape = {rows, cols},
                             .fill = fill_index_f32, .fill_user = &log};
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_write(path, &t, 1, NULL, 0, &err), QVL_OK);
    assert_true(log.in_order);
    assert_true(log.calls > 1);
    assert_int_equal(log.next, (uint64_t)rows * cols * 4);

    qvl_safetensors *st = NULL;
    assert_int_equal(qvl_safetensors_open(path, &st, &err), QVL_OK);
    const qvl_st_tensor *x = qvl_safetensors_find(st, "big");
    assert_non_null(x);
    assert_int_equal(x->nbytes, (size_t)(rows * cols * 4));
    for (int64_t i = 0; i < rows * cols; i += 997) {
        float v;
        memcpy(&v, (const char *)x->data + 4 * i, 4);
        assert_true(v == (float)i);
    }
    qvl_safetensors_close(st);
}

static qvl_status fill_fails(void *user, size_t index, uint64_t off, void *dst, size_t n,
                             qvl_error *err) {
    (void)user, (void)index, (void)off, (void)dst, (void)n;
    return qvl_fail(err, QVL_E_IO, "generator failed");
}

static void test_writer_rejects_bad_input(void **state) {
    (void)state;
    char path[512], partial[600];
    path_in_dir(path, sizeof path, "bad.safetensors");
    assert_true(snprintf(partial, sizeof partial, "%s.partial", path) < (int)sizeof partial);
    const float v[2] = {0};
    qvl_error err = {0};

    qvl_st_write_tensor dup[2] = {
        {.name = "x", .dtype = QVL_F32, .ndim = 1, .shape = {2}, .data = v},
        {.name = "x", .dtype = QVL_F32, .ndim = 1, .shape = {2}, .data = v},
    };
    assert_int_not_equal(qvl_safetensors_write(path, dup, 2, NULL, 0, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "'x'"));

    /* (q8_0 and the k-quants are written as U8: test_safetensors_quant.c) */
    qvl_st_write_tensor i32 = {.name = "q", .dtype = QVL_I32, .ndim = 1, .shape = {2}, .data = v};
    assert_int_not_equal(qvl_safetensors_write(path, &i32, 1, NULL, 0, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "'q'"));
    assert_non_null(strstr(err.msg, "cannot be written"));

    qvl_st_write_tensor neg = {.name = "n", .dtype = QVL_F32, .ndim = 1, .shape = {-2}, .data = v};
    assert_int_not_equal(qvl_safetensors_write(path, &neg, 1, NULL, 0, &err), QVL_OK);

    /* A failing generator leaves neither the file nor the partial file behind. */
    qvl_st_write_tensor gen = {.name = "g", .dtype = QVL_F32, .ndim = 1, .shape = {4},
                               .fill = fill_fails};
    assert_int_equal(qvl_safetensors_write(path, &gen, 1, NULL, 0, &err), QVL_E_IO);
    assert_non_null(strstr(err.msg, "generator failed"));
    assert_false(file_exists(path));
    assert_false(file_exists(partial));
}

/* ---- hostile files ----------------------------------------------------------------------- */

/* Writes an 8-byte length (declared, or the header's own length when declared == -1), the
 * header text, then data_bytes zero bytes. */
static void write_raw(const char *path, int64_t declared, const char *header, size_t data_bytes) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = declared < 0 ? strlen(header) : (uint64_t)declared;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
    assert_int_equal(fwrite(len8, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, strlen(header), f), strlen(header));
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

/* Opening must fail; the message must name the file and contain each needle. */
static void expect_open_error(const char *path, const char *needle1, const char *needle2) {
    qvl_safetensors *st = (qvl_safetensors *)(uintptr_t)1;
    qvl_error err = {0};
    qvl_status s = qvl_safetensors_open(path, &st, &err);
    if (s == QVL_OK || !strstr(err.msg, path) || (needle1 && !strstr(err.msg, needle1)) ||
        (needle2 && !strstr(err.msg, needle2)))
        fail_msg("%s: status %d, message '%s' (wanted '%s' / '%s')", path, (int)s, err.msg,
                 needle1 ? needle1 : "", needle2 ? needle2 : "");
    assert_null(st);
    if (getenv("QVL_TEST_VERBOSE")) print_message("%s\n", err.msg);
}

static void hostile(const char *name, int64_t declared, const char *header, size_t data_bytes,
                    const char *needle1, const char *needle2) {
    char path[512];
    path_in_dir(path, sizeof path, name);
    write_raw(path, declared, header, data_bytes);
    expect_open_error(path, needle1, needle2);
}

static void test_truncated_file(void **state) {
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "short.safetensors");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("\x10\0\0\0\0", 1, 5, f);
    fclose(f);
    expect_open_error(path, "header", "5 bytes");
    path_in_dir(path, sizeof path, "missing.safetensors");
    expect_open_error(path, "cannot open", NULL);
}

static void test_header_length(void **state) {
    (void)state;
    hostile("past_end.st", 4096, "{}", 0, "header", "past the end");
    hostile("over_limit.st", (int64_t)1 << 40, "{}", 0, "header", "limit");
}

static void test_header_not_json(void **state) {
    (void)state;
    hostile("garbage.st", -1, "{not json at all", 0, "header", "JSON");
    hostile("array.st", -1, "[1, 2, 3]", 0, "header", "object");
    hostile("trailing.st", -1, "{} x", 0, "header", "after the JSON");
    char deep[200] = "{\"a\":";
    for (int i = 0; i < 40; i++) strcat(deep, "[");
    hostile("deep.st", -1, deep, 0, "header", "nests");
    hostile("meta.st", -1, "{\"__metadata__\":{\"format\":1}}", 0, "__metadata__", "format");
    hostile("empty_name.st", -1, "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
            4, "header", "empty name");
}

static void test_bad_entries(void **state) {
    (void)state;
    hostile("not_obj.st", -1, "{\"w\":3}", 0, "tensor 'w'", "not a JSON object");
    hostile("no_dtype.st", -1, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w'",
            "dtype");
    hostile("no_offsets.st", -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'w'",
            "data_offsets");
    hostile("extra_key.st", -1,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
            "tensor 'w'", "'x'");
    hostile("unknown_dtype.st", -1,
            "{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w'",
            "unknown dtype 'Q4'");
    hostile("i64.st", -1, "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
            "tensor 'w'", "unsupported dtype 'I64'");
    hostile("neg_shape.st", -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
            4, "tensor 'w'", "shape[0]");
    hostile("frac_shape.st", -1,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "tensor 'w'",
            "shape[0]");
    hostile(
        "huge_shape.st", -1,
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}",
        4, "tensor 'w'", "overflow");
    hostile("rank9.st", -1,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
            "tensor 'w'", "rank 9");
    hostile("size_mismatch.st", -1,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, "tensor 'w'",
            "need 12");
    hostile("bf16_mismatch.st", -1,
            "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16,
            "tensor 'w'", "need 8");
}

static void test_bad_offsets(void **state) {
    (void)state;
    hostile("out_of_file.st", -1,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[0,1000]}}", 16,
            "tensor 'w'", "past the end");
    hostile("reversed.st", -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
            16, "tensor 'w'", "data_offsets");
    hostile("one_offset.st", -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}",
            16, "tensor 'w'", "data_offsets");
    hostile("overlap.st", -1,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            16, "overlaps", "'a'");
    hostile("same_range.st", -1,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}",
            16, "overlaps", "'b'");
    hostile("duplicate.st", -1,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
            16, "tensor 'a'", "twice");
}

/* Zero-size tensors may share an offset with others; touching ranges do not overlap. */
static void test_adjacent_and_empty_ok(void **state) {
    (void)state;
    char path[512];
    path_in_dir(path, sizeof path, "adjacent.st");
    write_raw(path, -1,
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}   ",
              16);
    qvl_safetensors *st = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_open(path, &st, &err), QVL_OK);
    assert_int_equal(qvl_safetensors_count(st), 3);
    qvl_safetensors_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_streamed_tensor),
        cmocka_unit_test(test_writer_rejects_bad_input),
        cmocka_unit_test(test_truncated_file),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_header_not_json),
        cmocka_unit_test(test_bad_entries),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_adjacent_and_empty_ok),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
