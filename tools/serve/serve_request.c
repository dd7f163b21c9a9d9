/* Chat Completions and legacy Completions request parsing. Unknown keys are ignored (clients
 * send many); a value that would change the answer in a way qvl cannot honour is refused
 * rather than silently dropped (serve_fields.c). A null value counts as absent, as in OpenAI's
 * API. Structured output (response_format, logit_bias, logprobs, n) is serve_structured.c's,
 * tools serve_tools.c's. */
#define _POSIX_C_SOURCE 200809L

#include "serve_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qvl/engine_prompt.h"
#include "serve_json.h"
#include "serve_pyjson.h"

bool serve_bad_set(serve_bad *bad, int status, const char *param, const char *code,
                   const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bad->message, sizeof bad->message, fmt, ap);
    va_end(ap);
    /* Messages quote what the client sent (a role, a part type): keep them one printable line. */
    for (char *c = bad->message; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    bad->status = status;
    snprintf(bad->param, sizeof bad->param, "%s", param ? param : "");
    bad->code = code;
    return false;
}

/* The tokens the chat template writes around each picture (and the video ones it never writes
 * here). Typed as text they would reach the model as placeholders with no pixels behind them:
 * refused with the field that holds them, as the CLI refuses a typed <|image_pad|>. */
bool serve_check_text(const char *text, const char *param, serve_bad *bad) {
    for (const char *const *t = qvl_prompt_vision_tokens; *t; t++)
        if (strstr(text, *t))
            return serve_bad_set(bad, 400, param, "invalid_value",
                           "%s holds the special token %s, which only the server writes (it "
                           "stands for a picture): send pictures as image_url parts", param, *t);
    return true;
}

/* The rendered conversation holds each vision token exactly as often as the template writes
 * it: more means text parts joined into one (a part ending "<|image_" and the next starting
 * "pad|>"), which the per-string check cannot see. */
static bool check_prompt(const char *prompt, size_t n_images, size_t n_videos, serve_bad *bad) {
    for (const char *const *t = qvl_prompt_vision_tokens; *t; t++) {
        const size_t want = qvl_prompt_vision_token_count(*t, n_images, n_videos);
        size_t have = 0;
        for (const char *p = prompt; (p = strstr(p, *t)) != NULL; p++) have++;
        if (have != want)
            return serve_bad_set(bad, 400, "messages", "invalid_value",
                           "the messages' text, parts joined, spells the special token %s, "
                           "which only the server writes (it stands for a picture): send "
                           "pictures as image_url parts", *t);
    }
    return true;
}

void serve_request_free(serve_request *r) {
    if (!r) return;
    qvl_engine_request_free(r->gen);
    free(r->cache_salt);
    free(r->tools_text);
    free(r);
}
const cJSON *serve_field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

