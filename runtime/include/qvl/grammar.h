/* Grammars for constrained generation: GBNF text (llama.cpp's notation) parsed into rules, a
 * matcher that follows the output byte by byte, and the set of vocabulary tokens that may come
 * next.
 *
 * GBNF as accepted here:
 *   name ::= alternatives           one rule; names are [A-Za-z0-9_-]+; `root` is the start
 *   a b                             sequence;  a | b  alternatives;  ( ... )  group
 *   x*  x+  x?  x{m}  x{m,}  x{m,n}  x{,n}   repetition of the element before (a whole literal,
 *                                   class, rule reference or group)
 *   "text"                          literal, escapes \n \r \t \" \\ \xHH \uHHHH \UHHHHHHHH
 *   [a-z0-9_]  [^"\\]               character class of code points (same escapes, plus \] \- \[)
 *   .                               any one code point
 *   # ...                           comment to the end of the line
 * A rule's body may span lines inside parentheses, after `::=` and after `|`; a line that
 * starts with `|` also continues the rule above. Errors are one line with line:col.
 *
 * Refused at parse time, each with one line: a reference to a rule never defined, no `root`,
 * a root with no finite derivation (the output could never end), and left recursion (a rule
 * that can reach itself without consuming a byte), which the matcher could not bound.
 *
 * The matcher works on UTF-8 bytes: classes hold code points, and a character is accepted once
 * its last byte arrives, after each earlier byte was checked to lead somewhere (ill-formed
 * UTF-8 -- overlong forms, surrogates, past U+10FFFF -- is never accepted). Its state is a set of
 * parse stacks (positions in rules), at most QVL_GRAMMAR_MAX_STACKS at once: a grammar so
 * ambiguous that it needs more is an error when it happens, not a slowdown. */
#ifndef QVL_GRAMMAR_H
#define QVL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"
#include "qvl/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_GRAMMAR_MAX_STACKS 1024
/* Limits on what a grammar expands to (repetition counts unroll into rules). */
#define QVL_GRAMMAR_MAX_ELEMENTS ((size_t)1 << 22)
#define QVL_GRAMMAR_MAX_REPEAT 100000
/* Largest grammar text accepted. */
#define QVL_GRAMMAR_MAX_TEXT ((size_t)16 << 20)

typedef struct qvl_grammar qvl_grammar;

/* text[0, len) -> a checked grammar that starts at rule `root`. */
qvl_status qvl_grammar_parse(const char *text, size_t len, qvl_grammar **out, qvl_error *err);
void qvl_grammar_free(qvl_grammar *g);
size_t qvl_grammar_n_rules(const qvl_grammar *g);

/* GBNF of any JSON value (RFC 8259) with at most 20 whitespace bytes between tokens and numbers
 * of at most 16 integer digits, 16 fraction digits and 3 exponent digits. Static text. */
const char *qvl_grammar_json_gbnf(void);

/* A JSON Schema (text) -> GBNF (malloc'd, NUL-terminated). The output is compact JSON: no
 * whitespace but an optional single space after ':' and ','. What is supported, and how, is
 * in json_schema.c's header comment; any other keyword is an error naming it. */
qvl_status qvl_grammar_from_json_schema(const char *schema, size_t len, char **gbnf,
                                        qvl_error *err);

/* A random string of g's language (seeded: the same seed gives the same string), malloc'd and
 * NUL-terminated, *len bytes. Choices are random until the output reaches about soft_max
 * bytes, then each rule takes its shortest way to an end. For tests and fuzzing. */
qvl_status qvl_grammar_generate(const qvl_grammar *g, uint64_t seed, size_t soft_max,
                                char **out, size_t *len, qvl_error *err);

/* ---- matching ---- */

typedef struct qvl_grammar_matcher qvl_grammar_matcher;

/* A matcher at the start of g's root (g must outlive it). */
qvl_status qvl_grammar_matcher_create(const qvl_grammar *g, qvl_grammar_matcher **out,
                                      qvl_error *err);
