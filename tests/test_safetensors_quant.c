/* Quantised tensors in safetensors files (docs/QUANT.md): the writer stores q8_0/q4_k/q6_k as
 * U8 byte matrices described in __metadata__, the reader gives back the logical tensor, and
 * hand-written files whose description and bytes disagree are refused with one message. */
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
    return scratch_dir_make("qvl-stq");
}

static int teardown_dir(void **state) {
    (void)state;
    return scratch_dir_remove();
}

static void path_in_dir(char *buf, size_t cap, const char *name) {
    scratch_path(buf, cap, name);
}

/* The file's JSON header as text (NUL-terminated, malloc'd). */
static char *read_header(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
    char *h = malloc(n + 1);
    assert_non_null(h);
    assert_int_equal(fread(h, 1, n, f), n);
    h[n] = '\0';
    fclose(f);
    return h;
}

/* Deterministic bytes standing in for quantised blocks (their values do not matter here). */
static void pattern(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131 + seed * 7) % 251);
}

static void test_roundtrip(void **state) {
    (void)state;
    /* q8_0 [3, 64]: 3 rows of 2 blocks of 34 bytes; q4_k [2, 2, 256]: rows of 512 elements,
     * 2 super-blocks of 144 bytes; q6_k [256]: one 210-byte block; f32 and bf16 beside them. */
    static unsigned char q8[3 * 2 * 34], q4[2 * 2 * 144], q6[210];
    float f[4] = {1, 2, 3, 4};
    uint16_t b[2] = {0x3f80, 0x4000};
    pattern(q8, sizeof q8, 1);
    pattern(q4, sizeof q4, 2);
    pattern(q6, sizeof q6, 3);
    qvl_st_write_tensor t[] = {
        {.name = "f", .dtype = QVL_F32, .ndim = 1, .shape = {4}, .data = f},
        {.name = "w.q8", .dtype = QVL_Q8_0, .ndim = 2, .shape = {3, 64}, .data = q8},
        {.name = "w.q4", .dtype = QVL_Q4_K, .ndim = 3, .shape = {2, 2, 256}, .data = q4},
        {.name = "v.q6", .dtype = QVL_Q6_K, .ndim = 1, .shape = {256}, .data = q6},
        {.name = "b", .dtype = QVL_BF16, .ndim = 1, .shape = {2}, .data = b},
    };
    const char *meta[] = {"format", "pt"};
    char path[512];
    path_in_dir(path, sizeof path, "quant.safetensors");
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_write(path, t, 5, meta, 1, &err), QVL_OK);

    /* What any safetensors reader sees: byte matrices [d0, row bytes] and the descriptions. */
    char *h = read_header(path);
    assert_non_null(strstr(h, "\"w.q8\":{\"dtype\":\"U8\",\"shape\":[3,68]"));
    assert_non_null(strstr(h, "\"w.q4\":{\"dtype\":\"U8\",\"shape\":[2,288]"));
    assert_non_null(strstr(h, "\"v.q6\":{\"dtype\":\"U8\",\"shape\":[210]"));
    assert_non_null(strstr(h, "\"qvl:w.q8\":\"q8_0[3,64]\""));
    assert_non_null(strstr(h, "\"qvl:w.q4\":\"q4_k[2,2,256]\""));
    assert_non_null(strstr(h, "\"qvl:v.q6\":\"q6_k[256]\""));
    assert_non_null(strstr(h, "\"format\":\"pt\""));
    free(h);

    qvl_safetensors *st = NULL;
    assert_int_equal(qvl_safetensors_open(path, &st, &err), QVL_OK);
    const qvl_st_tensor *q = qvl_safetensors_find(st, "w.q8");
    assert_non_null(q);
    assert_int_equal(q->dtype, QVL_Q8_0);
    assert_int_equal(q->ndim, 2);
    assert_int_equal(q->shape[0], 3);
    assert_int_equal(q->shape[1], 64);
    assert_int_equal(q->nbytes, sizeof q8);
    assert_memory_equal(q->data, q8, sizeof q8);
    q = qvl_safetensors_find(st, "w.q4");
    assert_int_equal(q->dtype, QVL_Q4_K);
    assert_int_equal(q->ndim, 3);
    assert_int_equal(q->shape[2], 256);
    assert_memory_equal(q->data, q4, sizeof q4);
    q = qvl_safetensors_find(st, "v.q6");
    assert_int_equal(q->dtype, QVL_Q6_K);
    assert_int_equal(q->ndim, 1);
    assert_int_equal(q->shape[0], 256);
    assert_memory_equal(q->data, q6, sizeof q6);
    /* every tensor lies at an even offset: F32 first, the rest even-sized */
    for (size_t i = 0; i < qvl_safetensors_count(st); i++)
        assert_int_equal((uintptr_t)qvl_safetensors_at(st, i)->data % 2, 0);
    assert_string_equal(qvl_safetensors_metadata(st, "format"), "pt");
    qvl_safetensors_close(st);
}