bool serve_get_number(const cJSON *obj, const char *key, double lo, double hi, bool *seen,
                       double *out, serve_bad *bad) {
    const cJSON *v = serve_field(obj, key);
    *seen = v != NULL;
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return serve_bad_set(bad, 400, key, "invalid_type", "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return serve_bad_set(bad, 400, key, "invalid_value", "'%s' must be in [%g, %g] (got %g)", key,
                       lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return true;
}

bool serve_get_int(const cJSON *obj, const char *key, double lo, double hi, bool *seen,
                    int64_t *out, serve_bad *bad) {
    double d = 0;
    if (!serve_get_number(obj, key, lo, hi, seen, &d, bad)) return false;
    if (*seen && d != floor(d))
        return serve_bad_set(bad, 400, key, "invalid_type", "'%s' must be an integer", key);
    if (*seen) *out = (int64_t)d;
    return true;
}

bool serve_get_bool(const cJSON *obj, const char *key, bool *out, serve_bad *bad) {
    const cJSON *v = serve_field(obj, key);
    if (!v) return true;
    if (!cJSON_IsBool(v))
        return serve_bad_set(bad, 400, key, "invalid_type", "'%s' must be true or false", key);
    *out = cJSON_IsTrue(v);
    return true;
}

static bool add_stop(serve_request *r, const cJSON *v, const char *param, serve_bad *bad) {
    if (!cJSON_IsString(v))
        return serve_bad_set(bad, 400, param, "invalid_type", "'stop' must be a string or a list of strings");
    size_t n = strlen(v->valuestring);
    if (n == 0) return serve_bad_set(bad, 400, param, "invalid_value", "a stop string is empty");
    if (n > SERVE_MAX_STOP_BYTES)
        return serve_bad_set(bad, 400, param, "invalid_value", "a stop string is over %d bytes",
                       SERVE_MAX_STOP_BYTES);
    char *copy = strdup(v->valuestring);
    if (!copy) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    r->gen->stops[r->gen->n_stops++] = copy;
    return true;
}

static bool parse_stop(const cJSON *root, serve_request *r, serve_bad *bad) {
    const cJSON *v = serve_field(root, "stop");
    if (!v) return true;
    r->gen->stops = calloc(SERVE_MAX_STOPS, sizeof *r->gen->stops);
    if (!r->gen->stops) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    if (cJSON_IsString(v)) return add_stop(r, v, "stop", bad);
    if (!cJSON_IsArray(v))
        return serve_bad_set(bad, 400, "stop", "invalid_type", "'stop' must be a string or a list of strings");
    if (cJSON_GetArraySize(v) > SERVE_MAX_STOPS)
        return serve_bad_set(bad, 400, "stop", "invalid_value", "'stop' holds more than %d strings",
                       SERVE_MAX_STOPS);
    const cJSON *s;
    cJSON_ArrayForEach(s, v) if (!add_stop(r, s, "stop", bad)) return false;
    return true;
}

/* A seed for requests without one: different for every request. */
static uint64_t fresh_seed(void) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t n = atomic_fetch_add(&counter, 1);
    return ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^ (n * 0x9e3779b97f4a7c15ULL) ^
           (uint64_t)getpid();
}

static bool parse_sampling(const cJSON *root, const serve_parse_ctx *ctx, serve_request *r,
                           serve_bad *bad) {
    qvl_sampling_params p = *ctx->defaults;
    bool seen;
    double d;
    int64_t i;
    if (!serve_get_number(root, "temperature", 0, 2, &seen, &d, bad)) return false;
    if (seen) p.temperature = (float)d;
    if (!serve_get_number(root, "top_p", 0, 1, &seen, &d, bad)) return false;
    if (seen) p.top_p = (float)d;
    if (!serve_get_number(root, "min_p", 0, 1, &seen, &d, bad)) return false;
    if (seen) p.min_p = (float)d;
    if (!serve_get_int(root, "top_k", -1, 1e9, &seen, &i, bad)) return false;
    if (seen) p.top_k = i < 0 ? 0 : (int32_t)i; /* -1 means off, as in vLLM */
    if (!serve_get_number(root, "presence_penalty", -2, 2, &seen, &d, bad)) return false;
    if (seen) p.presence_penalty = (float)d;
    if (!serve_get_number(root, "repetition_penalty", 1e-3, 100, &seen, &d, bad)) return false;
    if (!seen && !serve_get_number(root, "repeat_penalty", 1e-3, 100, &seen, &d, bad))
        return false; /* llama-server's name */
    if (seen) p.repetition_penalty = (float)d;
    if (!serve_get_number(root, "frequency_penalty", -2, 2, &seen, &d, bad)) return false;
    r->gen->frequency_penalty = seen ? (float)d : 0.0f;
    if (!serve_get_int(root, "seed", -9.2e18, 9.2e18, &seen, &i, bad)) return false;
    p.seed = seen ? (uint64_t)i : fresh_seed();
    r->gen->sampling = p;
    return true;
}

static bool parse_limits(const cJSON *root, serve_request *r, serve_bad *bad) {
    bool seen_a, seen_b;
    int64_t a = -1, b = -1;
    if (!serve_get_int(root, "max_tokens", 1, 1e9, &seen_a, &a, bad)) return false;
    if (!serve_get_int(root, "max_completion_tokens", 1, 1e9, &seen_b, &b, bad)) return false;
    r->gen->max_tokens = seen_b ? b : seen_a ? a : -1; /* the newer name wins */
    if (!seen_a && !seen_b) { /* llama-server's n_predict: -1 is no limit */
        if (!serve_get_int(root, "n_predict", -1, 1e9, &seen_a, &a, bad)) return false;
        if (seen_a && a == 0)
            return serve_bad_set(bad, 400, "n_predict", "invalid_value",
                                 "'n_predict' must be -1 (no limit) or at least 1");
        if (seen_a) r->gen->max_tokens = a;
    }
    if (!serve_get_bool(root, "stream", &r->stream, bad)) return false;
    const cJSON *so = serve_field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so))
            return serve_bad_set(bad, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
        if (!serve_get_bool(so, "include_usage", &r->include_usage, bad)) return false;
    }
    return true;
}

