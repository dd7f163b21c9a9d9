/* JSON text as Python's json.dumps(value, ensure_ascii=False) writes it, which is what the
 * chat template's `tojson` filter produces: ", " between items, ": " after keys, keys in their
 * order, non-ASCII characters as they are, control characters escaped (\n \r \t \b \f, else
 * \u00xx). Numbers as json.loads then json.dumps would write them: an integer lexeme (no '.',
 * 'e' or 'E') as a Python int, digits as written at any size ("12345678901234567890"); any other
 * as Python's repr of the float ("1.0", "100000.0", "1e-07", "-0.0", "1e+16"). cJSON keeps no
 * integer/float mark and only a double, so serve_pyjson_keep_numbers stores each number's
 * lexeme from the request text in the node's valuestring (cJSON_Delete and cJSON_Duplicate
 * handle it on any node; nothing reads a number's valuestring but this printer). A number
 * without a lexeme (built in code) prints as an integer when integral within 2^53. */
#ifndef QVL_SERVE_PYJSON_H
#define QVL_SERVE_PYJSON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* malloc'd, NUL-terminated; NULL when out of memory. */
char *serve_pyjson(const cJSON *v);

/* Gives each number of root, parsed by cJSON from text[0, len), its lexeme (malloc'd, in
 * valuestring). false when out of memory (or the text is not the tree's). */
bool serve_pyjson_keep_numbers(cJSON *root, const char *text, size_t len);

#endif
