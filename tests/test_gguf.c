/* The GGUF reader (qvl/gguf.h) on small files written here: a valid file read back in full,
 * then hostile ones, each refused with one line naming the file and the problem, and the
 * conversion of tensor types (qvl/ggml_types.h) on blocks built here. */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_build.h"
#include "qvl/gguf.h"
#include "test_scratch_dir.h"

static int setup_dir(void **state) {
    (void)state;
    return scratch_dir_make("qvl-gguf");
}

static int teardown_dir(void **state) {
    (void)state;
    return scratch_dir_remove();
}

static char path[512];

/* Writes b (its first n bytes) to the scratch file and opens it. */
static qvl_status open_buf(const gguf_buf *b, size_t n, qvl_gguf **g, qvl_error *err) {
    scratch_path(path, sizeof path, "t.gguf");
    assert_int_equal(gb_write(b, path, n), 0);
    return qvl_gguf_open(path, g, err);
}

/* b must be refused with status s and one line holding the path and `want`. */
static void expect_refused(const gguf_buf *b, qvl_status s, const char *want) {
    qvl_gguf *g = (qvl_gguf *)1;
    qvl_error err = {0};
    qvl_status got = open_buf(b, (size_t)-1, &g, &err);
    if (got != s || !strstr(err.msg, want) || !strstr(err.msg, path))
        fail_msg("want status %d with '%s', got %d: %s", s, want, got, err.msg);
    assert_null(g);
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(err.status, s);
}

/* ---- a valid file ------------------------------------------------------------------------- */

/* Three tensors (F32 [2][4], Q8_0 [32], Q4_K [2][256]) and a few keys, alignment `align`. */
static void valid_file(gguf_buf *b, uint32_t version, uint32_t align) {
    gb_header(b, version, 3, 5);
    gb_kv_str(b, "general.architecture", "qwen3vl");
    gb_kv_u32(b, "general.alignment", align);
    gb_str(b, "tokenizer.ggml.tokens"); /* array of 3 strings */
    gb_u32(b, QVL_GGUF_ARRAY);
    gb_u32(b, QVL_GGUF_STRING);
    gb_u64(b, 3);
    gb_str(b, "he");
    gb_str(b, "");
    gb_str(b, "llo");
    gb_str(b, "x.f"); /* f32 */
    gb_u32(b, QVL_GGUF_F32);
    gb_f32(b, 1e-6f);
    gb_str(b, "x.flag");
    gb_u32(b, QVL_GGUF_BOOL);
    gb_u8(b, 1);
    const uint64_t a[2] = {4, 2}, q8[1] = {32}, q4[2] = {256, 2};
    uint64_t off_q8 = (32 + align - 1) / align * align;
    uint64_t off_q4 = (off_q8 + 34 + align - 1) / align * align;
    gb_tensor(b, "a.weight", 2, a, QVL_GGML_F32, 0);
    gb_tensor(b, "q8", 1, q8, QVL_GGML_Q8_0, off_q8);
    gb_tensor(b, "q4", 2, q4, QVL_GGML_Q4_K, off_q4);
    gb_pad(b, align);
    size_t data = b->len;
    for (int i = 0; i < 8; i++) gb_f32(b, (float)i - 3.5f);
    gb_pad(b, align);
    gb_u16(b, 0x3C00); /* q8_0: d = 1, q = 0..31 */
    for (int i = 0; i < 32; i++) gb_u8(b, (uint8_t)i);
    while (b->len < data + off_q4) gb_u8(b, 0);
    for (int i = 0; i < 2 * 144; i++) gb_u8(b, (uint8_t)(i * 7));
}

