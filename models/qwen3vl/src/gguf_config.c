/* The Qwen3-VL config from llama.cpp's GGUF keys (docs/MODEL.md, "GGUF files").
 *
 * Text model (general.architecture = qwen3vl): qwen3vl.block_count, .embedding_length,
 * .feed_forward_length, .context_length, .attention.head_count, .attention.head_count_kv,
 * .attention.key_length (head_dim; hidden / heads when absent), .attention.
 * layer_norm_rms_epsilon, .rope.freq_base, .rope.dimension_sections ([t, h, w, 0] in rotary
 * pairs: qvl's mrope_section), .n_deepstack_layers. The vocabulary size is the token
 * embedding's row count; the output projection is tied when output.weight is absent; the
 * image/video pad and vision start/end ids are looked up by their token text, as the GGUF keeps
 * no ids for them. Qwen3-VL's rope is always the interleaved M-RoPE.
 *
 * mmproj (clip.projector_type = qwen3vl_merger): clip.vision.embedding_length,
 * .feed_forward_length, .block_count, .attention.head_count, .patch_size, .spatial_merge_size,
 * .projection_dim (= the text hidden size) and .is_deepstack_layers (one bool per block: the
 * deepstack indexes in increasing order). The position table's size is the row count of
 * v.position_embd.weight; in_channels is the patch kernel's; temporal_patch_size is 2, the one
 * value the converter accepts (it writes the two temporal slices as separate kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/qwen3vl_gguf.h"

#define SIZE_MAX_VALUE 2147483647ull /* as config.json: sizes beyond int32 are surely corrupt */

static qvl_status get_size(const qvl_gguf *g, const char *key, int64_t *out, qvl_error *err) {
    uint64_t v = 0;
    qvl_status st = qvl_gguf_get_uint(g, key, SIZE_MAX_VALUE, &v, err);
    if (st != QVL_OK) return st;
    if (v < 1)
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must be at least 1 (got 0)",
                        qvl_gguf_path(g), key);
    *out = (int64_t)v;
    return QVL_OK;
}

static qvl_status get_positive(const qvl_gguf *g, const char *key, double *out, qvl_error *err) {
    qvl_status st = qvl_gguf_get_float(g, key, out, err);
    if (st == QVL_OK && !(isfinite(*out) && *out > 0.0))
        st = qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must be a positive number (got %g)",
                      qvl_gguf_path(g), key, *out);
    return st;
}

/* The id of the token whose text is `text`, -1 when the vocabulary has none. */
static int64_t token_id(const qvl_gguf_value *tokens, const char *text) {
    for (uint64_t i = 0; i < tokens->v.arr.count; i++) {
        qvl_gguf_str s;
        if (qvl_gguf_arr_str(tokens, i, &s) && qvl_gguf_str_eq(s, text)) return (int64_t)i;
    }
    return -1;
}

static qvl_status optional_id(const qvl_gguf *g, const char *key, int64_t vocab, int64_t *out,
                              qvl_error *err) {
    *out = -1;
    if (!qvl_gguf_find(g, key)) return QVL_OK;
    uint64_t v = 0;
    qvl_status st = qvl_gguf_get_uint(g, key, SIZE_MAX_VALUE, &v, err);
    if (st != QVL_OK) return st;
    if ((int64_t)v >= vocab)
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s': token id %llu is not below the "
                        "vocabulary size %lld", qvl_gguf_path(g), key, (unsigned long long)v,
                        (long long)vocab);
    *out = (int64_t)v;
    return QVL_OK;
}

static qvl_status check_arch(const qvl_gguf *g, const char *key, const char *want,
                             const char *what, qvl_error *err) {
    qvl_gguf_str s;
    qvl_status st = qvl_gguf_get_str(g, key, &s, err);
    if (st != QVL_OK) return st;
    if (!qvl_gguf_str_eq(s, want))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s is '%.*s', not %s (%s)", qvl_gguf_path(g),
                        key, (int)(s.len > 64 ? 64 : s.len), s.ptr, want, what);
    return QVL_OK;
}

