/* A request body's JSON, parsed with bounded memory and checked for what cJSON would accept
 * silently (docs/hostile-input.md, "Request bodies"):
 *   - before cJSON builds anything, one pass (qvl_json_measure) counts the values the tree
 *     would hold: more than SERVE_MAX_JSON_VALUES is refused (413), since a body of "0,0,0,..."
 *     holds a value every two bytes and cJSON spends about 100 bytes on each;
 *   - cJSON then parses under a per-thread memory budget (its allocation hooks count what this
 *     thread's parse allocates): len + SERVE_JSON_BYTES_PER_VALUE x values + slack, enough for
 *     the tree of any valid body of that many values, so the budget only trips when the count
 *     and cJSON disagree, and then the parse fails (413) instead of growing;
 *   - a string holding U+0000 (escaped or raw) is refused naming its field: cJSON's strings end
 *     at the first NUL, so the text after it would be lost silently;
 *   - bytes after the JSON value other than whitespace are refused, and so are duplicate keys in
 *     any object (which one wins is undefined across JSON parsers). */
#ifndef QVL_SERVE_JSON_H
#define QVL_SERVE_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "serve_request.h" /* serve_bad */

/* Values (objects, arrays, strings, numbers, literals; keys not counted) in one body. A chat
 * request needs about 3 per message plus 3 per content part: 1024 messages of 8 parts each
 * stay under 30000. */
#define SERVE_MAX_JSON_VALUES 65536
/* What cJSON may allocate per value beyond the body's own bytes: a node (64 bytes + the
 * allocator's 8), and the smallest blocks for a key and a string (24 each). */
#define SERVE_JSON_BYTES_PER_VALUE 128
#define SERVE_JSON_BUDGET_SLACK (64 << 10)

/* A body's commas outside strings, counted as its bytes arrive. Every comma of a JSON text is
 * followed by one more value (an array element, or an object member's value), so a body with
 * SERVE_MAX_JSON_VALUES commas holds more values than a request may, whatever follows: the
 * server stops storing and scanning it there (the answer is the same 413 as the full count's),
 * instead of buffering up to --max-body of "0,0,0,..." and measuring all of it. */
typedef struct serve_json_stream {
    size_t commas;
    bool in_string, escaped;
} serve_json_stream;
/* Feeds the next n bytes; false once the body is certain to hold too many values. */
bool serve_json_stream_feed(serve_json_stream *st, const char *p, size_t n);

/* Installs the counting allocator as cJSON's hooks, once per process. The hooks are global and
 * serve every cJSON call in the process; they count only on a thread inside a budgeted parse
 * (elsewhere they are malloc and free). Call before threads that use cJSON start;
 * serve_json_parse also calls it (a no-op after the first time). */
void serve_json_install_hooks(void);

/* What the last serve_json_parse on this thread allocated through cJSON. */
typedef struct serve_json_usage {
    size_t budget;   /* bytes the parse was allowed */
    size_t peak;     /* most bytes held at once */
    bool exceeded;   /* an allocation was refused for the budget */
} serve_json_usage;

/* Between these two calls, this thread's cJSON allocations may hold at most budget bytes at
 * once (malloc_usable_size of each block); one more is refused (cJSON then fails cleanly).
 * Nested use is not supported. */
void serve_json_budget_begin(size_t budget);
serve_json_usage serve_json_budget_end(void);

/* body[0, len) -> the root object (free with cJSON_Delete), or NULL with bad set (400 or 413).
 * max_depth bounds the nesting; usage (may be NULL) receives the allocator's figures. */
cJSON *serve_json_parse(const char *body, size_t len, int max_depth, serve_bad *bad,
                        serve_json_usage *usage);

/* The path of the first string holding U+0000 (a \u0000 escape or a raw NUL byte), written to
 * where as "messages[0].content"; false when there is none. Raw NUL bytes outside strings count
 * too (path "", the body itself). */
bool serve_json_find_nul(const char *text, size_t len, char *where, size_t where_len);

/* The first duplicate key in any object of the tree: 1 with *key set to it and where to the
 * object's path ("" for the root); 0 when every object's keys differ; -1 out of memory. */
int serve_json_find_duplicate(const cJSON *root, const char **key, char *where,
                              size_t where_len);

#endif
