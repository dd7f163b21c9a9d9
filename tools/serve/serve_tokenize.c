/* llama-server's POST /tokenize and POST /detokenize: the model's tokenizer, as a prompt is
 * tokenized (added tokens written out become their ids). Qwen's tokenizer adds no BOS or other
 * tokens around a text, so add_special changes nothing; parse_special false (added tokens as
 * plain text) is a tokenization qvl's tokenizer does not do, so it is refused. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "serve_http.h"
#include "serve_json.h"
#include "serve_logprobs.h"
#include "serve_request.h"

static enum MHD_Result reply_bad(struct MHD_Connection *c, serve_server *s, const serve_bad *b) {
    return serve_reply_error(c, s, (unsigned)b->status, b->message, b->param[0] ? b->param : NULL,
                             b->code);
}

/* The body as an object (NULL: answered in *rc). */
static cJSON *body_object(struct MHD_Connection *c, serve_server *s, const char *body,
                          size_t len, enum MHD_Result *rc) {
    serve_bad bad;
    memset(&bad, 0, sizeof bad);
    cJSON *root = serve_json_parse(body, len, SERVE_MAX_JSON_DEPTH, &bad, NULL);
    if (root && !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = NULL;
        serve_bad_set(&bad, 400, NULL, "invalid_json", "the body must be a JSON object");
    }
    if (!root) *rc = reply_bad(c, s, &bad);
    return root;
}

/* {"id", "piece"}: the piece as text when its bytes are whole UTF-8, else the bytes. */
static cJSON *piece_json(serve_server *s, int32_t id) {
    const char *bytes = "";
    size_t n = 0;
    if (!qvl_engine_token_bytes(s->engine, id, &bytes, &n)) n = 0;
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "id", id);
    if (ok && serve_utf8_whole(bytes, n)) {
        ok = cJSON_AddStringToObject(o, "piece", bytes) != NULL; /* NUL-terminated by the tokenizer */
    } else if (ok) {
        cJSON *arr = serve_bytes_json(bytes, n);
        ok = arr && cJSON_AddItemToObject(o, "piece", arr);
        if (!ok) cJSON_Delete(arr);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static char *tokens_json(serve_server *s, const int32_t *ids, size_t n, bool with_pieces) {
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "tokens") : NULL;
    bool ok = arr != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *t = with_pieces ? piece_json(s, ids[i]) : cJSON_CreateNumber(ids[i]);
        ok = t && cJSON_AddItemToArray(arr, t);
        if (!ok) cJSON_Delete(t);
    }
    char *out = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return out;
}

enum MHD_Result serve_tokenize(struct MHD_Connection *c, serve_server *s, const char *body,
                               size_t len) {
    enum MHD_Result rc;
    cJSON *root = body_object(c, s, body, len, &rc);
    if (!root) return rc;
    serve_bad bad;
    memset(&bad, 0, sizeof bad);
    bool add_special = false, parse_special = true, with_pieces = false;
    const cJSON *content = serve_field(root, "content");
    bool ok = serve_get_bool(root, "add_special", &add_special, &bad) &&
              serve_get_bool(root, "parse_special", &parse_special, &bad) &&
              serve_get_bool(root, "with_pieces", &with_pieces, &bad);
    if (ok && !cJSON_IsString(content))
        ok = serve_bad_set(&bad, 400, "content", "invalid_type", "'content' must be a string");
    if (ok && !parse_special)
        ok = serve_bad_set(&bad, 400, "parse_special", "unsupported_parameter", "'parse_special': "
                           "false is not supported: added tokens such as <|im_start|> written in "
                           "the text always become their ids");
    if (!ok) {
        cJSON_Delete(root);
        return reply_bad(c, s, &bad);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    qvl_error err = {0};
    qvl_status st = qvl_engine_tokenize(s->engine, content->valuestring,
                                        strlen(content->valuestring), &ids, &n, &err);
    cJSON_Delete(root);
    if (st != QVL_OK) return serve_reply_error(c, s, 500, err.msg, NULL, NULL);
    char *out = tokens_json(s, ids, n, with_pieces);
    free(ids);
    return serve_reply(c, s, 200, "application/json", out);
}

enum MHD_Result serve_detokenize(struct MHD_Connection *c, serve_server *s, const char *body,
                                 size_t len) {
    enum MHD_Result rc;
    cJSON *root = body_object(c, s, body, len, &rc);
    if (!root) return rc;
    serve_bad bad;
    memset(&bad, 0, sizeof bad);
    const cJSON *tokens = serve_field(root, "tokens");
    const size_t n = cJSON_IsArray(tokens) ? (size_t)cJSON_GetArraySize(tokens) : 0;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    bool ok = ids != NULL || serve_bad_set(&bad, 500, NULL, NULL, "out of memory");
    if (ok && !cJSON_IsArray(tokens))
        ok = serve_bad_set(&bad, 400, "tokens", "invalid_type", "'tokens' must be a list of "
                           "token ids");
    size_t k = 0;
    const cJSON *v;
    if (ok) {
        cJSON_ArrayForEach(v, tokens) {
            const double d = cJSON_IsNumber(v) ? v->valuedouble : 0.5;
            if (!(d >= INT32_MIN && d <= INT32_MAX) || d != (double)(int64_t)d) {
                ok = serve_bad_set(&bad, 400, "tokens", "invalid_type", "token %zu is not a "
                                   "token id (an integer)", k);
                break;
            }
            ids[k++] = (int32_t)d;
        }
    }
    cJSON_Delete(root);
    char *text = NULL;
    qvl_error err = {0};
    if (ok) {
        qvl_status st = qvl_engine_detokenize(s->engine, ids, k, &text, NULL, &err);
        if (st != QVL_OK)
            ok = serve_bad_set(&bad, st == QVL_E_NOMEM ? 500 : 400, "tokens", st == QVL_E_NOMEM
                               ? NULL : "invalid_value", "%s", err.msg);
    }
    free(ids);
    if (!ok) return reply_bad(c, s, &bad);
    cJSON *out = cJSON_CreateObject();
    char *json = out && cJSON_AddStringToObject(out, "content", text) ? cJSON_PrintUnformatted(out)
                                                                      : NULL;
    cJSON_Delete(out);
    free(text);
    return serve_reply(c, s, 200, "application/json", json);
}
