/* The metadata of the two GGUF files qvl writes (qvl/qwen3vl_gguf_export.h), in the order and
 * with the value types llama.cpp's converter uses (tests/fixtures/gguf holds its files; the
 * gguf_write test compares key by key). gguf_config.c reads them back. */
#define _POSIX_C_SOURCE 200809L
#include "gguf_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define QUANTIZATION_VERSION 2 /* ggml's block layouts of Q4_K etc. since 2023 */
/* Qwen3-VL's vision LayerNorms use 1e-6 (fixed in the model code, not in config.json). */
#define VISION_LN_EPS 1e-6f

/* gguf-py's size label: the element count in K, M, B or T with at least two significant
 * digits ("144K", "2.0B", "8.8B"). */
static void size_label(uint64_t n, char *out, size_t cap) {
    const double x = (double)n;
    double scaled = x * 1e-3;
    char suffix = 'K';
    if (x > 1e12) scaled = x * 1e-12, suffix = 'T';
    else if (x > 1e9) scaled = x * 1e-9, suffix = 'B';
    else if (x > 1e6) scaled = x * 1e-6, suffix = 'M';
    char whole[32];
    snprintf(whole, sizeof whole, "%.0f", scaled);
    size_t digits = strlen(whole);
    for (const char *p = whole; *p == '0'; p++) digits--; /* "0" has no significant digits */
    const int frac = digits >= 2 ? 0 : (int)(2 - digits);
    snprintf(out, cap, "%.*f%c", frac, scaled, suffix);
}

/* The source GGUF's general.* keys that say something about the model (license, author,
 * sampling, ...), copied after the ones written here. */
