/* OpenAI response shapes, built with cJSON (which escapes the text). */
#include "serve_oai.h"

#include <cjson/cJSON.h>
#include <stddef.h>

static char *print_free(cJSON *root, bool ok) {
    char *s = ok && root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

static bool add_string_or_null(cJSON *obj, const char *key, const char *value) {
    return value && value[0] ? cJSON_AddStringToObject(obj, key, value) != NULL
                             : cJSON_AddNullToObject(obj, key) != NULL;
}

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 500: return "server_error";
    case 503: return "service_unavailable_error";
    default: return "invalid_request_error";
    }
}

char *serve_oai_error(int status, const char *message, const char *param, const char *code) {
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    bool ok = e && cJSON_AddStringToObject(e, "message", message) &&
              cJSON_AddStringToObject(e, "type", error_type(status)) &&
              add_string_or_null(e, "param", param) && add_string_or_null(e, "code", code);
    return print_free(root, ok);
}

static cJSON *meta_object(const serve_oai_meta *m, const char *object) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    if (!cJSON_AddStringToObject(root, "id", m->id) ||
        !cJSON_AddStringToObject(root, "object", object) ||
        !cJSON_AddNumberToObject(root, "created", (double)m->created) ||
        !cJSON_AddStringToObject(root, "model", m->model) ||
        !cJSON_AddNullToObject(root, "system_fingerprint")) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static bool add_usage(cJSON *root, const serve_oai_usage *u) {
    cJSON *o = cJSON_AddObjectToObject(root, "usage");
    cJSON *d = o ? cJSON_CreateObject() : NULL;
    bool ok = d && cJSON_AddNumberToObject(o, "prompt_tokens", (double)u->prompt) &&
              cJSON_AddNumberToObject(o, "completion_tokens", (double)u->completion) &&
              cJSON_AddNumberToObject(o, "total_tokens", (double)(u->prompt + u->completion)) &&
              cJSON_AddNumberToObject(d, "cached_tokens", (double)u->cached);
    if (!ok) {
        cJSON_Delete(d);
        return false;
    }
    cJSON_AddItemToObject(o, "prompt_tokens_details", d);
    return true;
}

/* Adds c's logprobs (or null) and tool_calls (into `into`, when any) to the choice object;
 * both are taken either way. */
static bool add_taken(cJSON *choice, cJSON *into, serve_oai_choice *c) {
    cJSON *lp = c->logprobs, *tc = c->tool_calls;
    c->logprobs = c->tool_calls = NULL;
    if (!choice || !into) {
        cJSON_Delete(lp);
        cJSON_Delete(tc);
        return false;
    }
    bool ok = true;
    if (tc && !cJSON_AddItemToObject(into, "tool_calls", tc)) {
        cJSON_Delete(tc);
        ok = false;
    }
    if (lp) {
        if (!ok || !cJSON_AddItemToObject(choice, "logprobs", lp)) {
            cJSON_Delete(lp);
            ok = false;
        }
    } else if (ok) {
        ok = cJSON_AddNullToObject(choice, "logprobs") != NULL;
    }
    return ok;
}

/* A text completion's choice: {text, index, logprobs, finish_reason}; logprobs taken. */
static bool add_text_choice(cJSON *list, int index, serve_oai_choice *ch) {
    cJSON *c = cJSON_CreateObject();
    if (!c || !cJSON_AddItemToArray(list, c)) {
        cJSON_Delete(c);
        cJSON_Delete(ch->logprobs);
        ch->logprobs = NULL;
        return false;
    }
    bool ok = cJSON_AddStringToObject(c, "text", ch->content ? ch->content : "") &&
              cJSON_AddNumberToObject(c, "index", index);
    return add_taken(ok ? c : NULL, c, ch) && add_string_or_null(c, "finish_reason", ch->finish);
}

static const char *object_name(const serve_oai_meta *m, bool chunk) {
    if (m->api == SERVE_API_TEXT) return "text_completion";
    return chunk ? "chat.completion.chunk" : "chat.completion";
}

char *serve_oai_completion(const serve_oai_meta *m, serve_oai_choice *choices, int n,
                           const serve_oai_usage *u) {
    cJSON *root = meta_object(m, object_name(m, false));
    cJSON *list = root ? cJSON_AddArrayToObject(root, "choices") : NULL;
    bool ok = list != NULL;
    for (int i = 0; i < n; i++) {
        serve_oai_choice *ch = &choices[i];
        if (m->api == SERVE_API_TEXT) {
            if (ok) ok = add_text_choice(list, i, ch);
            continue;
        }
        cJSON *c = ok ? cJSON_CreateObject() : NULL;
        if (c) cJSON_AddItemToArray(list, c);
        cJSON *msg = c ? cJSON_AddObjectToObject(c, "message") : NULL;
        ok = msg && cJSON_AddNumberToObject(c, "index", i) &&
             cJSON_AddStringToObject(msg, "role", "assistant") &&
             (ch->content ? cJSON_AddStringToObject(msg, "content", ch->content)
                          : cJSON_AddNullToObject(msg, "content")) &&
             cJSON_AddNullToObject(msg, "refusal");
        if (!add_taken(ok ? c : NULL, msg, ch)) ok = false;
        ok = ok && cJSON_AddStringToObject(c, "finish_reason", ch->finish);
    }
    for (int i = 0; i < n; i++) { /* whatever a failure left untaken */
        cJSON_Delete(choices[i].logprobs);
        cJSON_Delete(choices[i].tool_calls);
        choices[i].logprobs = choices[i].tool_calls = NULL;
    }
    ok = ok && add_usage(root, u);
    return print_free(root, ok);
}