static qvl_status text_config(const qvl_gguf *g, qvl_qwen3vl_config *cfg, qvl_error *err) {
    qvl_text_config *t = &cfg->text;
    qvl_status st = check_arch(g, "general.architecture", "qwen3vl",
                               "qvl reads Qwen3-VL text models", err);
    if (st != QVL_OK) return st;
    const char *path = qvl_gguf_path(g);
    if ((st = get_size(g, "qwen3vl.block_count", &t->num_hidden_layers, err)) != QVL_OK ||
        (st = get_size(g, "qwen3vl.embedding_length", &t->hidden_size, err)) != QVL_OK ||
        (st = get_size(g, "qwen3vl.feed_forward_length", &t->intermediate_size, err)) != QVL_OK ||
        (st = get_size(g, "qwen3vl.context_length", &t->max_position_embeddings, err)) != QVL_OK ||
        (st = get_size(g, "qwen3vl.attention.head_count", &t->num_attention_heads, err)) != QVL_OK ||
        (st = get_size(g, "qwen3vl.attention.head_count_kv", &t->num_key_value_heads, err)) !=
            QVL_OK)
        return st;
    if (t->num_attention_heads % t->num_key_value_heads != 0)
        return qvl_fail(err, QVL_E_INVALID, "%s: qwen3vl.attention.head_count_kv %lld does not "
                        "divide head_count %lld", path, (long long)t->num_key_value_heads,
                        (long long)t->num_attention_heads);
    if (qvl_gguf_find(g, "qwen3vl.attention.key_length")) {
        if ((st = get_size(g, "qwen3vl.attention.key_length", &t->head_dim, err)) != QVL_OK)
            return st;
    } else if (t->hidden_size % t->num_attention_heads == 0) {
        t->head_dim = t->hidden_size / t->num_attention_heads;
    } else {
        return qvl_fail(err, QVL_E_INVALID, "%s: qwen3vl.attention.key_length is missing and "
                        "the hidden size is not a multiple of the heads", path);
    }
    if (t->head_dim % 2 != 0)
        return qvl_fail(err, QVL_E_INVALID, "%s: qwen3vl.attention.key_length must be even "
                        "(got %lld)", path, (long long)t->head_dim);
    if ((st = get_positive(g, "qwen3vl.attention.layer_norm_rms_epsilon", &t->rms_norm_eps,
                           err)) != QVL_OK ||
        (st = get_positive(g, "qwen3vl.rope.freq_base", &t->rope_theta, err)) != QVL_OK)
        return st;
    const qvl_gguf_value *sec = NULL;
    st = qvl_gguf_get_array(g, "qwen3vl.rope.dimension_sections", QVL_GGUF_TYPE_COUNT, &sec, err);
    if (st != QVL_OK) return st;
    int64_t sum = 0;
    for (uint64_t i = 0; i < sec->v.arr.count; i++) {
        int64_t v = 0;
        if (!qvl_gguf_arr_int(sec, i, &v) || v < 0 || v > t->head_dim || (i >= 3 && v != 0))
            return qvl_fail(err, QVL_E_INVALID, "%s: qwen3vl.rope.dimension_sections[%llu] is "
                            "not a section size (3 sizes, then zeros)", path,
                            (unsigned long long)i);
        if (i < 3) t->mrope_section[i] = (int32_t)v;
        sum += v;
    }
    if (sec->v.arr.count < 3 || sum != t->head_dim / 2)
        return qvl_fail(err, QVL_E_INVALID, "%s: qwen3vl.rope.dimension_sections must hold 3 "
                        "sizes summing to head_dim/2 = %lld", path, (long long)(t->head_dim / 2));
    t->mrope_interleaved = true;
    snprintf(t->rope_type, sizeof t->rope_type, "default");
    snprintf(t->hidden_act, sizeof t->hidden_act, "silu");
    t->attention_bias = false;
    t->dtype[0] = '\0';

    const qvl_gguf_tensor *emb = qvl_gguf_tensor_find(g, "token_embd.weight");
    if (!emb || emb->ndim != 2)
        return qvl_fail(err, QVL_E_NOT_FOUND, "%s: tensor 'token_embd.weight' is %s", path,
                        emb ? "not 2-D" : "missing");
    if (emb->shape[0] < 1 || (uint64_t)emb->shape[0] > SIZE_MAX_VALUE)
        return qvl_fail(err, QVL_E_INVALID, "%s: token_embd.weight has %lld rows", path,
                        (long long)emb->shape[0]);
    t->vocab_size = emb->shape[0];
    cfg->tie_word_embeddings = qvl_gguf_tensor_find(g, "output.weight") == NULL;
    if ((st = optional_id(g, "tokenizer.ggml.bos_token_id", t->vocab_size, &t->bos_token_id,
                          err)) != QVL_OK ||
        (st = optional_id(g, "tokenizer.ggml.eos_token_id", t->vocab_size, &t->eos_token_id,
                          err)) != QVL_OK)
        return st;
    cfg->image_token_id = cfg->video_token_id = -1;
    cfg->vision_start_token_id = cfg->vision_end_token_id = -1;
    const qvl_gguf_value *tokens = qvl_gguf_find(g, "tokenizer.ggml.tokens");
    if (tokens && tokens->type == QVL_GGUF_ARRAY && tokens->v.arr.type == QVL_GGUF_STRING) {
        cfg->image_token_id = token_id(tokens, "<|image_pad|>");
        cfg->video_token_id = token_id(tokens, "<|video_pad|>");
        cfg->vision_start_token_id = token_id(tokens, "<|vision_start|>");
        cfg->vision_end_token_id = token_id(tokens, "<|vision_end|>");
        if (cfg->image_token_id >= t->vocab_size || cfg->video_token_id >= t->vocab_size ||
            cfg->vision_start_token_id >= t->vocab_size ||
            cfg->vision_end_token_id >= t->vocab_size)
            return qvl_fail(err, QVL_E_INVALID, "%s: a vision token's id is not below the "
                            "vocabulary size %lld (token_embd.weight rows)", path,
                            (long long)t->vocab_size);
    }
    return QVL_OK;
}