static qvl_status copy_general(qvl_gguf_writer *w, const qvl_gguf *src, qvl_error *err) {
    static const char *const own[] = {"general.architecture", "general.type", "general.name",
                                      "general.size_label", "general.file_type",
                                      "general.quantization_version", "general.alignment"};
    for (size_t i = 0; src && i < qvl_gguf_kv_count(src); i++) {
        const qvl_gguf_kv *kv = qvl_gguf_kv_at(src, i);
        bool skip = strncmp(kv->key, "general.", 8) != 0;
        for (size_t k = 0; !skip && k < sizeof own / sizeof *own; k++) skip = !strcmp(kv->key, own[k]);
        if (skip || qvl_gguf_writer_has_key(w, kv->key)) continue;
        qvl_status st = qvl_gguf_writer_value(w, kv->key, &kv->value, err);
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}

/* general.architecture/type/name/size_label: the name from the source GGUF, else from the
 * source directory's last component. */
static qvl_status put_general(qvl_gguf_writer *w, const char *arch, const char *type,
                              const qvl_qwen3vl_export *x, const qvl_gguf *src, qvl_error *err) {
    char name[256], label[32];
    qvl_gguf_str s;
    if (src && qvl_gguf_find(src, "general.name") &&
        qvl_gguf_get_str(src, "general.name", &s, err) == QVL_OK) {
        snprintf(name, sizeof name, "%.*s", (int)(s.len < 255 ? s.len : 255), s.ptr);
    } else {
        const char *d = x->files->dir ? x->files->dir : x->files->model;
        size_t n = strlen(d);
        while (n > 1 && d[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && d[b - 1] != '/') b--;
        /* as the converter names a model after its directory: "qwen3-vl_2b" -> "Qwen3 Vl 2b" */
        snprintf(name, sizeof name, "%.*s", (int)(n - b), d + b);
        for (char *p = name; *p; p++) {
            if (*p == '-' || *p == '_') *p = ' ';
            if ((p == name || p[-1] == ' ') && *p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
        }
    }
    size_label(qvl_gguf_writer_elements(w), label, sizeof label);
    qvl_status st = qvl_gguf_writer_str(w, "general.architecture", arch, strlen(arch), err);
    if (st == QVL_OK) st = qvl_gguf_writer_str(w, "general.type", type, strlen(type), err);
    if (st == QVL_OK) st = qvl_gguf_writer_str(w, "general.name", name, strlen(name), err);
    if (st == QVL_OK) st = qvl_gguf_writer_str(w, "general.size_label", label, strlen(label), err);
    return st;
}

/* tokenizer.*: a GGUF source's keys as they are; a directory's from gguf_export_tok.c. */
static qvl_status put_tokenizer(qvl_gguf_writer *w, const qvl_qwen3vl_export *x,
                                const qvl_gguf *src, qvl_error *err) {
    qvl_status st = QVL_OK;
    if (src) {
        for (size_t i = 0; st == QVL_OK && i < qvl_gguf_kv_count(src); i++) {
            const qvl_gguf_kv *kv = qvl_gguf_kv_at(src, i);
            if (!strncmp(kv->key, "tokenizer.", 10))
                st = qvl_gguf_writer_value(w, kv->key, &kv->value, err);
        }
        return st;
    }
    return export_dir_tokenizer(w, x, err);
}

qvl_status export_text_keys(qvl_gguf_writer *w, const qvl_qwen3vl_export *x, uint32_t ftype,
                            const qvl_gguf *src, qvl_error *err) {
    const qvl_text_config *t = &x->cfg->text;
    int64_t deepstack = x->cfg->has_vision ? x->cfg->vision.n_deepstack : 0;
    uint64_t u = 0;
    if (!x->cfg->has_vision && src && qvl_gguf_find(src, "qwen3vl.n_deepstack_layers") &&
        qvl_gguf_get_uint(src, "qwen3vl.n_deepstack_layers", 64, &u, err) == QVL_OK)
        deepstack = (int64_t)u; /* a text-only GGUF source keeps its vision tower's count */
    const int32_t sections[4] = {t->mrope_section[0], t->mrope_section[1], t->mrope_section[2], 0};
    struct { const char *key; int64_t v; } sizes[] = {
        {"qwen3vl.block_count", t->num_hidden_layers},
        {"qwen3vl.context_length", t->max_position_embeddings},
        {"qwen3vl.embedding_length", t->hidden_size},
        {"qwen3vl.feed_forward_length", t->intermediate_size},
        {"qwen3vl.attention.head_count", t->num_attention_heads},
        {"qwen3vl.attention.head_count_kv", t->num_key_value_heads},
    };
    qvl_status st = put_general(w, "qwen3vl", "model", x, src, err);
    for (size_t i = 0; st == QVL_OK && i < sizeof sizes / sizeof *sizes; i++)
        st = qvl_gguf_writer_u32(w, sizes[i].key, (uint32_t)sizes[i].v, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_array(w, "qwen3vl.rope.dimension_sections", QVL_GGUF_I32, sections,
                                   4, err);
    if (st == QVL_OK) st = qvl_gguf_writer_f32(w, "qwen3vl.rope.freq_base", (float)t->rope_theta, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_f32(w, "qwen3vl.attention.layer_norm_rms_epsilon",
                                 (float)t->rms_norm_eps, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_u32(w, "qwen3vl.attention.key_length", (uint32_t)t->head_dim, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_u32(w, "qwen3vl.attention.value_length", (uint32_t)t->head_dim, err);
    if (st == QVL_OK) st = qvl_gguf_writer_u32(w, "general.file_type", ftype, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_u32(w, "qwen3vl.n_deepstack_layers", (uint32_t)deepstack, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_u32(w, "general.quantization_version", QUANTIZATION_VERSION, err);
    if (st == QVL_OK) st = put_tokenizer(w, x, src, err);
    if (st == QVL_OK) st = copy_general(w, src, err);
    return st;
}

qvl_status export_vision_keys(qvl_gguf_writer *w, const qvl_qwen3vl_export *x, uint32_t ftype,
                              const qvl_gguf *src, const qvl_preprocess_config *pc,
                              qvl_error *err) {
    const qvl_vision_config *v = &x->cfg->vision;
    const int64_t side = (int64_t)llround(sqrt((double)v->num_position_embeddings));
    float mean[3], sd[3];
    for (int i = 0; i < 3; i++) mean[i] = (float)pc->image_mean[i], sd[i] = (float)pc->image_std[i];
    unsigned char *deep = calloc((size_t)v->depth, 1); /* one flag per vision block */
    if (!deep) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < v->n_deepstack; i++)
        if (v->deepstack_visual_indexes[i] >= 0 && v->deepstack_visual_indexes[i] < v->depth)
            deep[v->deepstack_visual_indexes[i]] = 1;
    qvl_status st = put_general(w, "clip", "mmproj", x, src, err);
    if (st == QVL_OK) st = qvl_gguf_writer_u32(w, "general.file_type", ftype, err);
    if (st == QVL_OK) st = qvl_gguf_writer_bool(w, "clip.has_vision_encoder", true, err);
    struct { const char *key; int64_t v; } sizes[] = {
        {"clip.vision.projection_dim", v->out_hidden_size},
        {"clip.vision.image_size", side * v->patch_size},
        {"clip.vision.patch_size", v->patch_size},
        {"clip.vision.embedding_length", v->hidden_size},
        {"clip.vision.feed_forward_length", v->intermediate_size},
        {"clip.vision.block_count", v->depth},
        {"clip.vision.attention.head_count", v->num_heads},
    };
    for (size_t i = 0; st == QVL_OK && i < sizeof sizes / sizeof *sizes; i++)
        st = qvl_gguf_writer_u32(w, sizes[i].key, (uint32_t)sizes[i].v, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_array(w, "clip.vision.image_mean", QVL_GGUF_F32, mean, 3, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_array(w, "clip.vision.image_std", QVL_GGUF_F32, sd, 3, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_str(w, "clip.projector_type", "qwen3vl_merger", 14, err);
    if (st == QVL_OK) st = qvl_gguf_writer_bool(w, "clip.use_gelu", true, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_u32(w, "clip.vision.spatial_merge_size",
                                 (uint32_t)v->spatial_merge_size, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_f32(w, "clip.vision.attention.layer_norm_epsilon", VISION_LN_EPS,
                                 err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_array(w, "clip.vision.is_deepstack_layers", QVL_GGUF_BOOL, deep,
                                   (uint64_t)v->depth, err);
    free(deep);
    if (st == QVL_OK)
        st = qvl_gguf_writer_u32(w, "general.quantization_version", QUANTIZATION_VERSION, err);
    if (st == QVL_OK) st = copy_general(w, src, err);
    return st;
}
