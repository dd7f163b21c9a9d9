/* mkmodel: a model directory with the real architecture and random weights. */
#define _POSIX_C_SOURCE 200809L
#include "qvl/mkmodel.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/file_write.h"
#include "qvl/file.h"
#include "qvl/log.h"
#include "qvl/model_copy.h"
#include "qvl/safetensors.h"

/* ---- deterministic normals -------------------------------------------------------------- */

/* The safetensors metadata that marks a file as mkmodel's random weights. */
#define MKMODEL_MARK_KEY "generator"
#define MKMODEL_MARK_VALUE "qvl mkmodel (random weights)"
#define ANGLES 4096 /* Box-Muller angle steps: a table instead of sinf/cosf per pair (3x faster) */

typedef struct rng {
    uint64_t state;
    float spare;
    bool has_spare;
} rng;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Each tensor's stream depends only on the seed and its name. */
static void rng_init(rng *r, uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    r->state = seed ^ h;
    splitmix64(&r->state);
    r->has_spare = false;
}

/* Standard normal by Box-Muller: one 64-bit draw gives a 24-bit radius uniform in (0, 1], an
 * angle step, and two values. */
static float rng_normal(rng *r, const float *cos_t, const float *sin_t) {
    if (r->has_spare) {
        r->has_spare = false;
        return r->spare;
    }
    uint64_t u = splitmix64(&r->state);
    float u1 = ((float)(u >> 40) + 1.0f) * (1.0f / 16777216.0f);
    unsigned k = (unsigned)(u >> 20) & (ANGLES - 1);
    float rad = sqrtf(-2.0f * logf(u1));
    r->spare = rad * sin_t[k];
    r->has_spare = true;
    return rad * cos_t[k];
}

/* ---- random tensors through the streaming writer ---------------------------------------- */

typedef struct fill_ctx {
    const qvl_tensor_spec *specs;
    uint64_t seed;
    qvl_dtype dtype;
    float std;
    rng r;
    float *buf;
    size_t buf_elems;
    float cos_t[ANGLES], sin_t[ANGLES];
} fill_ctx;

static qvl_status fill_random(void *user, size_t index, uint64_t byte_offset, void *dst,
                              size_t nbytes, qvl_error *err) {
    fill_ctx *c = user;
    const qvl_tensor_spec *sp = &c->specs[index];
    if (byte_offset == 0) rng_init(&c->r, c->seed, sp->name);
    size_t n = nbytes / qvl_dtype_block_bytes(c->dtype);
    if (n > c->buf_elems) {
        float *b = realloc(c->buf, n * sizeof *b);
        if (!b) return qvl_fail(err, QVL_E_NOMEM, "mkmodel: out of memory for tensor %s", sp->name);
        c->buf = b;
        c->buf_elems = n;
    }
    const float base = sp->is_norm ? 1.0f : 0.0f;
    for (size_t i = 0; i < n; i++)
        c->buf[i] = base + c->std * rng_normal(&c->r, c->cos_t, c->sin_t);
    qvl_from_f32(c->dtype, c->buf, dst, (int64_t)n);
    return QVL_OK;
}

