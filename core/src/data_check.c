/* The data checks of backend_helpers.h: one implementation of what every backend checks in
 * the values of its inputs (indices, segment bounds, `at`), with one wording of each refusal. */
#include "qvl/backend_helpers.h"
#include "qvl/checked.h"

qvl_status qvl_check_indices(const char *backend, const qvl_node *node, const int32_t *v,
                             int64_t n, int64_t step, int64_t rows, const char *what,
                             qvl_error *err) {
    for (int64_t k = 0; k < n; k++) {
        int32_t r = v[k * step];
        if (r < 0 || r >= rows)
            return qvl_node_fail(backend, node, err, QVL_E_INVALID,
                                 "%s %d at position %lld is outside [0, %lld)", what, (int)r,
                                 (long long)k, (long long)rows);
    }
    return QVL_OK;
}

qvl_status qvl_check_segments(const char *backend, const qvl_node *node, const int32_t *b,
                              int64_t bounds, int64_t step, int64_t len, int32_t *id,
                              qvl_error *err) {
    if (bounds < 1 || b[0] != 0 || b[(bounds - 1) * step] != len)
        return qvl_node_fail(backend, node, err, QVL_E_INVALID,
                             "segments must start at 0 and end at %lld", (long long)len);
    for (int64_t g = 0; g + 1 < bounds; g++)
        if (b[(g + 1) * step] < b[g * step])
            return qvl_node_fail(backend, node, err, QVL_E_INVALID,
                                 "segment bounds decrease at %lld", (long long)g + 1);
    if (!id) return QVL_OK;
    /* 0 = b[0] <= b[1] <= ... = len: every position gets exactly one id, none is outside. */
    for (int64_t g = 0; g + 1 < bounds; g++)
        for (int64_t i = b[g * step]; i < b[(g + 1) * step]; i++) id[i] = (int32_t)g;
    return QVL_OK;
}

qvl_status qvl_check_at(const char *backend, const qvl_node *node, int64_t at, int64_t count,
                        int64_t limit, const char *what, qvl_error *err) {
    if (at < 0)
        return qvl_node_fail(backend, node, err, QVL_E_INVALID, "at = %lld is negative",
                             (long long)at);
    int64_t end;
    bool wrapped = !qvl_add_i64(at, count, &end);
    if (wrapped) end = INT64_MAX; /* for the message: the rows run past any limit */
    if (wrapped || end > limit)
        return qvl_node_fail(backend, node, err, QVL_E_INVALID,
                             "at = %lld: %s [%lld, %lld) do not fit in [0, %lld)", (long long)at,
                             what, (long long)at, (long long)end, (long long)limit);
    return QVL_OK;
}
