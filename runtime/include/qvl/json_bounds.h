/* The shape of a JSON text, counted in one pass without building anything, so a loader can refuse
 * a file whose tree would take far more memory than a valid file of its kind before cJSON builds
 * it (cJSON spends about 60-100 bytes of memory on each value; a text of "0,0,0,..." holds a
 * value every two bytes). The counts are exact for valid JSON and never fewer than the values
 * cJSON would build for invalid text before giving up. */
#ifndef QVL_JSON_BOUNDS_H
#define QVL_JSON_BOUNDS_H

#include <stddef.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_json_shape {
    size_t values;        /* every object, array, string, number, true, false, null (not keys) */
    size_t root_members;  /* members of the outermost object */
    size_t max_members;   /* members of the largest object other than the outermost */
    size_t max_array;     /* elements of the longest array */
    int max_depth;        /* nesting of objects and arrays (a scalar alone: 0) */
} qvl_json_shape;

void qvl_json_measure(const char *text, size_t len, qvl_json_shape *out);
/* The same, and also counts[i]: the children (members of an object, elements of an array) of the
 * containers at paths[i], a chain of object keys from the root joined with '.' ("model.vocab":
 * the value of "vocab" in the value of "model" in the root object; "" is the root itself),
 * at most 8 keys deep. Keys are compared as written (a key with escapes matches nothing), and
 * containers repeated under one key are summed, so for a valid file the counts are never more
 * than what cJSON builds there. */
void qvl_json_measure_paths(const char *text, size_t len, const char *const *paths,
                            size_t n_paths, size_t *counts, qvl_json_shape *out);

/* Limits for qvl_json_check; 0 leaves a count unbounded. With values_per_1000_bytes, at most
 * len * values_per_1000_bytes / 1000 + values_slack values (the densest valid file of the kind);
 * max_values caps them in any case. */
typedef struct qvl_json_limits {
    int max_depth;
    size_t max_values, values_per_1000_bytes, values_slack;
    size_t max_members, max_array;
} qvl_json_limits;

/* Measures the text and refuses it, with one line naming `what`, when a count exceeds its limit. */
qvl_status qvl_json_check(const char *text, size_t len, const qvl_json_limits *lim,
                          const char *what, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