char *serve_oai_chunk(const serve_oai_meta *m, int index, serve_oai_choice *ch, bool usage_null) {
    cJSON *root = meta_object(m, object_name(m, true));
    cJSON *choices = root ? cJSON_AddArrayToObject(root, "choices") : NULL;
    if (m->api == SERVE_API_TEXT) {
        bool ok = choices && add_text_choice(choices, index, ch);
        if (ok && usage_null) ok = cJSON_AddNullToObject(root, "usage") != NULL;
        if (!choices) {
            cJSON_Delete(ch->logprobs);
            ch->logprobs = NULL;
        }
        return print_free(root, ok);
    }
    cJSON *c = choices ? cJSON_CreateObject() : NULL;
    if (c) cJSON_AddItemToArray(choices, c);
    cJSON *delta = c ? cJSON_AddObjectToObject(c, "delta") : NULL;
    bool ok = delta && cJSON_AddNumberToObject(c, "index", index);
    if (ok && ch->role) ok = cJSON_AddStringToObject(delta, "role", "assistant") != NULL;
    if (ok && ch->content) ok = cJSON_AddStringToObject(delta, "content", ch->content) != NULL;
    if (!add_taken(ok ? c : NULL, delta, ch)) ok = false;
    if (ok) ok = add_string_or_null(c, "finish_reason", ch->finish);
    if (ok && usage_null) ok = cJSON_AddNullToObject(root, "usage") != NULL;
    return print_free(root, ok);
}

char *serve_oai_usage_chunk(const serve_oai_meta *m, const serve_oai_usage *u) {
    cJSON *root = meta_object(m, object_name(m, true));
    bool ok = root && cJSON_AddArrayToObject(root, "choices") && add_usage(root, u);
    return print_free(root, ok);
}

/* {id, object: "model", created, owned_by} into e. */
static bool model_fields(cJSON *e, const char *model, long long created) {
    return e && cJSON_AddStringToObject(e, "id", model) &&
           cJSON_AddStringToObject(e, "object", "model") &&
           cJSON_AddNumberToObject(e, "created", (double)created) &&
           cJSON_AddStringToObject(e, "owned_by", "qvl");
}

char *serve_oai_models(const char *model, long long created) {
    cJSON *root = cJSON_CreateObject();
    cJSON *data = root ? cJSON_AddArrayToObject(root, "data") : NULL;
    cJSON *e = data ? cJSON_CreateObject() : NULL;
    if (e) cJSON_AddItemToArray(data, e);
    bool ok = e && cJSON_AddStringToObject(root, "object", "list") &&
              model_fields(e, model, created);
    return print_free(root, ok);
}

char *serve_oai_model(const char *model, long long created) {
    cJSON *root = cJSON_CreateObject();
    return print_free(root, model_fields(root, model, created));
}

char *serve_oai_slots(const qvl_engine_slot_info *slots, int n, int64_t n_ctx) {
    cJSON *root = cJSON_CreateArray();
    bool ok = root != NULL;
    for (int i = 0; ok && i < n; i++) {
        cJSON *s = cJSON_CreateObject();
        ok = s && cJSON_AddItemToArray(root, s);
        cJSON *next = ok ? cJSON_CreateObject() : NULL;
        ok = ok && next && cJSON_AddNumberToObject(s, "id", slots[i].id) &&
             cJSON_AddNumberToObject(s, "n_ctx", (double)n_ctx) &&
             cJSON_AddBoolToObject(s, "is_processing", slots[i].busy) &&
             cJSON_AddNumberToObject(s, "n_prompt_tokens", (double)slots[i].n_prompt) &&
             cJSON_AddNumberToObject(s, "n_cached_tokens", (double)slots[i].n_cached) &&
             cJSON_AddNumberToObject(next, "n_decoded", (double)slots[i].n_generated) &&
             cJSON_AddItemToObject(s, "next_token", next);
        if (!ok && next && !cJSON_GetObjectItem(s, "next_token")) cJSON_Delete(next);
    }
    return print_free(root, ok);
}