/* Room for one more picture or video, and the tokens the ones before it left: every item and
 * at least one text token and one answer token must fit the context. */
static bool media_room(serve_request *r, const serve_parse_ctx *ctx, const char *param,
                       int64_t *budget, serve_bad *bad) {
    if ((int)r->gen->n_pictures >= ctx->max_images)
        return serve_bad_set(bad, 400, param, "invalid_value", "more than %d images and videos in one "
                       "request (--max-images)", ctx->max_images);
    int64_t used = 0;
    for (size_t i = 0; i < r->gen->n_pictures; i++) used += r->gen->pictures[i].n_tokens;
    *budget = ctx->ctx - 2 - used;
    return true;
}

static bool add_image(qvl_prompt *chat, serve_request *r, const serve_parse_ctx *ctx,
                      const cJSON *part, const char *param, serve_bad *bad) {
    const cJSON *iu = serve_field(part, "image_url");
    const cJSON *url = cJSON_IsObject(iu) ? serve_field(iu, "url") : iu; /* object, or a bare string */
    if (!cJSON_IsString(url))
        return serve_bad_set(bad, 400, param, "invalid_type", "an image_url part needs image_url.url (a string)");
    if (!ctx->pictures)
        return serve_bad_set(bad, 400, param, "unsupported_value", "this model has no vision encoder");
    int64_t budget = 0;
    if (!media_room(r, ctx, param, &budget, bad)) return false;
    serve_image_limits lim = {.rules = ctx->pictures, .guard = ctx->guard, .image_dir = ctx->image_dir,
                              .max_file_bytes = ctx->max_file_bytes, .token_budget = budget};
    serve_image im;
    char msg[400];
    int st = serve_image_from_url(url->valuestring, &lim, &im, msg, sizeof msg);
    if (st != 0) return serve_bad_set(bad, st, param, st == 400 ? "invalid_image" : NULL, "%s", msg);
    r->gen->pictures[r->gen->n_pictures++] = im;
    qvl_error err = {0};
    if (qvl_prompt_add_picture(chat, &err) != QVL_OK) return serve_bad_set(bad, 500, NULL, NULL, "%s", err.msg);
    return true;
}

/* {"type": "video", "video": [frame URLs...], "fps": R} (fps beside the list, default as
 * transformers assumes), or {"type": "video_url", "video_url": {"url": ...}} (a file). */
static bool add_video(qvl_prompt *chat, serve_request *r, const serve_parse_ctx *ctx,
                      const cJSON *part, bool is_file, const char *param, serve_bad *bad) {
    const cJSON *frames = NULL, *url = NULL;
    if (is_file) {
        const cJSON *vu = serve_field(part, "video_url");
        url = cJSON_IsObject(vu) ? serve_field(vu, "url") : vu;
        if (!cJSON_IsString(url))
            return serve_bad_set(bad, 400, param, "invalid_type", "a video_url part needs video_url.url (a string)");
    } else {
        frames = serve_field(part, "video");
        if (!cJSON_IsArray(frames))
            return serve_bad_set(bad, 400, param, "invalid_type", "a video part needs 'video': a list of "
                           "frames (data: URLs or files under --image-dir)");
    }
    if (!ctx->videos)
        return serve_bad_set(bad, 400, param, "unsupported_value", "this model takes no videos");
    bool seen = false;
    double fps = QVL_VIDEO_FPS_DEFAULT;
    if (!serve_get_number(part, "fps", 1e-3, 1e6, &seen, &fps, bad)) {
        snprintf(bad->param, sizeof bad->param, "%.80s.fps", param);
        return false;
    }
    int64_t budget = 0;
    if (!media_room(r, ctx, param, &budget, bad)) return false;
    serve_video_limits lim = {.rules = ctx->videos, .guard = ctx->guard, .image_dir = ctx->image_dir,
                              .max_file_bytes = ctx->max_file_bytes, .token_budget = budget,
                              .max_frames = ctx->max_video_frames,
                              .max_seconds = ctx->max_video_seconds};
    serve_image im;
    char msg[400];
    int st;
    if (is_file) {
        st = serve_video_from_url(url->valuestring, &lim, &im, msg, sizeof msg);
    } else {
        const size_t n = (size_t)cJSON_GetArraySize(frames);
        const char **urls = calloc(n + 1, sizeof *urls);
        if (!urls) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
        size_t k = 0;
        const cJSON *f;
        cJSON_ArrayForEach(f, frames) {
            if (!cJSON_IsString(f)) {
                free(urls);
                return serve_bad_set(bad, 400, param, "invalid_type", "video frame %zu is not a string "
                               "(a data: URL or a file under --image-dir)", k + 1);
            }
            urls[k++] = f->valuestring;
        }
        st = serve_video_from_frames(urls, k, fps, &lim, &im, msg, sizeof msg);
        free(urls);
    }
    if (st != 0) return serve_bad_set(bad, st, param, st == 400 ? "invalid_video" : NULL, "%s", msg);
    r->gen->pictures[r->gen->n_pictures++] = im;
    qvl_error err = {0};
    if (qvl_prompt_add_video(chat, &err) != QVL_OK) return serve_bad_set(bad, 500, NULL, NULL, "%s", err.msg);
    return true;
}

