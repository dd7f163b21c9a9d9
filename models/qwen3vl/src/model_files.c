/* A model's parts from a Hugging Face directory or from GGUF files (qvl/model_files.h). */
#define _POSIX_C_SOURCE 200809L
#include "qvl/model_files.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qvl/log.h"
#include "qvl/qwen3vl_gguf.h"
#include "qvl/weights.h"

void qvl_model_files_free(qvl_model_files *f) {
    if (!f) return;
    free(f->dir);
    free(f->gguf);
    free(f->mmproj);
    memset(f, 0, sizeof *f);
}

qvl_status qvl_model_files_find(const char *model, const char *mmproj, qvl_model_files *out,
                                qvl_error *err) {
    memset(out, 0, sizeof *out);
    out->model = model;
    struct stat sb;
    if (!model || stat(model, &sb) != 0)
        return qvl_fail(err, QVL_E_NOT_FOUND, "model not found: %s", model ? model : "(none)");
    struct stat mb;
    if (mmproj && stat(mmproj, &mb) != 0)
        return qvl_fail(err, QVL_E_NOT_FOUND, "--mmproj: file not found: %s", mmproj);
    char config_path[PATH_MAX];
    snprintf(config_path, sizeof config_path, "%s/config.json", model);
    qvl_status st = QVL_OK;
    if (qvl_is_gguf_path(model)) {
        if (!(out->gguf = strdup(model))) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    } else if (S_ISDIR(sb.st_mode) && stat(config_path, &mb) == 0) {
        /* config.json makes it a Hugging Face directory, whatever GGUF files lie beside it */
        if (mmproj)
            st = qvl_fail(err, QVL_E_INVALID, "--mmproj goes with a GGUF model (-m FILE.gguf); "
                          "%s is a Hugging Face directory (config.json)", model);
        else if (!(out->dir = strdup(model)))
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    } else if (S_ISDIR(sb.st_mode)) {
        st = qvl_gguf_dir_files(model, &out->gguf, &out->mmproj, err);
        if (st == QVL_E_NOT_FOUND && mmproj) {
            st = qvl_fail(err, QVL_E_INVALID, "--mmproj goes with a GGUF model (-m FILE.gguf); "
                          "%s holds none", model);
        } else if (st == QVL_E_NOT_FOUND) {
            st = (out->dir = strdup(model)) ? QVL_OK
                                             : qvl_fail(err, QVL_E_NOMEM, "out of memory");
        }
    } else {
        st = qvl_fail(err, QVL_E_INVALID, "%s is neither a model directory nor a GGUF file",
                      model);
    }
    if (st == QVL_OK && mmproj) {
        free(out->mmproj);
        if (!(out->mmproj = strdup(mmproj))) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    if (st != QVL_OK) qvl_model_files_free(out);
    return st;
}

static qvl_status open_text(const qvl_model_files *f, qvl_gguf **g, qvl_error *err) {
    return qvl_gguf_open(f->gguf, g, err);
}

qvl_status qvl_model_files_config(const qvl_model_files *f, qvl_qwen3vl_config *out,
                                  qvl_error *err) {
    if (f->dir) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/config.json", f->dir);
        return qvl_qwen3vl_config_load(path, out, err);
    }
    qvl_gguf *text = NULL, *vision = NULL;
    qvl_status st = open_text(f, &text, err);
    if (st == QVL_OK && f->mmproj) st = qvl_gguf_open(f->mmproj, &vision, err);
    if (st == QVL_OK) st = qvl_qwen3vl_gguf_config(text, vision, out, err);
    qvl_gguf_close(text);
    qvl_gguf_close(vision);
    return st;
}