void qvl_grammar_matcher_free(qvl_grammar_matcher *m);
/* Back to the start of root. */
qvl_status qvl_grammar_matcher_reset(qvl_grammar_matcher *m, qvl_error *err);

/* Feed bytes. *accepted is false (and the state unchanged) when some byte cannot continue
 * the output; errors are only out of memory and the stack cap. */
qvl_status qvl_grammar_matcher_feed(qvl_grammar_matcher *m, const void *bytes, size_t n,
                                    bool *accepted, qvl_error *err);
/* The output so far is a complete derivation of root. */
bool qvl_grammar_matcher_accepting(const qvl_grammar_matcher *m);
/* Accepting and nothing can follow: the output is finished. */
bool qvl_grammar_matcher_done(const qvl_grammar_matcher *m);
/* The matcher's state as int32 words in key[0, cap): equal keys mean equal states (the same
 * stacks, in the same order, and the same partly received character), so what depends only on
 * the state (the set of allowed tokens) can be cached by key. Returns the number of words the
 * key needs; when that is more than cap, key holds only a prefix (call again with more room).
 * Two equal states reached in different orders may give different keys: a cache then misses,
 * it is never wrong. */
size_t qvl_grammar_matcher_state_key(const qvl_grammar_matcher *m, int32_t *key, size_t cap);
/* Whether byte b could come next (for generators and tests; the state is unchanged). */
qvl_status qvl_grammar_matcher_allows_byte(qvl_grammar_matcher *m, uint8_t b, bool *ok,
                                           qvl_error *err);

/* ---- vocabulary ---- */

/* The token trie: every ordinary token's bytes, built once and shared by any number of
 * matchers (read-only after creation). Added tokens (<|im_end|>, <think>, ...) are left out:
 * they are never matched as text. */
typedef struct qvl_grammar_vocab qvl_grammar_vocab;

qvl_status qvl_grammar_vocab_from_tokenizer(const qvl_tokenizer *tok, qvl_grammar_vocab **out,
                                            qvl_error *err);
/* The same plus the added tokens that are not special, whose text is what they stand for
 * (Qwen's <tool_call> and </tool_call>): a grammar that spells that text may then use the
 * token the model was trained to write there. Special ones (<|im_end|>, ...) stay out. */
qvl_status qvl_grammar_vocab_from_tokenizer_plain(const qvl_tokenizer *tok,
                                                  qvl_grammar_vocab **out, qvl_error *err);
/* Tokens given as byte strings: token i is pieces[i][0, lens[i]); a NULL piece is left out. */
qvl_status qvl_grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens,
                                         int32_t n, qvl_grammar_vocab **out, qvl_error *err);
void qvl_grammar_vocab_free(qvl_grammar_vocab *v);
size_t qvl_grammar_vocab_n_nodes(const qvl_grammar_vocab *v);
/* A text token's bytes (pointing into v); false for ids that are not text tokens. */
bool qvl_grammar_vocab_piece(const qvl_grammar_vocab *v, int32_t id, const uint8_t **bytes,
                             size_t *len);

/* allowed[0, n_allowed) is set to 1 for each text token the matcher can take whole from its
 * current state and 0 for every other id (including ids past the vocabulary); returns the
 * number allowed in *count. */
qvl_status qvl_grammar_matcher_allowed(qvl_grammar_matcher *m, const qvl_grammar_vocab *v,
                                       uint8_t *allowed, size_t n_allowed, size_t *count,
                                       qvl_error *err);
/* Of the tokens the last qvl_grammar_matcher_allowed allowed, how many it took by whole trie
 * subtrees without matching their bytes (inside a string: see grammar_vocab.c); for tests and
 * the bench. */
size_t qvl_grammar_matcher_bulk_tokens(const qvl_grammar_matcher *m);

#ifdef __cplusplus
}
#endif
#endif