static bool add_parts(qvl_prompt *chat, serve_request *r, const serve_parse_ctx *ctx,
                      const cJSON *content, size_t index, bool user, serve_bad *bad) {
    size_t k = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        char param[96];
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", index, k++);
        const cJSON *type = cJSON_IsObject(part) ? serve_field(part, "type") : NULL;
        if (!cJSON_IsString(type))
            return serve_bad_set(bad, 400, param, "invalid_type", "a content part needs a 'type'");
        qvl_error err = {0};
        if (strcmp(type->valuestring, "text") == 0) {
            const cJSON *text = serve_field(part, "text");
            if (!cJSON_IsString(text))
                return serve_bad_set(bad, 400, param, "invalid_type", "a text part needs 'text' (a string)");
            if (!serve_check_text(text->valuestring, param, bad)) return false;
            if (qvl_prompt_add_text(chat, text->valuestring, &err) != QVL_OK)
                return serve_bad_set(bad, 500, NULL, NULL, "%s", err.msg);
        } else if (strcmp(type->valuestring, "image_url") == 0) {
            if (!user)
                return serve_bad_set(bad, 400, param, "invalid_value", "only user messages may hold images");
            if (!add_image(chat, r, ctx, part, param, bad)) return false;
        } else if (strcmp(type->valuestring, "video") == 0 ||
                   strcmp(type->valuestring, "video_url") == 0) {
            if (!user)
                return serve_bad_set(bad, 400, param, "invalid_value", "only user messages may hold videos");
            if (!add_video(chat, r, ctx, part, type->valuestring[5] == '_', param, bad))
                return false;
        } else {
            return serve_bad_set(bad, 400, param, "unsupported_value",
                           "content part type '%.40s' is not supported (text, image_url, video, "
                           "video_url)", type->valuestring);
        }
    }
    return true;
}

/* An assistant message's tool_calls: [{id, type, function: {name, arguments}}], arguments a
 * JSON string (OpenAI's shape) or, leniently, the object itself. */
static bool add_tool_calls(qvl_prompt *chat, const cJSON *msg, qvl_prompt_role role,
                           const char *param, serve_bad *bad) {
    const cJSON *calls = serve_field(msg, "tool_calls");
    if (!calls) return true;
    if (role != QVL_ROLE_ASSISTANT || !cJSON_IsArray(calls))
        return serve_bad_set(bad, 400, param, "invalid_value",
                             "'tool_calls' is a list, in assistant messages only");
    size_t k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        char where[96];
        snprintf(where, sizeof where, "%.60s.tool_calls[%zu]", param, k++);
        const cJSON *fn = cJSON_IsObject(c) ? serve_field(c, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? serve_field(fn, "name") : NULL;
        const cJSON *args = cJSON_IsObject(fn) ? serve_field(fn, "arguments") : NULL;
        if (!cJSON_IsString(name) || (args && !cJSON_IsString(args) && !cJSON_IsObject(args)))
            return serve_bad_set(bad, 400, where, "invalid_type", "a tool call needs "
                                 "function.name (a string) and function.arguments (a JSON "
                                 "string)");
        char *text = !args ? strdup("{}") : cJSON_IsString(args) ? strdup(args->valuestring)
                                                                 : serve_pyjson(args);
        if (!text) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
        bool ok = serve_check_text(name->valuestring, where, bad) && serve_check_text(text, where, bad);
        qvl_error err = {0};
        if (ok && qvl_prompt_add_tool_call(chat, name->valuestring, text, &err) != QVL_OK)
            ok = serve_bad_set(bad, 500, NULL, NULL, "%s", err.msg);
        free(text);
        if (!ok) return false;
    }
    return true;
}