qvl_status qvl_model_files_open(const qvl_model_files *f, qvl_qwen3vl_config *cfg,
                                qvl_weights **w, qvl_error *err) {
    *w = NULL;
    qvl_status st = qvl_model_files_config(f, cfg, err);
    if (st != QVL_OK) return st;
    if (f->dir) return qvl_weights_open(f->dir, cfg, w, err);
    qvl_gguf *text = NULL, *vision = NULL;
    st = open_text(f, &text, err);
    if (st == QVL_OK && f->mmproj) st = qvl_gguf_open(f->mmproj, &vision, err);
    if (st != QVL_OK) {
        qvl_gguf_close(text);
        return st;
    }
    return qvl_qwen3vl_gguf_weights(text, vision, cfg, w, err); /* takes both files */
}

qvl_status qvl_model_files_tokenizer(const qvl_model_files *f, qvl_tokenizer **out,
                                     qvl_error *err) {
    *out = NULL;
    if (f->dir) {
        char path[PATH_MAX];
        struct stat sb;
        snprintf(path, sizeof path, "%s/tokenizer.json", f->dir);
        if (stat(path, &sb) != 0) return qvl_fail(err, QVL_E_NOT_FOUND, "%s: not found", path);
        return qvl_tokenizer_load(path, out, err);
    }
    qvl_gguf *g = NULL;
    qvl_status st = open_text(f, &g, err);
    if (st == QVL_OK && !qvl_gguf_find(g, "tokenizer.ggml.tokens"))
        st = qvl_fail(err, QVL_E_NOT_FOUND, "%s: no tokenizer (tokenizer.ggml.tokens)", f->gguf);
    if (st == QVL_OK) st = qvl_qwen3vl_gguf_tokenizer(g, out, err);
    qvl_gguf_close(g);
    return st;
}

static void add_eos(qvl_gen_config *gc, int64_t id) {
    if (id < 0 || id > INT32_MAX || gc->n_eos >= QVL_GEN_MAX_EOS) return;
    for (int32_t i = 0; i < gc->n_eos; i++)
        if (gc->eos_token_ids[i] == (int32_t)id) return;
    gc->eos_token_ids[gc->n_eos++] = (int32_t)id;
}

static int64_t token_id(const qvl_gguf *g, const char *text) {
    const qvl_gguf_value *tokens = qvl_gguf_find(g, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != QVL_GGUF_ARRAY || tokens->v.arr.type != QVL_GGUF_STRING)
        return -1;
    for (uint64_t i = 0; i < tokens->v.arr.count; i++) {
        qvl_gguf_str s;
        if (qvl_gguf_arr_str(tokens, i, &s) && qvl_gguf_str_eq(s, text)) return (int64_t)i;
    }
    return -1;
}

/* general.sampling.* (written by newer converters from generation_config.json): when present,
 * sampling as the model's authors set it; otherwise greedy. */
static qvl_status gguf_sampling(const qvl_gguf *g, qvl_gen_config *gc, qvl_error *err) {
    qvl_status st = QVL_OK;
    double x = 0;
    uint64_t k = 0;
    if (qvl_gguf_find(g, "general.sampling.temp") &&
        (st = qvl_gguf_get_float(g, "general.sampling.temp", &x, err)) == QVL_OK) {
        gc->temperature = x;
        gc->do_sample = x > 0;
    }
    if (st == QVL_OK && qvl_gguf_find(g, "general.sampling.top_k") &&
        (st = qvl_gguf_get_uint(g, "general.sampling.top_k", INT32_MAX, &k, err)) == QVL_OK)
        gc->top_k = (int32_t)k;
    if (st == QVL_OK && qvl_gguf_find(g, "general.sampling.top_p") &&
        (st = qvl_gguf_get_float(g, "general.sampling.top_p", &x, err)) == QVL_OK)
        gc->top_p = x;
    if (st == QVL_OK && qvl_gguf_find(g, "general.sampling.min_p") &&
        (st = qvl_gguf_get_float(g, "general.sampling.min_p", &x, err)) == QVL_OK)
        gc->min_p = x;
    if (st == QVL_OK && !(gc->temperature >= 0 && gc->top_p >= 0 && gc->top_p <= 1 &&
                          gc->min_p >= 0 && gc->min_p <= 1))
        st = qvl_fail(err, QVL_E_INVALID, "%s: general.sampling.* holds values out of range",
                      qvl_gguf_path(g));
    return st;
}

