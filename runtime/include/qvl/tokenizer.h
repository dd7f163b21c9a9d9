/* Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (Qwen2/Qwen3/Qwen3-VL and
 * other GPT-2-style tokenizers).
 *
 * Encoding follows the `tokenizers` library: added tokens are cut out of the raw text first
 * (leftmost, then longest match), the rest is NFC-normalized when the file asks for it, split
 * with the file's pre-tokenizer regex, mapped through the GPT-2 byte-to-unicode table and merged
 * by BPE rank. Nothing is added around the result (no BOS/EOS, no post-processor): a chat
 * template writes its special tokens as text, e.g. "<|im_start|>user\n" -> 151644 872 198.
 *
 * Input that is not valid UTF-8 (which `tokenizers` cannot receive) is still encoded: every byte
 * that does not belong to a well-formed UTF-8 character becomes its own single-byte token, and
 * the valid text around it is encoded as usual, so the concatenated token bytes still equal the
 * input.
 *
 * Threads: encode uses a cache and scratch memory inside the tokenizer, so concurrent encode
 * calls on one tokenizer need a lock. Every other function only reads it. */
#ifndef QVL_TOKENIZER_H
#define QVL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest tokenizer.json accepted. */
#define QVL_TOKENIZER_MAX_FILE_BYTES ((size_t)64 << 20)
/* Largest token id accepted (keeps per-id tables bounded for hostile files). */
#define QVL_TOKENIZER_MAX_ID ((int32_t)1 << 24)

typedef struct qvl_tokenizer qvl_tokenizer;

/* Load tokenizer.json. On failure *out is NULL and err names the file, the key and the
 * problem (e.g. "tokenizer.json: model.merges[3]: token 'xy' is not in the vocab"). */
qvl_status qvl_tokenizer_load(const char *path, qvl_tokenizer **out, qvl_error *err);

/* The same from JSON text in memory; name is only used in error messages. */
qvl_status qvl_tokenizer_load_buffer(const char *json, size_t len, const char *name,
                                     qvl_tokenizer **out, qvl_error *err);

/* NULL is allowed. */
void qvl_tokenizer_free(qvl_tokenizer *tok);

/* Encode len bytes of raw text (may contain NUL bytes and invalid UTF-8). Literal added-token
 * strings such as "<|im_start|>" map to their ids. On success *ids is a malloc'd array of *n ids
 * (release it with free(); it is non-NULL even when *n is 0). */
qvl_status qvl_tokenizer_encode(qvl_tokenizer *tok, const char *text, size_t len,
                                int32_t **ids, size_t *n, qvl_error *err);

/* Decode ids to UTF-8 text: token bytes are concatenated and every ill-formed UTF-8 sequence is
 * replaced by U+FFFD (one per maximal ill-formed subpart, as Rust's from_utf8_lossy does).
 * Added tokens give their content; with skip_special the special ones are left out. Ids that
 * name no token are skipped, as `tokenizers` does. On success *out_text is a malloc'd,
 * NUL-terminated string (release with free()) and *out_len (optional) its length in bytes
 * (the text can itself hold NUL bytes). */
qvl_status qvl_tokenizer_decode(const qvl_tokenizer *tok, const int32_t *ids, size_t n,
                                bool skip_special, char **out_text, size_t *out_len,
                                qvl_error *err);

/* The raw bytes of one token, for streaming output (the bytes of a character can be spread over
 * several tokens, so a streamer must hold back an incomplete UTF-8 tail). *bytes points into the
 * tokenizer and stays valid until qvl_tokenizer_free; it is NUL-terminated for convenience.
 * QVL_E_NOT_FOUND when id names no token. */
qvl_status qvl_tokenizer_token_to_piece(const qvl_tokenizer *tok, int32_t id,
                                        const char **bytes, size_t *len, qvl_error *err);

/* Id of a token given as it is written in tokenizer.json: an added token's content
 * ("<|im_start|>") or a vocab entry in byte-level form ("Ġhello"). -1 when absent. */
int32_t qvl_tokenizer_token_id(const qvl_tokenizer *tok, const char *token);

/* Largest id of any token (vocab or added) + 1. */
int32_t qvl_tokenizer_vocab_size(const qvl_tokenizer *tok);

/* True for added tokens marked "special" (these are dropped by skip_special decoding). */
bool qvl_tokenizer_is_special(const qvl_tokenizer *tok, int32_t id);
/* True for any token of added_tokens, special or not (<|im_end|>, <think>, ...). */
bool qvl_tokenizer_is_added(const qvl_tokenizer *tok, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