static bool add_message(qvl_prompt *chat, serve_request *r, const serve_parse_ctx *ctx,
                        const cJSON *msg, size_t index, serve_bad *bad) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", index);
    if (!cJSON_IsObject(msg)) return serve_bad_set(bad, 400, param, "invalid_type", "a message must be an object");
    const cJSON *role = serve_field(msg, "role");
    if (!cJSON_IsString(role)) return serve_bad_set(bad, 400, param, "invalid_type", "a message needs a 'role'");
    qvl_prompt_role cr;
    const char *rs = role->valuestring;
    /* OpenAI's newer "developer" role is the system prompt under another name. */
    if (strcmp(rs, "system") == 0 || strcmp(rs, "developer") == 0) cr = QVL_ROLE_SYSTEM;
    else if (strcmp(rs, "user") == 0) cr = QVL_ROLE_USER;
    else if (strcmp(rs, "assistant") == 0) cr = QVL_ROLE_ASSISTANT;
    else if (strcmp(rs, "tool") == 0) cr = QVL_ROLE_TOOL;
    else return serve_bad_set(bad, 400, param, "unsupported_value",
                        "role '%.40s' is not supported (system, developer, user, assistant, "
                        "tool)", rs);
    const cJSON *content = serve_field(msg, "content");
    qvl_error err = {0};
    qvl_status st;
    if (!content) {
        if (cr != QVL_ROLE_ASSISTANT)
            return serve_bad_set(bad, 400, param, "invalid_value", "a %s message needs 'content'", rs);
        st = qvl_prompt_add(chat, cr, "", &err);
    } else if (cJSON_IsString(content)) {
        char where[96];
        snprintf(where, sizeof where, "%s.content", param);
        if (!serve_check_text(content->valuestring, where, bad)) return false;
        st = qvl_prompt_add(chat, cr, content->valuestring, &err);
    } else if (cJSON_IsArray(content)) {
        st = qvl_prompt_add(chat, cr, NULL, &err);
        if (st == QVL_OK && !add_parts(chat, r, ctx, content, index, cr == QVL_ROLE_USER, bad))
            return false;
    } else {
        return serve_bad_set(bad, 400, param, "invalid_type", "'content' must be a string or a list of parts");
    }
    if (st != QVL_OK)
        return serve_bad_set(bad, st == QVL_E_NOMEM ? 500 : 400, param, "invalid_value", "%s", err.msg);
    return add_tool_calls(chat, msg, cr, param, bad);
}

/* cache_salt (vLLM's name): a non-empty string that partitions prefix reuse. */
static bool parse_cache_salt(const cJSON *root, serve_request *r, serve_bad *bad) {
    const cJSON *v = serve_field(root, "cache_salt");
    if (!v) return true;
    if (!cJSON_IsString(v) || v->valuestring[0] == '\0')
        return serve_bad_set(bad, 400, "cache_salt", "invalid_type", "'cache_salt' must be a non-empty string");
    r->cache_salt = strdup(v->valuestring);
    if (!r->cache_salt) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    return true;
}

