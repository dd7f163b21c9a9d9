/* Fuzz target: encoding arbitrary bytes (invalid UTF-8, NUL bytes, huge runs of one character)
 * with the real Qwen3-VL tokenizer.json from the shared data when it is there, else with a small
 * built-in byte-level BPE tokenizer. Properties checked, as documented in qvl/tokenizer.h:
 * every id is a token; for input that NFC normalization cannot change (ASCII) the token bytes
 * concatenate back to the input; decode never fails on encode's output. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "qvl/tokenizer.h"

static qvl_tokenizer *tok;

/* GPT-2's byte-to-unicode table: printable bytes stand for themselves, the others are moved
 * to U+0100 upwards in byte order. */
static unsigned byte_char(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
    return 256 + n;
}

/* Every byte as a token, a few merges, two added tokens, Qwen's pre-tokenizer. */
static char *builtin_tokenizer_json(void) {
    size_t cap = 64 * 1024, len = 0;
    char *j = malloc(cap);
    if (!j) return NULL;
#define PUT(...) len += (size_t)snprintf(j + len, cap - len, __VA_ARGS__)
    PUT("{\"version\":\"1.0\",\"added_tokens\":["
        "{\"id\":300,\"content\":\"<|im_start|>\",\"single_word\":false,\"lstrip\":false,"
        "\"rstrip\":false,\"normalized\":false,\"special\":true},"
        "{\"id\":301,\"content\":\"<|im_end|>\",\"single_word\":false,\"lstrip\":false,"
        "\"rstrip\":false,\"normalized\":false,\"special\":true}],"
        "\"normalizer\":{\"type\":\"NFC\"},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
        "\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
        "\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
        "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
        "\"use_regex\":false}]},"
        "\"decoder\":{\"type\":\"ByteLevel\"},"
        "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"vocab\":{");
    for (unsigned b = 0; b < 256; b++) PUT("%s\"\\u%04x\":%u", b ? "," : "", byte_char(b), b);
    /* merged tokens: "ab" 256, "abc" 257, "Ġa" 258, "aa" 259, "aaaa" 260 */
    PUT(",\"ab\":256,\"abc\":257,\"\\u0120a\":258,\"aa\":259,\"aaaa\":260},"
        "\"merges\":[\"a b\",\"ab c\",\"\\u0120 a\",\"a a\",\"aa aa\"]}}");
#undef PUT
    if (len >= cap) {
        free(j);
        return NULL;
    }
    return j;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    qvl_error err = {0};
    /* QVL_FUZZ_TOKENIZER names another tokenizer.json: a fuzzing machine without the shared
     * data next to the checkout (scripts/fuzz-device.sh) still fuzzes the real vocabulary. */
    const char *path = getenv("QVL_FUZZ_TOKENIZER");
    if (!path || !path[0]) path = QVL_SHARED_DATA_DIR "/qwen3-vl-2b-instruct/tokenizer.json";
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        if (qvl_tokenizer_load(path, &tok, &err) != QVL_OK) {
            dprintf(2, "fuzz_tokenizer_encode: %s\n", err.msg);
            abort();
        }
        dprintf(2, "fuzz_tokenizer_encode: using %s\n", path);
        return 0;
    }
    char *json = builtin_tokenizer_json();
    if (!json || qvl_tokenizer_load_buffer(json, strlen(json), "builtin", &tok, &err) != QVL_OK) {
        dprintf(2, "fuzz_tokenizer_encode: built-in tokenizer: %s\n", json ? err.msg : "no memory");
        abort();
    }
    free(json);
    dprintf(2, "fuzz_tokenizer_encode: %s is absent, using a built-in tokenizer\n", path);
    return 0;
}

static int is_ascii(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] >= 0x80) return 0;
    return 1;
}

static void encode_and_check(const uint8_t *data, size_t size) {
    int32_t *ids = NULL;
    size_t n = 0;
    qvl_error err = {0};
    qvl_status s = qvl_tokenizer_encode(tok, (const char *)data, size, &ids, &n, &err);
    if (s != QVL_OK) { /* only resource limits may refuse text */
        fuzz_check_error(s, &err);
        FUZZ_CHECK(s == QVL_E_LIMIT || s == QVL_E_NOMEM);
        return;
    }
    FUZZ_CHECK(ids != NULL);
    /* Every token covers at least one byte of the normalised text. That text can be longer
     * than the input: an ill-formed UTF-8 byte becomes U+FFFD (3 bytes) and NFC may expand a
     * code point (U+0344 -> U+0308 U+0301), each at most 3x in UTF-8 bytes; ASCII stays as is.
     * (A device fuzz run found 10 such bytes giving 11 tokens: the old bound n <= size was
     * the harness's mistake, the tokenizer matches Rust's from_utf8_lossy + NFC.) */
    FUZZ_CHECK(n <= 3 * size);
    if (is_ascii(data, size)) FUZZ_CHECK(n <= size);
    int32_t vocab = qvl_tokenizer_vocab_size(tok);
    size_t total = 0;
    int same = 1;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
        const char *piece;
        size_t len;
        FUZZ_CHECK(qvl_tokenizer_token_to_piece(tok, ids[i], &piece, &len, &err) == QVL_OK);
        FUZZ_CHECK(len > 0);
        if (total + len > size || memcmp(piece, data + total, len) != 0) same = 0;
        total += len;
    }
    if (is_ascii(data, size)) FUZZ_CHECK(same && total == size);
    char *text = NULL;
    size_t text_len = 0;
    FUZZ_CHECK(qvl_tokenizer_decode(tok, ids, n, false, &text, &text_len, &err) == QVL_OK);
    if (is_ascii(data, size)) FUZZ_CHECK(text_len == size && memcmp(text, data, size) == 0);
    free(text);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    encode_and_check(data, size);
    /* A huge run of one character: an input starting with 0xff asks for data[1] repeated
     * (data[2] % 16 + 1) * 4096 times (rarely, since long runs are slow to encode). */
    if (size >= 3 && data[0] == 0xff) {
        size_t run = (size_t)(data[2] % 16 + 1) * 4096;
        uint8_t *buf = malloc(run);
        if (!buf) return 0;
        memset(buf, data[1], run);
        encode_and_check(buf, run);
        free(buf);
    }
    return 0;
}