static qvl_status vision_config(const qvl_gguf *g, const qvl_qwen3vl_config *cfg,
                                int64_t text_deepstack, qvl_vision_config *v, qvl_error *err) {
    const char *path = qvl_gguf_path(g);
    qvl_status st = check_arch(g, "clip.projector_type", "qwen3vl_merger",
                               "qvl reads Qwen3-VL's vision tower", err);
    if (st != QVL_OK) return st;
    if ((st = get_size(g, "clip.vision.embedding_length", &v->hidden_size, err)) != QVL_OK ||
        (st = get_size(g, "clip.vision.feed_forward_length", &v->intermediate_size, err)) !=
            QVL_OK ||
        (st = get_size(g, "clip.vision.block_count", &v->depth, err)) != QVL_OK ||
        (st = get_size(g, "clip.vision.attention.head_count", &v->num_heads, err)) != QVL_OK ||
        (st = get_size(g, "clip.vision.patch_size", &v->patch_size, err)) != QVL_OK ||
        (st = get_size(g, "clip.vision.spatial_merge_size", &v->spatial_merge_size, err)) !=
            QVL_OK ||
        (st = get_size(g, "clip.vision.projection_dim", &v->out_hidden_size, err)) != QVL_OK)
        return st;
    if (v->out_hidden_size != cfg->text.hidden_size)
        return qvl_fail(err, QVL_E_INVALID, "%s: clip.vision.projection_dim %lld is not the text "
                        "model's hidden size %lld: this mmproj belongs to another model", path,
                        (long long)v->out_hidden_size, (long long)cfg->text.hidden_size);
    if (v->hidden_size % v->num_heads != 0 || (v->hidden_size / v->num_heads) % 4 != 0)
        return qvl_fail(err, QVL_E_INVALID, "%s: clip.vision.attention.head_count %lld must "
                        "divide the hidden size %lld into heads a multiple of 4 wide", path,
                        (long long)v->num_heads, (long long)v->hidden_size);
    const qvl_gguf_tensor *pos = qvl_gguf_tensor_find(g, "v.position_embd.weight");
    const qvl_gguf_tensor *patch = qvl_gguf_tensor_find(g, "v.patch_embd.weight");
    if (!pos || pos->ndim != 2 || !patch || patch->ndim != 4)
        return qvl_fail(err, QVL_E_NOT_FOUND, "%s: tensor '%s' is missing or has the wrong "
                        "number of dimensions", path,
                        !pos || pos->ndim != 2 ? "v.position_embd.weight" : "v.patch_embd.weight");
    v->num_position_embeddings = pos->shape[0];
    const int64_t side = (int64_t)llround(sqrt((double)v->num_position_embeddings));
    if (side * side != v->num_position_embeddings)
        return qvl_fail(err, QVL_E_INVALID, "%s: v.position_embd.weight has %lld rows, not a "
                        "square number", path, (long long)v->num_position_embeddings);
    v->in_channels = patch->shape[1];
    if (v->in_channels != 3)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: v.patch_embd.weight takes %lld channels: "
                        "images are RGB, only 3 is supported", path, (long long)v->in_channels);
    v->temporal_patch_size = 2;
    snprintf(v->hidden_act, sizeof v->hidden_act, "gelu_pytorch_tanh");
    v->n_deepstack = 0;
    const qvl_gguf_value *ds = NULL;
    if (qvl_gguf_find(g, "clip.vision.is_deepstack_layers")) {
        st = qvl_gguf_get_array(g, "clip.vision.is_deepstack_layers", QVL_GGUF_BOOL, &ds, err);
        if (st != QVL_OK) return st;
        if (ds->v.arr.count != (uint64_t)v->depth)
            return qvl_fail(err, QVL_E_INVALID, "%s: clip.vision.is_deepstack_layers has %llu "
                            "entries for %lld blocks", path,
                            (unsigned long long)ds->v.arr.count, (long long)v->depth);
        for (int64_t i = 0; i < v->depth; i++) {
            if (!ds->v.arr.raw[i]) continue;
            if (v->n_deepstack == QVL_MAX_DEEPSTACK)
                return qvl_fail(err, QVL_E_LIMIT, "%s: more than %d deepstack layers", path,
                                QVL_MAX_DEEPSTACK);
            v->deepstack_visual_indexes[v->n_deepstack++] = (int32_t)i;
        }
    }
    if (text_deepstack >= 0 && text_deepstack != v->n_deepstack)
        return qvl_fail(err, QVL_E_INVALID, "%s: %d deepstack layers, but the text model takes "
                        "%lld (qwen3vl.n_deepstack_layers): this mmproj belongs to another model",
                        path, (int)v->n_deepstack, (long long)text_deepstack);
    return QVL_OK;
}

qvl_status qvl_qwen3vl_gguf_config(const qvl_gguf *text, const qvl_gguf *mmproj,
                                   qvl_qwen3vl_config *out, qvl_error *err) {
    qvl_qwen3vl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    qvl_status st = text_config(text, &cfg, err);
    if (st != QVL_OK) return st;
    int64_t text_ds = -1;
    if (qvl_gguf_find(text, "qwen3vl.n_deepstack_layers")) {
        uint64_t v = 0;
        st = qvl_gguf_get_uint(text, "qwen3vl.n_deepstack_layers", QVL_MAX_DEEPSTACK, &v, err);
        if (st != QVL_OK) return st;
        text_ds = (int64_t)v;
    }
    if (mmproj) {
        st = vision_config(mmproj, &cfg, text_ds, &cfg.vision, err);
        if (st != QVL_OK) return st;
        cfg.has_vision = true;
        if (cfg.image_token_id < 0 || cfg.vision_start_token_id < 0)
            return qvl_fail(err, QVL_E_INVALID, "%s: the vocabulary has no <|image_pad|> or "
                            "<|vision_start|> token: pictures cannot be placed in a prompt",
                            qvl_gguf_path(text));
    }
    *out = cfg;
    return QVL_OK;
}
