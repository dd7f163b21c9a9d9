/* Completions fields that shape the answer beyond sampling: n, response_format
 * (json_object, json_schema; llama-server's grammar and json_schema), logit_bias, logprobs and
 * top_logprobs. A JSON Schema is compiled
 * to a grammar here, so an unsupported keyword is a 400 naming it before anything is queued. */
#define _POSIX_C_SOURCE 200809L

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/grammar.h"
#include "serve_request.h"

/* Any JSON object, compact (OpenAI's json_object mode promises an object, not any value). */
static const char object_schema[] = "{\"type\":\"object\"}";

static bool set_schema_grammar(serve_request *r, const char *schema, size_t len,
                               const char *param, serve_bad *bad) {
    char *gbnf = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_grammar_from_json_schema(schema, len, &gbnf, &err);
    if (st != QVL_OK)
        return serve_bad_set(bad, st == QVL_E_NOMEM ? 500 : 400, param,
                             st == QVL_E_NOMEM ? NULL : "unsupported_value", "%s", err.msg);
    r->gen->grammar = gbnf;
    return true;
}

static bool parse_response_format(const cJSON *root, serve_request *r, serve_bad *bad) {
    const cJSON *rf = serve_field(root, "response_format");
    if (!rf) return true;
    const cJSON *t = cJSON_IsObject(rf) ? serve_field(rf, "type") : NULL;
    if (!cJSON_IsString(t))
        return serve_bad_set(bad, 400, "response_format", "invalid_type",
                             "'response_format' must be an object with a 'type'");
    if (strcmp(t->valuestring, "text") == 0) return true;
    if (strcmp(t->valuestring, "json_object") == 0)
        return set_schema_grammar(r, object_schema, sizeof object_schema - 1, "response_format",
                                  bad);
    if (strcmp(t->valuestring, "json_schema") != 0)
        return serve_bad_set(bad, 400, "response_format.type", "unsupported_value",
                             "response_format type '%.40s' is not supported (text, json_object, "
                             "json_schema)", t->valuestring);
    const cJSON *js = serve_field(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return serve_bad_set(bad, 400, "response_format.json_schema", "invalid_type",
                             "'response_format.json_schema' must be an object");
    const cJSON *name = serve_field(js, "name");
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0')
        return serve_bad_set(bad, 400, "response_format.json_schema.name", "invalid_value",
                             "'response_format.json_schema.name' must be a non-empty string");
    bool strict = false; /* either way the output follows the schema: the grammar is exact */
    if (!serve_get_bool(js, "strict", &strict, bad)) {
        snprintf(bad->param, sizeof bad->param, "response_format.json_schema.strict");
        return false;
    }
    const cJSON *schema = serve_field(js, "schema");
    if (!schema) /* OpenAI: no schema means any JSON object */
        return set_schema_grammar(r, object_schema, sizeof object_schema - 1, "response_format",
                                  bad);
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return serve_bad_set(bad, 400, "response_format.json_schema.schema", "invalid_type",
                             "'response_format.json_schema.schema' must be a JSON Schema (an "
                             "object)");
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    bool ok = set_schema_grammar(r, text, strlen(text), "response_format.json_schema.schema", bad);
    free(text);
    return ok;
}

/* {"<token id>": bias, ...}: ids as decimal strings (OpenAI's shape), biases in [-100, 100]. */
static bool parse_logit_bias(const cJSON *root, const serve_parse_ctx *ctx, serve_request *r,
                             serve_bad *bad) {
    const cJSON *lb = serve_field(root, "logit_bias");
    if (!lb) return true;
    if (!cJSON_IsObject(lb))
        return serve_bad_set(bad, 400, "logit_bias", "invalid_type",
                             "'logit_bias' must be an object of token id -> bias");
    const int n = cJSON_GetArraySize(lb);
    if (n > SERVE_MAX_LOGIT_BIAS)
        return serve_bad_set(bad, 400, "logit_bias", "invalid_value",
                             "'logit_bias' holds more than %d entries", SERVE_MAX_LOGIT_BIAS);
    if (n == 0) return true;
    r->gen->bias = calloc((size_t)n, sizeof *r->gen->bias);
    if (!r->gen->bias) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, lb) {
        const char *key = e->string;
        char *end = NULL;
        errno = 0;
        const long id = strtol(key, &end, 10);
        if (key[0] < '0' || key[0] > '9' || *end != '\0' || errno != 0 || id > INT32_MAX ||
            (ctx->vocab > 0 && id >= ctx->vocab))
            return serve_bad_set(bad, 400, "logit_bias", "invalid_value",
                                 "logit_bias key '%.40s' is not a token id of this model (0..%d)",
                                 key, ctx->vocab > 0 ? (int)ctx->vocab - 1 : INT32_MAX);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100.0 && e->valuedouble <= 100.0))
            return serve_bad_set(bad, 400, "logit_bias", "invalid_value",
                                 "logit_bias of token %ld must be a number in [-100, 100]", id);
        r->gen->bias[r->gen->n_bias++] = (qvl_logit_bias){.id = (int32_t)id,
                                                          .bias = (float)e->valuedouble};
    }
    return true;
}