/* A streamed q8_0 tensor larger than one chunk: every chunk must start at a multiple of 256
 * elements and hold whole blocks. */
typedef struct chunk_log {
    int calls;
    bool aligned;
} chunk_log;

static qvl_status fill_q8(void *user, size_t index, uint64_t off, void *dst, size_t n,
                          qvl_error *err) {
    (void)index, (void)err;
    chunk_log *log = user;
    log->calls++;
    if (off % (8 * 34) != 0 || n % 34 != 0) log->aligned = false;
    pattern(dst, n, (unsigned)(off / 34));
    return QVL_OK;
}

static void test_streamed_chunks(void **state) {
    (void)state;
    chunk_log log = {0, true};
    /* 4096 rows of 1024: 128 Ki blocks, 4.25 MiB: two chunks */
    qvl_st_write_tensor t = {.name = "big", .dtype = QVL_Q8_0, .ndim = 2, .shape = {4096, 1024},
                             .fill = fill_q8, .fill_user = &log};
    char path[512];
    path_in_dir(path, sizeof path, "streamed.safetensors");
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_write(path, &t, 1, NULL, 0, &err), QVL_OK);
    assert_true(log.calls >= 2);
    assert_true(log.aligned);
    qvl_safetensors *st = NULL;
    assert_int_equal(qvl_safetensors_open(path, &st, &err), QVL_OK);
    assert_int_equal(qvl_safetensors_at(st, 0)->nbytes, (size_t)4096 * 32 * 34);
    qvl_safetensors_close(st);
}

static void test_writer_refuses(void **state) {
    (void)state;
    static unsigned char bytes[1024];
    char path[512];
    path_in_dir(path, sizeof path, "refused.safetensors");
    qvl_error err = {0};
    qvl_st_write_tensor odd = {.name = "w", .dtype = QVL_Q8_0, .ndim = 2, .shape = {2, 33},
                               .data = bytes};
    assert_int_not_equal(qvl_safetensors_write(path, &odd, 1, NULL, 0, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "not whole q8_0 blocks"));
    qvl_st_write_tensor scalar = {.name = "s", .dtype = QVL_Q4_K, .ndim = 0, .data = bytes};
    assert_int_not_equal(qvl_safetensors_write(path, &scalar, 1, NULL, 0, &err), QVL_OK);
    qvl_st_write_tensor ok = {.name = "w", .dtype = QVL_Q8_0, .ndim = 1, .shape = {32},
                              .data = bytes};
    const char *meta[] = {"qvl:w", "q8_0[32]"};
    assert_int_not_equal(qvl_safetensors_write(path, &ok, 1, meta, 1, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "reserved"));
    assert_int_equal(access(path, F_OK), -1);
}

/* ---- hostile files ----------------------------------------------------------------------- */

static void write_raw(const char *path, const char *header, size_t data_bytes) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
    assert_int_equal(fwrite(len8, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, n, f), n);
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

static void hostile(const char *name, const char *header, size_t data_bytes, const char *needle1,
                    const char *needle2) {
    char path[512];
    path_in_dir(path, sizeof path, name);
    write_raw(path, header, data_bytes);
    qvl_safetensors *st = (qvl_safetensors *)(uintptr_t)1;
    qvl_error err = {0};
    qvl_status s = qvl_safetensors_open(path, &st, &err);
    if (s == QVL_OK || !strstr(err.msg, path) || !strstr(err.msg, needle1) ||
        (needle2 && !strstr(err.msg, needle2)))
        fail_msg("%s: status %d, message '%s' (wanted '%s' / '%s')", name, (int)s, err.msg,
                 needle1, needle2 ? needle2 : "");
    assert_null(st);
    assert_null(strchr(err.msg, '\n'));
}

