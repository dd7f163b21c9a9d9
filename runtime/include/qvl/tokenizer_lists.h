/* A tokenizer given as lists, the way a GGUF file carries it (tokenizer.ggml.model, .pre,
 * .tokens, .token_type, .merges): the same tokenizer qvl_tokenizer_load builds from the
 * tokenizer.json these lists were made from.
 *
 * The lists follow llama.cpp's converter: token i has id i; a normal token is written in its
 * byte-level form ("Ġhello"); an added token in its raw text ("<|im_start|>", "<think>") with
 * type CONTROL when the original was special (or looked special: "<|...|>") and USER_DEFINED
 * otherwise; ids the tokenizer did not use are UNUSED padding; merges are "left right".
 * A GGUF file does not keep which added tokens were special beyond that, so "<|...|>" tokens
 * that tokenizer.json had as non-special (Qwen's fill-in-the-middle tokens) count as special
 * here: decoding with skip_special drops them, as llama.cpp does. Encoding is unaffected. */
#ifndef QVL_TOKENIZER_LISTS_H
#define QVL_TOKENIZER_LISTS_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"
#include "qvl/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GGUF's token types (tokenizer.ggml.token_type). */
enum {
    QVL_TOKEN_NORMAL = 1,
    QVL_TOKEN_UNKNOWN = 2,
    QVL_TOKEN_CONTROL = 3,
    QVL_TOKEN_USER_DEFINED = 4,
    QVL_TOKEN_UNUSED = 5,
    QVL_TOKEN_BYTE = 6,
};

/* A string that need not end in NUL (GGUF strings carry their length). */
typedef struct qvl_str {
    const char *data;
    size_t len;
} qvl_str;

typedef struct qvl_tokenizer_lists {
    const char *model;     /* "gpt2" (byte-level BPE): the only one accepted */
    const char *pre;       /* pre-tokenizer: "qwen2" (Qwen2, Qwen2.5, Qwen3 and Qwen3-VL) */
    const qvl_str *tokens; /* [n_tokens]: token i has id i */
    size_t n_tokens;
    const int32_t *types;  /* [n_tokens] QVL_TOKEN_*, or NULL: every token normal */
    const qvl_str *merges; /* [n_merges] "left right", highest priority first */
    size_t n_merges;
} qvl_tokenizer_lists;

/* Builds the tokenizer; name (e.g. the file) prefixes every error message. Errors are one
 * line: an unknown model or pre-tokenizer, a token type BYTE or UNKNOWN (not byte-level BPE),
 * a token holding a NUL byte, a merge that is not two tokens of the vocabulary, and whatever
 * qvl_tokenizer_load_buffer refuses. */
qvl_status qvl_tokenizer_from_lists(const qvl_tokenizer_lists *l, const char *name,
                                    qvl_tokenizer **out, qvl_error *err);

/* The lists llama.cpp's converter writes for the tokenizer.json at path (a byte-level BPE), for
 * a model of vocab_size token ids (its embedding's rows): see tokenizer_lists_json.c for the
 * rules. Errors are one line naming the file. Free with qvl_tokenizer_lists_free. */
typedef struct qvl_tokenizer_lists_owned qvl_tokenizer_lists_owned;
qvl_status qvl_tokenizer_lists_from_json(const char *path, int64_t vocab_size,
                                         qvl_tokenizer_lists_owned **out, qvl_error *err);
const qvl_tokenizer_lists *qvl_tokenizer_lists_get(const qvl_tokenizer_lists_owned *o);
void qvl_tokenizer_lists_free(qvl_tokenizer_lists_owned *o); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