qvl_status qvl_qwen3vl_write_random_weights(const char *path, const qvl_tensor_spec *specs,
                                            size_t n_specs, uint64_t seed, qvl_dtype dtype,
                                            float std, qvl_error *err) {
    if (!path || (n_specs && !specs))
        return qvl_fail(err, QVL_E_INVALID, "mkmodel: missing path or tensor list");
    if (dtype != QVL_F32 && dtype != QVL_F16 && dtype != QVL_BF16)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: dtype %s cannot be written (f32, f16 or bf16)",
                        path, qvl_dtype_name(dtype));
    if (!isfinite(std) || std < 0)
        return qvl_fail(err, QVL_E_INVALID, "%s: std %g must be finite and >= 0", path,
                        (double)std);
    qvl_st_write_tensor *t = calloc(n_specs ? n_specs : 1, sizeof *t);
    fill_ctx *ctx = calloc(1, sizeof *ctx);
    qvl_status s = QVL_OK;
    if (!t || !ctx) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    ctx->specs = specs;
    ctx->seed = seed;
    ctx->dtype = dtype;
    ctx->std = std;
    for (int k = 0; k < ANGLES; k++) {
        float th = 6.28318530717958647692f * ((float)k + 0.5f) / ANGLES;
        ctx->cos_t[k] = cosf(th);
        ctx->sin_t[k] = sinf(th);
    }
    for (size_t i = 0; i < n_specs; i++) {
        if (specs[i].ndim < 0 || specs[i].ndim > 5) {
            s = qvl_fail(err, QVL_E_INVALID, "%s: tensor '%s': rank %d out of range", path,
                         specs[i].name, (int)specs[i].ndim);
            goto done;
        }
        t[i].name = specs[i].name;
        t[i].dtype = dtype;
        t[i].ndim = specs[i].ndim;
        for (int d = 0; d < specs[i].ndim; d++) t[i].shape[d] = specs[i].shape[d];
        t[i].fill = fill_random;
        t[i].fill_user = ctx;
    }
    double params = 0;
    for (size_t i = 0; i < n_specs; i++) {
        double p = 1;
        for (int d = 0; d < specs[i].ndim; d++) p *= (double)specs[i].shape[d];
        params += p;
    }
    QVL_LOG_I("mkmodel: writing %zu tensors, %.0f parameters (%s, std %g) to %s", n_specs, params,
              qvl_dtype_name(dtype), (double)std, path);
    static const char *const meta[] = {"format", "pt", MKMODEL_MARK_KEY, MKMODEL_MARK_VALUE};
    s = qvl_safetensors_write(path, t, n_specs, meta, 2, err);
    if (s == QVL_OK) QVL_LOG_I("mkmodel: wrote %s", path);
done:
    if (ctx) free(ctx->buf);
    free(ctx);
    free(t);
    return s;
}

/* ---- the model directory ----------------------------------------------------------------- */

/* Weights that are not mkmodel's own (real weights, a user's file) are never replaced: an
 * existing model.safetensors without this mark stops mkmodel before anything is written. */
static qvl_status check_replaceable(const char *weights_path, qvl_error *err) {
    struct stat sb;
    if (lstat(weights_path, &sb) != 0) return QVL_OK; /* nothing there yet */
    qvl_safetensors *st = NULL;
    qvl_error ignored = {0};
    bool ours = S_ISREG(sb.st_mode) && qvl_safetensors_open(weights_path, &st, &ignored) == QVL_OK;
    const char *mark = ours ? qvl_safetensors_metadata(st, MKMODEL_MARK_KEY) : NULL;
    ours = mark && strcmp(mark, MKMODEL_MARK_VALUE) == 0;
    qvl_safetensors_close(st);
    if (ours) return QVL_OK;
    return qvl_fail(err, QVL_E_INVALID,
                    "%s exists and was not made by qvl mkmodel: refusing to replace it (choose "
                    "another --out)",
                    weights_path);
}

/* Names mkmodel may write in its output directory. */
static const char *const written_names[] = {
    "model.safetensors",   "config.json",        "generation_config.json", "preprocessor_config.json",
    "chat_template.jinja", "chat_template.json", "tokenizer_config.json",  "tokenizer.json",
};

/* qvl_new_file follows a symlink at an output name and replaces what it points at; in a model
 * directory a link there means someone else arranged it (it could lead to the user's own
 * files), so mkmodel refuses before writing anything, as qvl quantize does. */
static qvl_status refuse_links(const char *out_dir, qvl_error *err) {
    for (size_t i = 0; i < sizeof written_names / sizeof written_names[0]; i++) {
        char *p = qvl_path_join(out_dir, written_names[i]);
        struct stat sb;
        bool link = p && lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode);
        free(p);
        if (!p) return qvl_fail(err, QVL_E_NOMEM, "mkmodel: out of memory");
        if (link)
            return qvl_fail(err, QVL_E_INVALID, "%s holds a symbolic link (%s): refusing to write "
                            "there", out_dir, written_names[i]);
    }
    return QVL_OK;
}