static void test_valid(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        gguf_buf b = {0};
        valid_file(&b, version, 64);
        qvl_gguf *g = NULL;
        qvl_error err = {0};
        if (open_buf(&b, (size_t)-1, &g, &err) != QVL_OK) fail_msg("%s", err.msg);
        assert_int_equal(qvl_gguf_version(g), version);
        assert_int_equal(qvl_gguf_alignment(g), 64);
        assert_int_equal(qvl_gguf_data_offset(g) % 64, 0);
        assert_int_equal(qvl_gguf_kv_count(g), 5);
        assert_string_equal(qvl_gguf_kv_at(g, 0)->key, "general.architecture");
        assert_string_equal(qvl_gguf_kv_at(g, 4)->key, "x.flag");
        assert_null(qvl_gguf_kv_at(g, 5));
        qvl_gguf_str s;
        assert_int_equal(qvl_gguf_get_str(g, "general.architecture", &s, &err), QVL_OK);
        assert_true(qvl_gguf_str_eq(s, "qwen3vl"));
        const qvl_gguf_value *tok;
        assert_int_equal(qvl_gguf_get_array(g, "tokenizer.ggml.tokens", QVL_GGUF_STRING, &tok, &err),
                         QVL_OK);
        assert_int_equal(tok->v.arr.count, 3);
        assert_true(qvl_gguf_arr_str(tok, 2, &s) && qvl_gguf_str_eq(s, "llo"));
        assert_true(qvl_gguf_arr_str(tok, 1, &s) && s.len == 0);
        char *dup = qvl_gguf_str_dup(s);
        assert_string_equal(dup, "");
        free(dup);
        double f;
        bool flag;
        assert_int_equal(qvl_gguf_get_float(g, "x.f", &f, &err), QVL_OK);
        assert_true(f == (double)1e-6f);
        assert_int_equal(qvl_gguf_get_bool(g, "x.flag", &flag, &err), QVL_OK);
        assert_true(flag);
        assert_int_equal(qvl_gguf_get_array(g, "tokenizer.ggml.tokens", QVL_GGUF_I32, &tok, &err),
                         QVL_E_DTYPE);
        assert_non_null(strstr(err.msg, "has type array of string, not an array of i32"));

        assert_int_equal(qvl_gguf_tensor_count(g), 3);
        const qvl_gguf_tensor *t = qvl_gguf_tensor_find(g, "a.weight");
        assert_non_null(t);
        assert_ptr_equal(t, qvl_gguf_tensor_at(g, 0));
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->ne[0], 4);
        assert_int_equal(t->ne[1], 2);
        assert_int_equal(t->ne[2], 1);
        assert_int_equal(t->shape[0], 2);
        assert_int_equal(t->shape[1], 4);
        assert_int_equal(t->nelems, 8);
        assert_int_equal(t->nbytes, 32);
        assert_string_equal(t->info->name, "F32");
        assert_int_equal((uintptr_t)t->data % 64, 0);
        assert_true(((const float *)t->data)[7] == 3.5f);
        t = qvl_gguf_tensor_find(g, "q8");
        assert_int_equal(t->nbytes, 34);
        float v[32];
        assert_true(qvl_ggml_to_f32(t->type, t->data, v, 32));
        assert_true(v[0] == 0 && v[31] == 31);
        t = qvl_gguf_tensor_find(g, "q4");
        assert_int_equal(t->nbytes, 288);
        assert_int_equal(t->offset % 64, 0);
        assert_int_equal(t->shape[0], 2);
        assert_null(qvl_gguf_tensor_find(g, "absent"));
        assert_null(qvl_gguf_tensor_at(g, 3));
        qvl_gguf_close(g);
        gb_free(&b);
    }
}

/* Every proper prefix of a valid file is refused in one line, without reading past it. */
static void test_truncated(void **state) {
    (void)state;
    gguf_buf b = {0};
    valid_file(&b, 3, 32);
    for (size_t n = 0; n < b.len; n++) {
        qvl_gguf *g = NULL;
        qvl_error err = {0};
        qvl_status s = open_buf(&b, n, &g, &err);
        if (s == QVL_OK) fail_msg("a prefix of %zu of %zu bytes opened", n, b.len);
        assert_null(g);
        assert_null(strchr(err.msg, '\n'));
        assert_non_null(strstr(err.msg, path));
    }
    gb_free(&b);
}

