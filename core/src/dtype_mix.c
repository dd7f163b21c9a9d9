/* A model's weight types in one line (qvl/dtype_mix.h). */
#include "qvl/dtype_mix.h"

#include <stdio.h>

void qvl_dtype_mix(const size_t counts[QVL_DTYPE_COUNT], bool with_counts, const char *sep,
               char *buf, size_t cap) {
    bool done[QVL_DTYPE_COUNT] = {0};
    size_t len = 0;
    if (cap) buf[0] = '\0';
    for (int k = 0; k < QVL_DTYPE_COUNT && len < cap; k++) {
        int best = -1;
        for (int d = 0; d < QVL_DTYPE_COUNT; d++)
            if (!done[d] && counts[d] && (best < 0 || counts[d] > counts[best])) best = d;
        if (best < 0) break;
        done[best] = true;
        const char *name = qvl_dtype_name((qvl_dtype)best);
        int w = with_counts ? snprintf(buf + len, cap - len, "%s%zu %s", k ? sep : "",
                                       counts[best], name)
                            : snprintf(buf + len, cap - len, "%s%s", k ? sep : "", name);
        if (w < 0) break;
        len += (size_t)w;
    }
}