/* The directory part of a path ("." when there is none). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static qvl_status mkdir_p(const char *dir, qvl_error *err) {
    char *p = strdup(dir);
    if (!p) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", dir);
    qvl_status s = QVL_OK;
    size_t len = strlen(p);
    /* Create each prefix ending before a '/', then the whole path. */
    for (size_t i = 1; i <= len && s == QVL_OK; i++) {
        if (i < len && p[i] != '/') continue;
        char saved = p[i];
        p[i] = '\0';
        struct stat sb;
        if (stat(p, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                s = qvl_fail(err, QVL_E_IO, "%s: exists and is not a directory", p);
        } else if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            s = qvl_fail(err, QVL_E_IO, "%s: cannot create directory: %s", p, strerror(errno));
        }
        p[i] = saved;
    }
    free(p);
    return s;
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static qvl_status copy_file(const char *from, const char *to, qvl_error *err) {
    if (same_file(from, to)) return QVL_OK; /* the output directory is the source's */
    return qvl_file_copy(from, to, SIZE_MAX, err);
}

static qvl_status write_json(const char *path, cJSON *obj, qvl_error *err) {
    char *text = obj ? cJSON_Print(obj) : NULL;
    if (!text) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    qvl_new_file f;
    qvl_status s = qvl_new_file_open(path, &f, err);
    if (s == QVL_OK && (s = qvl_new_file_write(&f, text, strlen(text), err)) == QVL_OK &&
        (s = qvl_new_file_write(&f, "\n", 1, err)) == QVL_OK)
        s = qvl_new_file_commit(&f, err);
    if (s != QVL_OK) qvl_new_file_abandon(&f);
    free(text);
    return s;
}

static qvl_status default_generation_config(const qvl_qwen3vl_config *cfg, const char *path,
                                            qvl_error *err) {
    cJSON *o = cJSON_CreateObject();
    if (o && cfg->text.bos_token_id >= 0)
        cJSON_AddNumberToObject(o, "bos_token_id", (double)cfg->text.bos_token_id);
    if (o && cfg->text.eos_token_id >= 0)
        cJSON_AddNumberToObject(o, "eos_token_id", (double)cfg->text.eos_token_id);
    qvl_status s = write_json(path, o, err);
    cJSON_Delete(o);
    return s;
}

static qvl_status default_preprocessor_config(const qvl_vision_config *v, const char *path,
                                              qvl_error *err) {
    /* One merged token covers (patch * merge)^2 pixels; budget 64 .. 16384 tokens. */
    double factor = (double)v->patch_size * (double)v->spatial_merge_size;
    cJSON *o = cJSON_CreateObject();
    cJSON *size = cJSON_AddObjectToObject(o, "size");
    cJSON_AddNumberToObject(size, "longest_edge", 16384.0 * factor * factor);
    cJSON_AddNumberToObject(size, "shortest_edge", 64.0 * factor * factor);
    cJSON_AddNumberToObject(o, "patch_size", (double)v->patch_size);
    cJSON_AddNumberToObject(o, "temporal_patch_size", (double)v->temporal_patch_size);
    cJSON_AddNumberToObject(o, "merge_size", (double)v->spatial_merge_size);
    cJSON *mean = cJSON_AddArrayToObject(o, "image_mean");
    cJSON *stdv = cJSON_AddArrayToObject(o, "image_std");
    for (int64_t c = 0; mean && stdv && c < v->in_channels && c < 64; c++) {
        cJSON_AddItemToArray(mean, cJSON_CreateNumber(0.5));
        cJSON_AddItemToArray(stdv, cJSON_CreateNumber(0.5));
    }
    cJSON_AddStringToObject(o, "processor_class", "Qwen3VLProcessor");
    cJSON_AddStringToObject(o, "image_processor_type", "Qwen2VLImageProcessorFast");
    /* cJSON's add functions tolerate NULL parents, so one check at the end covers OOM. */
    qvl_status s = (o && size && mean && stdv)
                       ? write_json(path, o, err)
                       : qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    cJSON_Delete(o);
    return s;
}

/* Copy NAME from src_dir to out_dir when it exists there; else run the fallback (if any). */
static qvl_status copy_or(const char *src_dir, const char *out_dir, const char *name,
                          qvl_status (*fallback)(const qvl_qwen3vl_config *, const char *,
                                                 qvl_error *),
                          const qvl_qwen3vl_config *cfg, qvl_error *err) {
    char *from = qvl_path_join(src_dir, name), *to = qvl_path_join(out_dir, name);
    qvl_status s = QVL_OK;
    bool copied = false;
    /* Files found beside the config, not named by the user: copied only under the link rule
     * of qvl/model_copy.h (a planted link to a private file is refused, not copied). */
    if (!from || !to) s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", out_dir);
    else if (same_file(from, to)) copied = true; /* the output directory is the source's */
    else s = qvl_model_file_copy(src_dir, name, to, SIZE_MAX, &copied, err);
    if (s == QVL_OK && !copied && fallback) s = fallback(cfg, to, err);
    free(from);
    free(to);
    return s;
}

