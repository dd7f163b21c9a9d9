/* Request fields qvl does not support and that would change the answer: refused with a 400
 * naming the field instead of being dropped, so a client never gets an answer made under
 * settings other than the ones it asked for. A field given with its neutral value (the one
 * that changes nothing: llama-server's defaults, which some clients always send) or null
 * passes. Fields that cannot change the answer (user, metadata, store, ...) and fields that
 * only tune a refused one (mirostat_tau beside mirostat) are ignored, as are unknown ones;
 * docs/serving.md lists them. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

#include "serve_request.h"

typedef enum neutral {
    N_NONE,   /* any value is refused */
    N_NUMBER, /* only the number `value` passes */
    N_FALSE,  /* only false passes */
    N_EMPTY,  /* only "" passes */
} neutral;

enum { CHAT = 1, TEXT = 2, BOTH = CHAT | TEXT };

typedef struct refused_field {
    const char *name;
    unsigned apis;
    neutral kind;
    double value;
    const char *instead; /* what to use instead, or NULL */
} refused_field;

static const refused_field refused[] = {
    /* llama-server's samplers that qvl's sampler does not have */
    {"mirostat", BOTH, N_NUMBER, 0, NULL},
    {"tfs_z", BOTH, N_NUMBER, 1, NULL},
    {"typical_p", BOTH, N_NUMBER, 1, NULL},
    {"dry_multiplier", BOTH, N_NUMBER, 0, NULL},
    {"xtc_probability", BOTH, N_NUMBER, 0, NULL},
    {"dynatemp_range", BOTH, N_NUMBER, 0, NULL},
    {"top_n_sigma", BOTH, N_NUMBER, -1, NULL},
    {"min_keep", BOTH, N_NUMBER, 0, NULL},
    {"samplers", BOTH, N_NONE, 0, NULL},
    {"ignore_eos", BOTH, N_FALSE, 0, NULL},
    {"n_probs", BOTH, N_NUMBER, 0, "logprobs"},
    {"post_sampling_probs", BOTH, N_FALSE, 0, NULL},
    {"t_max_predict_ms", BOTH, N_NUMBER, 0, "max_tokens"},
    {"lora", BOTH, N_NONE, 0, NULL},
    {"image_data", BOTH, N_NONE, 0, "image_url parts in /v1/chat/completions"},
    /* vLLM's guided decoding */
    {"guided_json", BOTH, N_NONE, 0, "response_format"},
    {"guided_regex", BOTH, N_NONE, 0, NULL},
    {"guided_choice", BOTH, N_NONE, 0, NULL},
    {"guided_grammar", BOTH, N_NONE, 0, "grammar"},
    {"chat_template_kwargs", BOTH, N_NONE, 0, NULL},
    {"continue_final_message", CHAT, N_FALSE, 0, NULL},
    /* OpenAI's */
    {"audio", BOTH, N_NONE, 0, NULL},
    {"functions", BOTH, N_NONE, 0, "tools"},
    {"function_call", BOTH, N_NONE, 0, "tool_choice"},
    {"web_search_options", BOTH, N_NONE, 0, NULL},
    {"echo", TEXT, N_FALSE, 0, NULL},
    {"suffix", TEXT, N_EMPTY, 0, NULL},
    {"tools", TEXT, N_NONE, 0, "/v1/chat/completions"},
    {"tool_choice", TEXT, N_NONE, 0, "/v1/chat/completions"},
    {"messages", TEXT, N_NONE, 0, "/v1/chat/completions"},
    {"prompt", CHAT, N_NONE, 0, "/v1/completions"},
};

static bool is_neutral(const refused_field *f, const cJSON *v) {
    switch (f->kind) {
    case N_NUMBER: return cJSON_IsNumber(v) && v->valuedouble == f->value;
    case N_FALSE: return cJSON_IsFalse(v);
    case N_EMPTY: return cJSON_IsString(v) && v->valuestring[0] == '\0';
    default: return false;
    }
}

static bool refuse(serve_bad *bad, const char *name, const char *instead) {
    return serve_bad_set(bad, 400, name, "unsupported_parameter",
                         "'%s' is not supported by qvl serve%s%s (docs/serving.md lists the "
                         "fields it takes and ignores)", name, instead ? "; use " : "",
                         instead ? instead : "");
}

/* modalities: only ["text"] (any audio output is refused). */
static bool text_only(const cJSON *v) {
    if (!cJSON_IsArray(v)) return false;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) if (!cJSON_IsString(m) || strcmp(m->valuestring, "text") != 0) return false;
    return true;
}

/* repeat_last_n (llama-server's window of the repetition penalty): qvl's penalty counts the
 * whole prompt and answer, which is -1; any other window changes the answer only when a
 * penalty is on. */
static bool window_changes(const cJSON *root, const char *name) {
    const cJSON *w = serve_field(root, name);
    if (!w || (cJSON_IsNumber(w) && w->valuedouble == -1)) return false;
    const cJSON *p = serve_field(root, "repetition_penalty");
    if (!p) p = serve_field(root, "repeat_penalty");
    return p && !(cJSON_IsNumber(p) && p->valuedouble == 1);
}

bool serve_refuse_unsupported(const cJSON *root, serve_api api, int n, serve_bad *bad) {
    const unsigned bit = api == SERVE_API_TEXT ? TEXT : CHAT;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const refused_field *f = &refused[i];
        const cJSON *v = (f->apis & bit) ? serve_field(root, f->name) : NULL;
        if (v && !is_neutral(f, v)) return refuse(bad, f->name, f->instead);
    }
    const cJSON *m = serve_field(root, "modalities");
    if (m && !text_only(m)) return refuse(bad, "modalities", "[\"text\"]");
    const cJSON *best = serve_field(root, "best_of");
    if (best && !(cJSON_IsNumber(best) && (best->valuedouble == 1 || best->valuedouble == n)))
        return refuse(bad, "best_of", "n");
    for (const char *const *w = (const char *const[]){"repeat_last_n", "penalty_last_n", NULL}; *w; w++)
        if (window_changes(root, *w)) return refuse(bad, *w, "-1 (the whole context)");
    return true;
}