static void test_header(void **state) {
    (void)state;
    gguf_buf b = {0};
    gb_bytes(&b, "GGUF", 4);
    gb_u32(&b, 3);
    expect_refused(&b, QVL_E_PARSE, "shorter than a GGUF header");
    gb_free(&b);
    gb_bytes(&b, "GGML", 4);
    gb_u32(&b, 3);
    gb_u64(&b, 0);
    gb_u64(&b, 0);
    expect_refused(&b, QVL_E_PARSE, "not a GGUF file");
    gb_free(&b);
    gb_header(&b, 1, 0, 0);
    expect_refused(&b, QVL_E_UNSUPPORTED, "GGUF version 1 (qvl reads versions 2 and 3)");
    gb_free(&b);
    gb_header(&b, 0x03000000u, 0, 0); /* version 3 written big-endian */
    expect_refused(&b, QVL_E_UNSUPPORTED, "big-endian GGUF file");
    gb_free(&b);
    gb_header(&b, 3, 0, 0); /* empty but valid */
    qvl_gguf *g = NULL;
    qvl_error err = {0};
    assert_int_equal(open_buf(&b, (size_t)-1, &g, &err), QVL_OK);
    assert_int_equal(qvl_gguf_kv_count(g), 0);
    assert_null(qvl_gguf_find(g, "general.alignment"));
    qvl_gguf_close(g);
    gb_free(&b);
    scratch_path(path, sizeof path, "missing.gguf");
    assert_int_equal(qvl_gguf_open(path, &g, &err), QVL_E_NOT_FOUND);
    assert_int_equal(qvl_gguf_open(scratch_dir, &g, &err), QVL_E_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
}

static void test_huge_counts(void **state) {
    (void)state;
    gguf_buf b = {0};
    gb_header(&b, 3, 0, (uint64_t)1 << 40);
    expect_refused(&b, QVL_E_LIMIT, "metadata entries exceed the limit");
    gb_free(&b);
    gb_header(&b, 3, UINT64_MAX, 0);
    expect_refused(&b, QVL_E_LIMIT, "tensors exceed the limit");
    gb_free(&b);
    gb_header(&b, 3, 1000, 1000); /* within the caps, but 24 bytes cannot hold them */
    expect_refused(&b, QVL_E_PARSE, "cannot fit in the 0 bytes left");
    gb_free(&b);
    /* an array longer than the file */
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, QVL_GGUF_ARRAY);
    gb_u32(&b, QVL_GGUF_U64);
    gb_u64(&b, (uint64_t)1 << 62);
    gb_u64(&b, 0);
    expect_refused(&b, QVL_E_PARSE, "key 'k': array of 4611686018427387904 u64 elements");
    gb_free(&b);
    gb_header(&b, 3, 0, 1); /* strings: each needs its 8-byte length */
    gb_str(&b, "k");
    gb_u32(&b, QVL_GGUF_ARRAY);
    gb_u32(&b, QVL_GGUF_STRING);
    gb_u64(&b, 3);
    gb_u64(&b, 0);
    gb_u64(&b, 0);
    expect_refused(&b, QVL_E_PARSE, "array of 3 string elements");
    gb_free(&b);
}

static void test_strings(void **state) {
    (void)state;
    gguf_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 1000000000); /* key length past the end */
    gb_bytes(&b, "abcdefghijklmn", 14);
    expect_refused(&b, QVL_E_LIMIT, "key of 1000000000 bytes exceeds the limit of 65535");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 60000);
    gb_bytes(&b, "abcdefghijklmn", 14);
    expect_refused(&b, QVL_E_PARSE, "key (60000 bytes at byte 32) runs past the end of the file");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, QVL_GGUF_STRING);
    gb_u64(&b, UINT64_MAX); /* value length past the end */
    gb_u64(&b, 0);
    expect_refused(&b, QVL_E_PARSE, "key 'k': string value");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_bytes(&b, "a\0b", 3);
    gb_u32(&b, QVL_GGUF_U8);
    gb_u8(&b, 1);
    expect_refused(&b, QVL_E_PARSE, "key 'a?b' holds a NUL byte");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 0);
    gb_u32(&b, QVL_GGUF_U8);
    gb_u8(&b, 1);
    gb_bytes(&b, "12345678", 8);
    expect_refused(&b, QVL_E_PARSE, "empty key");
    gb_free(&b);
    gb_header(&b, 3, 0, 1); /* a newline in a key is printed as '?' (one line) */
    gb_str(&b, "bad\nkey");
    gb_u32(&b, 99);
    gb_bytes(&b, "12345678", 8);
    expect_refused(&b, QVL_E_UNSUPPORTED, "key 'bad?key': unknown value type 99");
    gb_free(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "dup", 1);
    gb_kv_u32(&b, "dup", 2);
    expect_refused(&b, QVL_E_PARSE, "key 'dup': appears twice");
    gb_free(&b);
}

