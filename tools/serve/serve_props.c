/* GET /props (serve_props.h). chat_template is the model's own Jinja template as its files
 * carry it, for clients that show or inspect it; qvl renders prompts with its built-in ChatML
 * (qvl/engine_prompt.h), which follows that template for Qwen3-VL. */
#define _POSIX_C_SOURCE 200809L

#include "serve_props.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qvl/file.h"

#ifndef QVL_VERSION
#define QVL_VERSION "unknown"
#endif
#ifndef QVL_GIT_COMMIT
#define QVL_GIT_COMMIT "unknown"
#endif

/* Largest template file read (tokenizer_config.json is tens of KB). */
#define PROPS_MAX_FILE ((size_t)8 << 20)

/* dir/name, or NULL (absent, not a regular file, too large, out of memory). */
static char *read_file(const char *dir, const char *name, size_t *len) {
    char *path = qvl_path_join(dir, name);
    char *text = NULL;
    qvl_error err = {0};
    if (path && qvl_read_file(path, PROPS_MAX_FILE, QVL_E_NOT_FOUND, &text, len, &err) != QVL_OK)
        text = NULL;
    free(path);
    return text;
}

/* The "chat_template" of a JSON file: a string, or a list of {name, template} (the one named
 * "default", else the first). */
static char *template_in_json(const char *dir, const char *name) {
    size_t len = 0;
    char *text = read_file(dir, name, &len);
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsArray(t)) {
        const cJSON *e, *pick = NULL;
        cJSON_ArrayForEach(e, t) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (!pick || (cJSON_IsString(n) && strcmp(n->valuestring, "default") == 0)) pick = e;
        }
        t = pick ? cJSON_GetObjectItemCaseSensitive(pick, "template") : NULL;
    }
    char *out = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(root);
    return out;
}

/* The model directory's chat template (the files transformers reads, newest first); NULL for
 * none (or a GGUF file). */
static char *chat_template(const char *model) {
    struct stat st;
    if (stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
    size_t len;
    char *t = read_file(model, "chat_template.jinja", &len);
    if (t && strlen(t) != len) { /* a NUL inside: not a template */
        free(t);
        t = NULL;
    }
    if (!t) t = template_in_json(model, "chat_template.json");
    if (!t) t = template_in_json(model, "tokenizer_config.json");
    return t;
}

static cJSON *params_json(const qvl_sampling_params *d) {
    cJSON *p = cJSON_CreateObject();
    cJSON *stop = p ? cJSON_AddArrayToObject(p, "stop") : NULL;
    cJSON *samplers = stop ? cJSON_AddArrayToObject(p, "samplers") : NULL;
    /* qvl's sampler order (runtime/src/sampling.c) in llama-server's names */
    static const char *const order[] = {"penalties", "top_k", "top_p", "min_p", "temperature"};
    bool ok = samplers && cJSON_AddNumberToObject(p, "n_predict", -1) &&
              cJSON_AddNumberToObject(p, "max_tokens", -1) &&
              cJSON_AddNumberToObject(p, "temperature", d->temperature) &&
              cJSON_AddNumberToObject(p, "top_k", d->top_k) &&
              cJSON_AddNumberToObject(p, "top_p", d->top_p) &&
              cJSON_AddNumberToObject(p, "min_p", d->min_p) &&
              cJSON_AddNumberToObject(p, "repeat_last_n", -1) &&
              cJSON_AddNumberToObject(p, "repeat_penalty", d->repetition_penalty) &&
              cJSON_AddNumberToObject(p, "presence_penalty", d->presence_penalty) &&
              cJSON_AddNumberToObject(p, "frequency_penalty", 0) &&
              cJSON_AddNumberToObject(p, "n_probs", 0) &&
              cJSON_AddStringToObject(p, "grammar", "") &&
              cJSON_AddBoolToObject(p, "stream", false);
    for (size_t i = 0; ok && i < sizeof order / sizeof order[0]; i++) {
        cJSON *s = cJSON_CreateString(order[i]);
        ok = s && cJSON_AddItemToArray(samplers, s);
        if (!ok) cJSON_Delete(s);
    }
    if (!ok) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}

char *serve_props_json(serve_server *s) {
    const serve_config *cfg = s->cfg;
    cJSON *root = cJSON_CreateObject();
    cJSON *gen = root ? cJSON_AddObjectToObject(root, "default_generation_settings") : NULL;
    cJSON *params = gen ? params_json(qvl_engine_sampling_defaults(s->engine)) : NULL;
    bool ok = params && cJSON_AddItemToObject(gen, "params", params);
    if (!ok) cJSON_Delete(params);
    cJSON *mod = ok ? cJSON_AddObjectToObject(root, "modalities") : NULL;
    char *tmpl = mod ? chat_template(cfg->model) : NULL;
    ok = mod && cJSON_AddNumberToObject(gen, "id", 0) &&
         cJSON_AddNumberToObject(gen, "n_ctx", (double)cfg->ctx) &&
         cJSON_AddBoolToObject(gen, "is_processing", false) &&
         cJSON_AddNumberToObject(root, "total_slots", cfg->parallel) &&
         cJSON_AddStringToObject(root, "model_path", cfg->model) &&
         cJSON_AddStringToObject(root, "model_alias", cfg->model_id) &&
         cJSON_AddBoolToObject(mod, "vision", qvl_engine_picture_rules(s->engine) != NULL) &&
         cJSON_AddBoolToObject(mod, "audio", false) &&
         cJSON_AddStringToObject(root, "chat_template", tmpl ? tmpl : "") &&
         cJSON_AddStringToObject(root, "build_info", "qvl " QVL_VERSION " (commit "
                                 QVL_GIT_COMMIT ")") &&
         cJSON_AddBoolToObject(root, "is_sleeping", false);
    free(tmpl);
    char *out = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return out;
}
