/* Fuzz target: loading tokenizer.json from memory (qvl_tokenizer_load_buffer). A file that
 * loads is also used once, so tables built from hostile ids and merges get exercised. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_check.h"
#include "qvl/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_tokenizer *tok = NULL;
    qvl_error err = {0};
    qvl_status s = qvl_tokenizer_load_buffer((const char *)data, size, "fuzz/tokenizer.json", &tok, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        FUZZ_CHECK(tok == NULL);
        return 0;
    }
    int32_t vocab = qvl_tokenizer_vocab_size(tok);
    FUZZ_CHECK(vocab >= 0 && vocab <= QVL_TOKENIZER_MAX_ID + 1);
    static const char text[] = "Hello, world! <|im_start|>user\n\xc3\xa9\xff 123  \n\n";
    int32_t *ids = NULL;
    size_t n = 0;
    s = qvl_tokenizer_encode(tok, text, sizeof text - 1, &ids, &n, &err);
    if (s == QVL_OK) {
        for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
        char *back = NULL;
        if (qvl_tokenizer_decode(tok, ids, n, false, &back, NULL, &err) == QVL_OK) free(back);
        free(ids);
    } else {
        fuzz_check_error(s, &err);
    }
    /* Every id, including ones no token has, must be answered without a crash. */
    int32_t probe[] = {0, 1, vocab - 1, vocab, -1, INT32_MAX};
    char *text_out = NULL;
    if (qvl_tokenizer_decode(tok, probe, sizeof probe / sizeof probe[0], true, &text_out, NULL,
                             &err) == QVL_OK)
        free(text_out);
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++) {
        const char *piece;
        size_t len;
        (void)qvl_tokenizer_token_to_piece(tok, probe[i], &piece, &len, &err);
        (void)qvl_tokenizer_is_special(tok, probe[i]);
    }
    (void)qvl_tokenizer_token_id(tok, "<|im_start|>");
    qvl_tokenizer_free(tok);
    return 0;
}