static void test_value_types(void **state) {
    (void)state;
    gguf_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, QVL_GGUF_ARRAY);
    gb_u32(&b, 13);
    gb_u64(&b, 0);
    expect_refused(&b, QVL_E_UNSUPPORTED, "key 'k': array of unknown value type 13");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, QVL_GGUF_BOOL);
    gb_u8(&b, 2);
    gb_bytes(&b, "12345678", 8);
    expect_refused(&b, QVL_E_PARSE, "key 'k': bool value 2 is not 0 or 1");
    gb_free(&b);
    /* arrays nested QVL_GGUF_MAX_NESTING deep */
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "deep");
    gb_u32(&b, QVL_GGUF_ARRAY);
    for (int d = 0; d < QVL_GGUF_MAX_NESTING; d++) {
        gb_u32(&b, QVL_GGUF_ARRAY);
        gb_u64(&b, 1);
    }
    gb_bytes(&b, "123456789012", 12);
    expect_refused(&b, QVL_E_LIMIT, "key 'deep': arrays nest deeper than 8 levels");
    gb_free(&b);
    /* one level less is fine, and every level is reachable */
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "deep");
    gb_u32(&b, QVL_GGUF_ARRAY);
    for (int d = 0; d < QVL_GGUF_MAX_NESTING - 1; d++) {
        gb_u32(&b, QVL_GGUF_ARRAY);
        gb_u64(&b, 1);
    }
    gb_u32(&b, QVL_GGUF_I16);
    gb_u64(&b, 2);
    gb_u16(&b, 0xFFFF);
    gb_u16(&b, 7);
    qvl_gguf *g = NULL;
    qvl_error err = {0};
    if (open_buf(&b, (size_t)-1, &g, &err) != QVL_OK) fail_msg("%s", err.msg);
    const qvl_gguf_value *v = qvl_gguf_find(g, "deep");
    for (int d = 0; d < QVL_GGUF_MAX_NESTING - 1; d++) v = qvl_gguf_arr_item(v, 0);
    int64_t i;
    assert_true(qvl_gguf_arr_int(v, 0, &i) && i == -1);
    assert_true(qvl_gguf_arr_int(v, 1, &i) && i == 7);
    assert_false(qvl_gguf_arr_int(v, 2, &i));
    assert_null(qvl_gguf_arr_item(v, 0));
    qvl_gguf_close(g);
    gb_free(&b);
}

/* A file with one tensor info (and general.alignment when align is not 0), then data. */
static void one_tensor(gguf_buf *b, uint32_t align, uint32_t ndim, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes) {
    gb_header(b, 3, 1, align ? 1 : 0);
    if (align) gb_kv_u32(b, "general.alignment", align);
    gb_tensor(b, "t", ndim, ne, type, offset);
    gb_pad(b, align && align < 4096 ? align : 32);
    for (size_t i = 0; i < data_bytes; i++) gb_u8(b, (uint8_t)i);
}