static qvl_status preprocessor_fallback(const qvl_qwen3vl_config *cfg, const char *path,
                                        qvl_error *err) {
    return cfg->has_vision ? default_preprocessor_config(&cfg->vision, path, err) : QVL_OK;
}

qvl_status qvl_qwen3vl_mkmodel(const char *config_path, const char *out_dir, uint64_t seed,
                               qvl_dtype dtype, float std, const char *tokenizer_path,
                               qvl_error *err) {
    if (!config_path || !out_dir) return qvl_fail(err, QVL_E_INVALID, "mkmodel: missing argument");
    /* Refuse bad options before anything is created. */
    if (dtype != QVL_F32 && dtype != QVL_F16 && dtype != QVL_BF16)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "mkmodel: dtype %s cannot be written (f32, f16 or bf16)",
                        qvl_dtype_name(dtype));
    if (!isfinite(std) || std < 0)
        return qvl_fail(err, QVL_E_INVALID, "mkmodel: std %g must be finite and >= 0", (double)std);
    qvl_qwen3vl_config cfg;
    qvl_status s = qvl_qwen3vl_config_load(config_path, &cfg, err);
    if (s != QVL_OK) return s;
    qvl_tensor_spec *specs = NULL;
    size_t n = 0;
    char *src_dir = NULL, *path = NULL;
    if ((s = qvl_qwen3vl_tensor_specs(&cfg, &specs, &n, err)) != QVL_OK) return s;
    struct stat sb;
    if (tokenizer_path && (stat(tokenizer_path, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        s = qvl_fail(err, QVL_E_NOT_FOUND, "%s: tokenizer file not found", tokenizer_path);
        goto done;
    }
    if (!(src_dir = dir_of(config_path))) {
        s = qvl_fail(err, QVL_E_NOMEM, "mkmodel: out of memory");
        goto done;
    }
    if ((s = mkdir_p(out_dir, err)) != QVL_OK) goto done;
    if (!(path = qvl_path_join(out_dir, "model.safetensors"))) {
        s = qvl_fail(err, QVL_E_NOMEM, "mkmodel: out of memory");
        goto done;
    }
    if ((s = check_replaceable(path, err)) != QVL_OK) goto done;
    if ((s = refuse_links(out_dir, err)) != QVL_OK) goto done;
    free(path);
    if (!(path = qvl_path_join(out_dir, "config.json"))) {
        s = qvl_fail(err, QVL_E_NOMEM, "mkmodel: out of memory");
        goto done;
    }
    if ((s = copy_file(config_path, path, err)) != QVL_OK) goto done;
    if ((s = copy_or(src_dir, out_dir, "generation_config.json", default_generation_config, &cfg,
                     err)) != QVL_OK)
        goto done;
    if ((s = copy_or(src_dir, out_dir, "preprocessor_config.json", preprocessor_fallback, &cfg,
                     err)) != QVL_OK)
        goto done;
    static const char *const companions[] = {"chat_template.jinja", "chat_template.json",
                                             "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof companions / sizeof companions[0]; i++)
        if ((s = copy_or(src_dir, out_dir, companions[i], NULL, &cfg, err)) != QVL_OK) goto done;
    free(path);
    path = NULL;
    if (tokenizer_path) {
        if (!(path = qvl_path_join(out_dir, "tokenizer.json"))) {
            s = qvl_fail(err, QVL_E_NOMEM, "mkmodel: out of memory");
            goto done;
        }
        if ((s = copy_file(tokenizer_path, path, err)) != QVL_OK) goto done;
        free(path);
        path = NULL;
    }
    if (!(path = qvl_path_join(out_dir, "model.safetensors"))) {
        s = qvl_fail(err, QVL_E_NOMEM, "mkmodel: out of memory");
        goto done;
    }
    s = qvl_qwen3vl_write_random_weights(path, specs, n, seed, dtype, std, err);
done:
    free(path);
    free(src_dir);
    free(specs);
    return s;
}
