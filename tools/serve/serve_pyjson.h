/* JSON text as Python's json.dumps(value, ensure_ascii=False) writes it, which is what the
 * chat template's `tojson` filter produces: ", " between items, ": " after keys, keys in their
 * order, non-ASCII characters as they are, control characters escaped (\n \r \t \b \f, else
 * \u00xx). Numbers: an integral value within 2^53 as an integer, any other as the shortest
 * text that reads back the same (Python's repr); a parsed "1.0" therefore prints as "1", the
 * one place the text can differ from the template's (cJSON keeps no integer/float mark). */
#ifndef QVL_SERVE_PYJSON_H
#define QVL_SERVE_PYJSON_H

#include <cjson/cJSON.h>

/* malloc'd, NUL-terminated; NULL when out of memory. */
char *serve_pyjson(const cJSON *v);

#endif