#define Q8_ENTRY(shape, end) "\"w\":{\"dtype\":\"U8\",\"shape\":" shape ",\"data_offsets\":[0," end "]}"

static void test_hostile(void **state) {
    (void)state;
    /* the good file these are variations of: q8_0 [2, 32] is U8 [2, 34] */
    char path[512];
    path_in_dir(path, sizeof path, "good.st");
    write_raw(path, "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,32]\"}," Q8_ENTRY("[2,34]", "68") "}",
              68);
    qvl_safetensors *st = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_open(path, &st, &err), QVL_OK);
    assert_int_equal(qvl_safetensors_at(st, 0)->dtype, QVL_Q8_0);
    qvl_safetensors_close(st);
    /* the metadata after the tensors works the same */
    path_in_dir(path, sizeof path, "meta_last.st");
    write_raw(path, "{" Q8_ENTRY("[2,34]", "68") ",\"__metadata__\":{\"qvl:w\":\"q8_0[2,32]\"}}",
              68);
    assert_int_equal(qvl_safetensors_open(path, &st, &err), QVL_OK);
    qvl_safetensors_close(st);

    hostile("u8_plain.st", "{" Q8_ENTRY("[2,34]", "68") "}", 68, "tensor 'w'",
            "unsupported dtype 'U8'");
    hostile("size.st", "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,64]\"}," Q8_ENTRY("[2,34]", "68") "}",
            68, "tensor 'w'", "q8_0 [2,64] is U8 [2,68]");
    hostile("rows.st", "{\"__metadata__\":{\"qvl:w\":\"q8_0[4,16]\"}," Q8_ENTRY("[2,34]", "68") "}",
            68, "tensor 'w'", "rows of 16 elements are not whole q8_0 blocks");
    hostile("dtype.st", "{\"__metadata__\":{\"qvl:w\":\"q9_9[2,32]\"}," Q8_ENTRY("[2,34]", "68") "}",
            68, "tensor 'w'", "unknown qvl dtype 'q9_9'");
    hostile("float.st", "{\"__metadata__\":{\"qvl:w\":\"f16[34]\"}," Q8_ENTRY("[2,34]", "68") "}",
            68, "tensor 'w'", "unknown qvl dtype 'f16'");
    hostile("syntax.st", "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,32\"}," Q8_ENTRY("[2,34]", "68") "}",
            68, "tensor 'w'", "not DTYPE[dims]");
    hostile("trailing.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,32]x\"}," Q8_ENTRY("[2,34]", "68") "}", 68,
            "tensor 'w'", "not DTYPE[dims]");
    hostile("empty_dim.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,,32]\"}," Q8_ENTRY("[2,34]", "68") "}", 68,
            "tensor 'w'", "not DTYPE[dims]");
    hostile("huge.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,99999999999999999999]\"}," Q8_ENTRY("[2,34]",
                                                                                     "68") "}",
            68, "tensor 'w'", "not DTYPE[dims]");
    hostile("overflow.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,4294967296,4294967296]\"}," Q8_ENTRY("[2,34]",
                                                                                       "68") "}",
            68, "tensor 'w'", "too large");
    hostile("rank.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[1,1,1,1,1,1,1,1,32]\"}," Q8_ENTRY("[2,34]",
                                                                                  "68") "}",
            68, "tensor 'w'", "not DTYPE[dims]");
    hostile("long_name.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0_with_a_long_name[2,32]\"}," Q8_ENTRY("[2,34]",
                                                                                      "68") "}",
            68, "tensor 'w'", "not DTYPE[dims]");
    hostile("orphan.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,32]\",\"qvl:gone\":\"q8_0[1,32]\"}," Q8_ENTRY(
                "[2,34]", "68") "}",
            68, "qvl:gone", "describes no U8 tensor");
    hostile("f32_described.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[1,32]\"},"
            "\"w\":{\"dtype\":\"F32\",\"shape\":[17],\"data_offsets\":[0,68]}}",
            68, "qvl:w", "describes no U8 tensor");
    hostile("dup_meta.st",
            "{\"__metadata__\":{\"qvl:w\":\"q8_0[2,32]\",\"qvl:w\":\"q8_0[2,32]\"}," Q8_ENTRY(
                "[2,34]", "68") "}",
            68, "qvl:w", "appears twice");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_streamed_chunks),
        cmocka_unit_test(test_writer_refuses),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