static bool parse_messages(const cJSON *root, const serve_parse_ctx *ctx, serve_request *r,
                           serve_bad *bad) {
    const cJSON *msgs = serve_field(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return serve_bad_set(bad, 400, "messages", "invalid_value", "'messages' must be a non-empty list");
    if (cJSON_GetArraySize(msgs) > SERVE_MAX_MESSAGES)
        return serve_bad_set(bad, 400, "messages", "invalid_value", "more than %d messages",
                       SERVE_MAX_MESSAGES);
    r->gen->pictures = calloc((size_t)ctx->max_images + 1, sizeof *r->gen->pictures);
    qvl_prompt *chat = NULL;
    qvl_error err = {0};
    if (!r->gen->pictures || qvl_prompt_create(&chat, &err) != QVL_OK)
        return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    bool ok = true;
    if (r->tools_text && qvl_prompt_set_tools(chat, r->tools_text, &err) != QVL_OK)
        ok = serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    size_t index = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!ok) break;
        ok = add_message(chat, r, ctx, m, index++, bad);
        if (!ok) break;
    }
    if (ok && qvl_prompt_render(chat, true, &r->gen->prompt, NULL, &err) != QVL_OK)
        ok = serve_bad_set(bad, 400, "messages", "invalid_value", "%s", err.msg);
    size_t n_videos = 0;
    for (size_t i = 0; i < r->gen->n_pictures; i++) n_videos += r->gen->pictures[i].is_video;
    if (ok) ok = check_prompt(r->gen->prompt, r->gen->n_pictures - n_videos, n_videos, bad);
    qvl_prompt_free(chat);
    return ok;
}

/* One id of a token-id prompt. */
static bool prompt_id(const cJSON *v, size_t i, int32_t *out, serve_bad *bad) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= INT32_MIN && v->valuedouble <= INT32_MAX) ||
        v->valuedouble != floor(v->valuedouble))
        return serve_bad_set(bad, 400, "prompt", "invalid_type", "prompt token %zu is not a "
                             "token id (an integer)", i);
    *out = (int32_t)v->valuedouble;
    return true;
}

/* The legacy Completions prompt: a string, token ids, or a list of one of these (one prompt
 * per request). Raw: no chat template is applied. */
static bool parse_prompt(const cJSON *root, serve_request *r, serve_bad *bad) {
    const cJSON *p = serve_field(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child;
    else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && !cJSON_IsNumber(p->child))
        return serve_bad_set(bad, 400, "prompt", "unsupported_value", "one prompt per request: "
                             "give a string, a list of token ids, or a list of one of these");
    if (cJSON_IsString(p)) {
        if (!serve_check_text(p->valuestring, "prompt", bad)) return false;
        r->gen->prompt = strdup(p->valuestring);
        return r->gen->prompt ? true : serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    }
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
        return serve_bad_set(bad, 400, "prompt", "invalid_value", "'prompt' must be a non-empty "
                             "string or list of token ids");
    const size_t n = (size_t)cJSON_GetArraySize(p);
    r->gen->prompt_ids = malloc(n * sizeof *r->gen->prompt_ids);
    if (!r->gen->prompt_ids) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, p) {
        if (!prompt_id(v, r->gen->n_prompt_ids, &r->gen->prompt_ids[r->gen->n_prompt_ids], bad))
            return false;
        r->gen->n_prompt_ids++;
    }
    return true;
}

/* What follows the shared fields: a chat's tools and messages, or a text completion's prompt. */
static bool parse_input(const cJSON *root, const serve_parse_ctx *ctx, serve_request *r,
                        serve_bad *bad) {
    if (ctx->api == SERVE_API_TEXT) return parse_prompt(root, r, bad);
    return serve_tools_parse(root, r->gen, &r->tools_text, &r->read_calls, bad) &&
           parse_messages(root, ctx, r, bad);
}

bool serve_request_parse(const char *body, size_t len, const serve_parse_ctx *ctx,
                         serve_request **out, serve_bad *bad) {
    *out = NULL;
    memset(bad, 0, sizeof *bad);
    cJSON *root = serve_json_parse(body, len, SERVE_MAX_JSON_DEPTH, bad, NULL);
    if (!root) return false;
    serve_request *r = calloc(1, sizeof *r);
    if (r) r->gen = calloc(1, sizeof *r->gen);
    if (!r || !r->gen) {
        free(r);
        cJSON_Delete(root);
        return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    }
    bool ok = parse_limits(root, r, bad) && parse_sampling(root, ctx, r, bad) &&
              serve_parse_structured(root, ctx, r, bad) &&
              serve_refuse_unsupported(root, ctx->api, r->n, bad) &&
              parse_stop(root, r, bad) && parse_cache_salt(root, r, bad) &&
              parse_input(root, ctx, r, bad);
    cJSON_Delete(root);
    if (!ok) {
        serve_request_free(r);
        return false;
    }
    *out = r;
    return true;
}
