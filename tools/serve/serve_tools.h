/* Function calling in Chat Completions: `tools`, `tool_choice` and `parallel_tool_calls` of a
 * request, and the tool calls read back from the answer.
 *
 * The prompt lists the tools as Qwen3-VL's template does (each tool's JSON as tojson writes
 * it: serve_pyjson.h). The model calls a function by writing
 *     <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * and the grammar built here from the functions' parameter schemas holds it to that:
 *   required          the answer is one call (or several, "\n" between, with
 *                     parallel_tool_calls) of any listed function;
 *   {"type": "function", "function": {"name": N}}   the same, of N only;
 *   auto              the answer is free until it writes "<tool_call>"; from there the grammar
 *                     of the calls constrains the rest (the engine's grammar trigger);
 *   none              the tools are listed, the answer is text and not read for calls. */
#ifndef QVL_SERVE_TOOLS_H
#define QVL_SERVE_TOOLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "qvl/engine_job.h"

struct serve_bad;

/* The request's tools -> *tools_text (the lines the prompt lists; NULL: no tools), the
 * grammar and trigger on gen, and *read_calls (whether the answer is read for calls). Any
 * problem is a 400 naming the parameter (an unsupported schema keyword names it). */
bool serve_tools_parse(const cJSON *root, qvl_engine_request *gen, char **tools_text,
                       bool *read_calls, struct serve_bad *bad);

/* ---- reading calls from the answer ---- */

/* An incremental reader of the answer's text: a stream feeds what is visible as it grows, a
 * whole answer feeds everything once; both see the same pieces, so the deltas a stream sends
 * assemble to the message a whole answer gets. */
typedef struct serve_toolcalls {
    int mode;          /* where in the text the reader is (serve_tools.c) */
    size_t at;         /* bytes of the text read */
    int n_calls;
    char id_base[24];  /* "call_" ids: id_base and the call's index */
} serve_toolcalls;

void serve_toolcalls_init(serve_toolcalls *t);

/* Reads text[t->at, len) (final: nothing follows). *content gets the plain text found (a
 * malloc'd string, NULL when none) and *calls the OpenAI tool_calls delta items for what was
 * found ([{index, id, type, function: {name, arguments: ""}}] when a call starts, then
 * [{index, function: {arguments: piece}}]; NULL when none). false when out of memory. */
bool serve_toolcalls_feed(serve_toolcalls *t, const char *text, size_t len, bool final,
                          char **content, cJSON **calls);

/* Merges delta items into whole calls (a message's tool_calls): the same index's arguments
 * pieces joined. `into` is an array; items are taken. */
bool serve_toolcalls_merge(cJSON *into, cJSON *items);

#endif
