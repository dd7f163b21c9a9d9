/* Stop strings (the request's `stop`): where generated text must end, and how much of its tail
 * must be held back from a stream because it may still become a stop string. */
#ifndef QVL_STOP_STRINGS_H
#define QVL_STOP_STRINGS_H

#include <stdbool.h>
#include <stddef.h>

/* The earliest occurrence of any of the n stop strings in text[0, len) that ends after `from`
 * (text before `from` was searched already): true with *at = its start, else false. */
bool qvl_stop_find(char *const *stops, size_t n, const char *text, size_t len, size_t from,
                     size_t *at);

/* The length of the longest tail of text[0, len) that is the start (not all) of some stop
 * string: those bytes are not final yet. */
size_t qvl_stop_holdback(char *const *stops, size_t n, const char *text, size_t len);

#endif
