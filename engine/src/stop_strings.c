/* Stop-string search over the generated text. Stop strings are short (the request parser caps
 * them), so plain byte comparison is enough. */
#include "qvl/stop_strings.h"

#include <string.h>

bool qvl_stop_find(char *const *stops, size_t n, const char *text, size_t len, size_t from,
                     size_t *at) {
    bool found = false;
    size_t best = 0;
    for (size_t s = 0; s < n; s++) {
        size_t sl = strlen(stops[s]);
        if (sl == 0 || sl > len) continue;
        /* A match that ends after `from` starts at or after from - sl + 1. */
        size_t start = from >= sl ? from - sl + 1 : 0;
        for (size_t i = start; i + sl <= len; i++) {
            if (found && i >= best) break;
            if (memcmp(text + i, stops[s], sl) == 0) {
                best = i;
                found = true;
                break;
            }
        }
    }
    if (found) *at = best;
    return found;
}

size_t qvl_stop_holdback(char *const *stops, size_t n, const char *text, size_t len) {
    size_t hold = 0;
    for (size_t s = 0; s < n; s++) {
        size_t sl = strlen(stops[s]);
        size_t k = sl > 0 ? sl - 1 : 0; /* tails shorter than the stop string, longest first */
        if (k > len) k = len;
        for (; k > hold; k--) {
            if (memcmp(text + len - k, stops[s], k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return hold;
}