static void test_alignment(void **state) {
    (void)state;
    const uint64_t ne[1] = {8};
    gguf_buf b = {0};
    one_tensor(&b, 3, 1, ne, QVL_GGML_F32, 0, 32);
    expect_refused(&b, QVL_E_PARSE, "'general.alignment' is 3, not a power of two");
    gb_free(&b);
    one_tensor(&b, 0x80000000u, 1, ne, QVL_GGML_F32, 0, 32);
    expect_refused(&b, QVL_E_PARSE, "'general.alignment' is 2147483648, not a power of two up to 2^30");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "general.alignment");
    gb_u32(&b, QVL_GGUF_I32);
    gb_u32(&b, 32);
    expect_refused(&b, QVL_E_PARSE, "key 'general.alignment' is i32, not u32");
    gb_free(&b);
    one_tensor(&b, 0, 1, ne, QVL_GGML_F32, 16, 64);
    expect_refused(&b, QVL_E_PARSE, "tensor 't': offset 16 is not a multiple of the alignment 32");
    gb_free(&b);
    one_tensor(&b, 16, 1, ne, QVL_GGML_F32, 16, 64); /* the same offset with alignment 16 */
    qvl_gguf *g = NULL;
    qvl_error err = {0};
    if (open_buf(&b, (size_t)-1, &g, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(qvl_gguf_tensor_at(g, 0)->offset, 16);
    qvl_gguf_close(g);
    gb_free(&b);
}

static void test_tensor_layout(void **state) {
    (void)state;
    const uint64_t ne[1] = {8};
    gguf_buf b = {0};
    one_tensor(&b, 0, 1, ne, QVL_GGML_F32, 0, 31); /* one byte short */
    expect_refused(&b, QVL_E_PARSE, "tensor 't': 32 bytes at data offset 0 run past the end");
    gb_free(&b);
    one_tensor(&b, 0, 1, ne, QVL_GGML_F32, (uint64_t)-32, 32); /* offset + data start overflow */
    expect_refused(&b, QVL_E_PARSE, "run past the end of the file");
    gb_free(&b);
    /* two tensors sharing bytes */
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, ne, QVL_GGML_F32, 0);
    const uint64_t ne2[1] = {16};
    gb_tensor(&b, "b", 1, ne2, QVL_GGML_F16, 0);
    gb_pad(&b, 32);
    for (int i = 0; i < 64; i++) gb_u8(&b, 0);
    expect_refused(&b, QVL_E_PARSE, "data overlaps tensor");
    gb_free(&b);
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, ne, QVL_GGML_F32, 0);
    gb_tensor(&b, "a", 1, ne, QVL_GGML_F32, 32);
    gb_pad(&b, 32);
    for (int i = 0; i < 64; i++) gb_u8(&b, 0);
    expect_refused(&b, QVL_E_PARSE, "tensor 'a': appears twice");
    gb_free(&b);
    /* a zero-size tensor may sit anywhere inside the file, even at another's offset */
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, ne, QVL_GGML_F32, 0);
    const uint64_t none[2] = {0, 5};
    gb_tensor(&b, "empty", 2, none, QVL_GGML_F32, 0);
    gb_pad(&b, 32);
    for (int i = 0; i < 32; i++) gb_u8(&b, 0);
    qvl_gguf *g = NULL;
    qvl_error err = {0};
    if (open_buf(&b, (size_t)-1, &g, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(qvl_gguf_tensor_find(g, "empty")->nbytes, 0);
    assert_int_equal(qvl_gguf_tensor_find(g, "empty")->nelems, 0);
    qvl_gguf_close(g);
    gb_free(&b);
}

static void test_dims(void **state) {
    (void)state;
    gguf_buf b = {0};
    const uint64_t big[2] = {(uint64_t)1 << 40, (uint64_t)1 << 40};
    one_tensor(&b, 0, 2, big, QVL_GGML_F32, 0, 0);
    expect_refused(&b, QVL_E_LIMIT, "tensor 't': shape is too large (element count overflows)");
    gb_free(&b);
    const uint64_t bytes_big[2] = {(uint64_t)1 << 33, (uint64_t)1 << 29}; /* 2^62 values, 2^64 bytes */
    one_tensor(&b, 0, 2, bytes_big, QVL_GGML_F32, 0, 0);
    expect_refused(&b, QVL_E_LIMIT, "tensor 't': byte size overflows");
    gb_free(&b);
    const uint64_t neg[1] = {(uint64_t)1 << 63};
    one_tensor(&b, 0, 1, neg, QVL_GGML_F32, 0, 0);
    expect_refused(&b, QVL_E_LIMIT, "dimension 0 is 9223372036854775808");
    gb_free(&b);
    const uint64_t five[5] = {1, 1, 1, 1, 1};
    one_tensor(&b, 0, 5, five, QVL_GGML_F32, 0, 4);
    expect_refused(&b, QVL_E_LIMIT, "tensor 't': 5 dimensions (at most 4)");
    gb_free(&b);
    const uint64_t odd[2] = {33, 2};
    one_tensor(&b, 0, 2, odd, QVL_GGML_Q8_0, 0, 200);
    expect_refused(&b, QVL_E_SHAPE, "tensor 't': rows of 33 values are not whole Q8_0 blocks of 32");
    gb_free(&b);
}

static void test_tensor_types(void **state) {
    (void)state;
    gguf_buf b = {0};
    const uint64_t ne[1] = {256};
    one_tensor(&b, 0, 1, ne, 99, 0, 1024);
    expect_refused(&b, QVL_E_UNSUPPORTED, "tensor 't': unknown ggml type 99");
    gb_free(&b);
    one_tensor(&b, 0, 1, ne, 31, 0, 1024);
    expect_refused(&b, QVL_E_UNSUPPORTED, "tensor 't': type Q4_0_4_4 (31) was removed from GGUF");
    gb_free(&b);
    one_tensor(&b, 0, 1, ne, UINT32_MAX, 0, 1024);
    expect_refused(&b, QVL_E_UNSUPPORTED, "unknown ggml type 4294967295");
    gb_free(&b);
    /* a known type qvl cannot read opens; converting it is one line naming it */
    one_tensor(&b, 0, 1, ne, QVL_GGML_IQ2_XXS, 0, 66);
    qvl_gguf *g = NULL;
    qvl_error err = {0};
    if (open_buf(&b, (size_t)-1, &g, &err) != QVL_OK) fail_msg("%s", err.msg);
    const qvl_gguf_tensor *t = qvl_gguf_tensor_at(g, 0);
    assert_int_equal(t->nbytes, 66);
    assert_int_equal(t->info->support, QVL_GGML_REFUSED);
    qvl_dtype dt;
    assert_false(qvl_ggml_convert_target(t->type, 256, &dt));
    float out[256];
    assert_false(qvl_ggml_to_f32(t->type, t->data, out, 256));
    assert_int_equal(qvl_ggml_convert("blk.0.ffn_down.weight", t->type, t->data, 1, 256, QVL_Q8_0,
                                      out, NULL, &err), QVL_E_UNSUPPORTED);
    assert_string_equal(err.msg, "tensor 'blk.0.ffn_down.weight' is IQ2_XXS, which qvl cannot read "
                        "(docs/QUANT.md lists the GGUF types it reads)");
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_TQ1_0, out, 1, 256, QVL_Q8_0, out, NULL, &err),
                     QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "is TQ1_0, which qvl cannot read"));
    qvl_gguf_close(g);
    gb_free(&b);
}