qvl_status qvl_model_files_gen_config(const qvl_model_files *f, qvl_gen_config *out,
                                      qvl_error *err) {
    qvl_gen_config_defaults(out);
    if (f->dir) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/generation_config.json", f->dir);
        return qvl_gen_config_load(path, out, err);
    }
    qvl_gguf *g = NULL;
    qvl_status st = open_text(f, &g, err);
    if (st != QVL_OK) return st;
    static const char *const keys[] = {"tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id"};
    for (size_t i = 0; st == QVL_OK && i < sizeof keys / sizeof *keys; i++) {
        uint64_t id = 0;
        if (!qvl_gguf_find(g, keys[i])) continue;
        st = qvl_gguf_get_uint(g, keys[i], INT32_MAX, &id, err);
        if (st == QVL_OK) add_eos(out, (int64_t)id);
    }
    if (st == QVL_OK) {
        add_eos(out, token_id(g, "<|im_end|>"));
        add_eos(out, token_id(g, "<|endoftext|>"));
        st = gguf_sampling(g, out, err);
    }
    if (st == QVL_OK && qvl_gguf_find(g, "tokenizer.ggml.bos_token_id")) {
        uint64_t id = 0;
        st = qvl_gguf_get_uint(g, "tokenizer.ggml.bos_token_id", INT32_MAX, &id, err);
        out->bos_token_id = (int64_t)id;
    }
    qvl_gguf_close(g);
    return st;
}

qvl_status qvl_model_files_no_vision(const qvl_model_files *f, qvl_error *err) {
    if (f->gguf)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: the vision part of the model is missing "
                        "(pass --mmproj MMPROJ.gguf for pictures and videos)", f->gguf);
    return qvl_fail(err, QVL_E_UNSUPPORTED, "%s/config.json: the model has no vision_config / "
                    "image_token_id", f->dir);
}

qvl_status qvl_model_files_preprocess(const qvl_model_files *f, const qvl_vision_config *v,
                                      qvl_preprocess_config *out, const char **source,
                                      qvl_error *err) {
    if (f->dir) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/preprocessor_config.json", f->dir);
        *source = "preprocessor_config.json";
        qvl_status st = qvl_preprocess_config_load(path, v, out, err);
        if (st == QVL_E_NOT_FOUND) {
            QVL_LOG_I("%s not found: the Qwen3-VL defaults", path);
            qvl_preprocess_config_default(v, out);
            *source = "the Qwen3-VL processor";
            st = QVL_OK;
        }
        return st;
    }
    if (!f->mmproj) return qvl_model_files_no_vision(f, err);
    *source = "the Qwen3-VL processor with the mmproj's mean and std";
    qvl_gguf *g = NULL;
    qvl_status st = qvl_gguf_open(f->mmproj, &g, err);
    if (st == QVL_OK) st = qvl_qwen3vl_gguf_preprocess(g, v, out, err);
    qvl_gguf_close(g);
    return st;
}

qvl_status qvl_model_files_video(const qvl_model_files *f, const qvl_vision_config *v,
                                 qvl_video_config *out, qvl_error *err) {
    if (!f->dir) {
        /* The video processor's defaults, with the picture normalisation the mmproj gives. */
        qvl_video_config_default(v, out);
        qvl_preprocess_config pc;
        const char *src;
        qvl_status st = qvl_model_files_preprocess(f, v, &pc, &src, err);
        if (st != QVL_OK) return st;
        memcpy(out->pc.image_mean, pc.image_mean, sizeof pc.image_mean);
        memcpy(out->pc.image_std, pc.image_std, sizeof pc.image_std);
        return QVL_OK;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/video_preprocessor_config.json", f->dir);
    qvl_status st = qvl_video_config_load(path, v, out, err);
    if (st == QVL_E_NOT_FOUND) {
        QVL_LOG_I("%s not found: the Qwen3-VL video processor's defaults", path);
        qvl_video_config_default(v, out);
        st = QVL_OK;
    }
    return st;
}