/* llama-server's grammar (GBNF text) and json_schema (a schema), each instead of
 * response_format. */
static bool parse_llama_grammar(const cJSON *root, serve_request *r, serve_bad *bad) {
    const cJSON *g = serve_field(root, "grammar"), *js = serve_field(root, "json_schema");
    if (!g && !js) return true;
    if (r->gen->grammar || (g && js))
        return serve_bad_set(bad, 400, g ? "grammar" : "json_schema", "invalid_value",
                             "give one of response_format, grammar and json_schema");
    if (js) {
        if (!cJSON_IsObject(js) && !cJSON_IsBool(js))
            return serve_bad_set(bad, 400, "json_schema", "invalid_type",
                                 "'json_schema' must be a JSON Schema (an object)");
        char *text = cJSON_PrintUnformatted(js);
        if (!text) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
        bool ok = set_schema_grammar(r, text, strlen(text), "json_schema", bad);
        free(text);
        return ok;
    }
    if (!cJSON_IsString(g))
        return serve_bad_set(bad, 400, "grammar", "invalid_type",
                             "'grammar' must be a GBNF grammar (a string)");
    if (!g->valuestring[0]) return true; /* llama-server's "no grammar" */
    r->gen->grammar = strdup(g->valuestring); /* checked by qvl_engine_prepare (400 there) */
    return r->gen->grammar ? true : serve_bad_set(bad, 500, NULL, NULL, "out of memory");
}

/* The legacy Completions' logprobs: how many alternatives to list per token (0..20; OpenAI
 * allows 5), the chosen token's logprob always. */
static bool parse_text_logprobs(const cJSON *root, serve_request *r, serve_bad *bad) {
    bool seen = false;
    int64_t top = 0;
    if (!serve_get_int(root, "logprobs", 0, QVL_TOP_LOGPROBS_MAX, &seen, &top, bad)) return false;
    r->gen->logprobs = seen;
    r->gen->top_logprobs = (int)top;
    return true;
}

static bool parse_logprobs(const cJSON *root, serve_request *r, serve_bad *bad) {
    bool logprobs = false, seen = false;
    int64_t top = 0;
    if (!serve_get_bool(root, "logprobs", &logprobs, bad)) return false;
    if (!serve_get_int(root, "top_logprobs", 0, QVL_TOP_LOGPROBS_MAX, &seen, &top, bad)) return false;
    if (seen && !logprobs)
        return serve_bad_set(bad, 400, "top_logprobs", "invalid_value",
                             "'top_logprobs' needs 'logprobs': true");
    r->gen->logprobs = logprobs;
    r->gen->top_logprobs = (int)top;
    return true;
}

bool serve_parse_structured(const cJSON *root, const serve_parse_ctx *ctx, serve_request *r,
                            serve_bad *bad) {
    bool seen = false;
    int64_t n = 1;
    if (!serve_get_int(root, "n", 1, SERVE_MAX_CHOICES, &seen, &n, bad)) return false;
    r->n = (int)n;
    return parse_response_format(root, r, bad) && parse_llama_grammar(root, r, bad) &&
           parse_logit_bias(root, ctx, r, bad) &&
           (ctx->api == SERVE_API_TEXT ? parse_text_logprobs(root, r, bad)
                                       : parse_logprobs(root, r, bad));
}