/* ---- conversion --------------------------------------------------------------------------- */

static void test_convert_targets(void **state) {
    (void)state;
    const struct { uint32_t type; int64_t row; qvl_dtype want; } cases[] = {
        {QVL_GGML_Q4_0, 64, QVL_Q8_0},   {QVL_GGML_Q5_0, 32, QVL_Q8_0},
        {QVL_GGML_IQ4_NL, 32, QVL_Q8_0}, {QVL_GGML_Q5_1, 256, QVL_Q8_0},
        {QVL_GGML_Q5_K, 256, QVL_Q8_0},  {QVL_GGML_Q2_K, 512, QVL_Q4_K},
        {QVL_GGML_Q3_K, 256, QVL_Q6_K},  {QVL_GGML_IQ4_XS, 256, QVL_Q6_K},
        {QVL_GGML_Q4_1, 256, QVL_Q4_K},  {QVL_GGML_Q4_1, 96, QVL_Q8_0},
        {QVL_GGML_Q4_K, 256, QVL_Q4_K},  {QVL_GGML_BF16, 3, QVL_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qvl_dtype dt = QVL_DTYPE_COUNT;
        assert_true(qvl_ggml_convert_target(cases[i].type, cases[i].row, &dt));
        assert_int_equal(dt, cases[i].want);
    }
    qvl_dtype dt;
    assert_false(qvl_ggml_convert_target(QVL_GGML_Q4_0, 48, &dt)); /* not whole blocks */
    assert_false(qvl_ggml_convert_target(4, 32, &dt));              /* removed */
    assert_false(qvl_ggml_convert_target(77, 32, &dt));             /* unknown */
}

/* Q4_0 blocks with random quants and scales: q8_0 exactly; then Q4_1 (with a min) to q6_k with
 * a small error; then the refusals. */
static void test_convert(void **state) {
    (void)state;
    enum { ROWS = 2, COLS = 256 };
    uint8_t q40[ROWS * COLS / 32 * 18], q41[ROWS * COLS / 32 * 20];
    uint32_t seed = 12345;
    for (size_t i = 0; i < sizeof q40; i++) q40[i] = (uint8_t)((seed = seed * 1664525u + 1013904223u) >> 24);
    for (size_t i = 0; i < sizeof q41; i++) q41[i] = (uint8_t)((seed = seed * 1664525u + 1013904223u) >> 24);
    for (size_t k = 0; k < ROWS * COLS / 32; k++) {
        uint16_t d = qvl_f32_to_f16(0.01f * (float)(k + 1) * (k % 2 ? -1.0f : 1.0f));
        memcpy(q40 + 18 * k, &d, 2);
        memcpy(q41 + 20 * k, &d, 2);
        uint16_t m = qvl_f32_to_f16(-0.07f * (float)(k + 1));
        memcpy(q41 + 20 * k + 2, &m, 2);
    }
    float src[ROWS * COLS], back[ROWS * COLS];
    qvl_block_q8_0 q8[ROWS * COLS / 32];
    qvl_error err = {0};
    qvl_ggml_convert_error ce = {0};
    assert_true(qvl_ggml_to_f32(QVL_GGML_Q4_0, q40, src, ROWS * COLS));
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_Q4_0, q40, ROWS, COLS, QVL_Q8_0, q8, &ce, &err),
                     QVL_OK);
    qvl_to_f32(QVL_Q8_0, q8, back, ROWS * COLS);
    assert_memory_equal(src, back, sizeof src);
    assert_true(qvl_ggml_rel_rms(&ce) == 0.0 && ce.ref_sq > 0);
    /* unaligned source bytes dequantise the same */
    uint8_t shifted[sizeof q40 + 1];
    memcpy(shifted + 1, q40, sizeof q40);
    assert_true(qvl_ggml_to_f32(QVL_GGML_Q4_0, shifted + 1, back, ROWS * COLS));
    assert_memory_equal(src, back, sizeof src);

    qvl_block_q6_k q6[ROWS * COLS / 256];
    ce = (qvl_ggml_convert_error){0};
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_Q4_1, q41, ROWS, COLS, QVL_Q6_K, q6, &ce, &err),
                     QVL_OK);
    double rel = qvl_ggml_rel_rms(&ce);
    assert_true(rel > 0 && rel < 0.03); /* q6_k's own rounding on 16-level data */
    /* the sums add up over calls: the two rows one by one give the same figure */
    qvl_ggml_convert_error split = {0};
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_Q4_1, q41, 1, COLS, QVL_Q6_K, q6, &split, &err), QVL_OK);
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_Q4_1, q41 + COLS / 32 * 20, 1, COLS, QVL_Q6_K,
                                      q6 + 1, &split, &err), QVL_OK);
    assert_true(fabs(qvl_ggml_rel_rms(&split) - rel) < 1e-12);

    /* no rows (a tensor with a zero dimension): nothing converted, nothing allocated, even for
     * rows no buffer could hold */
    ce = (qvl_ggml_convert_error){0};
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_Q4_1, q41, 0, (int64_t)1 << 57, QVL_Q8_0, q8,
                                      &ce, &err), QVL_OK);
    assert_true(ce.err_sq == 0 && ce.ref_sq == 0);

    /* a NaN scale is refused, naming the tensor, the place and the type */
    uint16_t nan = 0x7E00;
    memcpy(q40 + 18 * 9, &nan, 2);
    assert_int_equal(qvl_ggml_convert("blk.3.w", QVL_GGML_Q4_0, q40, ROWS, COLS, QVL_Q8_0, q8, NULL, &err),
                     QVL_E_INVALID);
    assert_string_equal(err.msg, "tensor 'blk.3.w': value 32 of row 1 is not finite (a NaN or Inf "
                        "scale in its Q4_0 block)");
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_Q4_1, q41, 1, 96, QVL_Q6_K, q6, NULL, &err),
                     QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "rows of 96 values are not whole blocks of Q4_1 and q6_k"));
    assert_int_equal(qvl_ggml_convert("w", QVL_GGML_Q4_1, q41, 1, 256, QVL_I32, q6, NULL, &err),
                     QVL_E_DTYPE);
    assert_non_null(strstr(err.msg, "cannot convert Q4_1 to i32"));
    assert_int_equal(qvl_ggml_convert("w", 31, q41, 1, 256, QVL_Q8_0, q8, NULL, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "Q4_0_4_4 (31) was removed"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_header),       cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_strings),      cmocka_unit_test(test_value_types),
        cmocka_unit_test(test_alignment),    cmocka_unit_test(test_tensor_layout),
        cmocka_unit_test(test_dims),         cmocka_unit_test(test_tensor_types),
        cmocka_unit_test(test_convert_targets), cmocka_unit_test(test_convert),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
