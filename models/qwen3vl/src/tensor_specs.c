/* The tensors a Qwen3-VL checkpoint holds, derived from the config (docs/MODEL.md,
 * "Checkpoint tensors"). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/checked.h"
#include "qvl/qwen3vl_config.h"

typedef struct spec_list {
    qvl_tensor_spec *v;
    size_t n, cap;
    qvl_status status;
    qvl_error *err;
} spec_list;

enum { PLAIN = 0, NORM = 1, BIAS = 2 };

/* Append one spec; name is printf-style; shape is ndim int64_t values after the kind. */
static void add(spec_list *l, int kind, int ndim, const int64_t *shape, const char *fmt, ...)
    QVL_PRINTF(5, 6);
static void add(spec_list *l, int kind, int ndim, const int64_t *shape, const char *fmt, ...) {
    if (l->status != QVL_OK) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        qvl_tensor_spec *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->status = qvl_fail(l->err, QVL_E_NOMEM, "tensor specs: out of memory");
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    qvl_tensor_spec *s = &l->v[l->n];
    memset(s, 0, sizeof *s);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof s->name) {
        l->status =
            qvl_fail(l->err, QVL_E_LIMIT, "tensor specs: name '%s...' is too long", s->name);
        return;
    }
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++) s->shape[i] = shape[i];
    s->is_norm = kind == NORM;
    s->is_bias = kind == BIAS;
    l->n++;
}

#define SHAPE(...) (const int64_t[]){__VA_ARGS__}
#define ADD1(l, kind, a, ...) add(l, kind, 1, SHAPE(a), __VA_ARGS__)
#define ADD2(l, kind, a, b, ...) add(l, kind, 2, SHAPE(a, b), __VA_ARGS__)

/* A linear layer's weight [out, in] and, when asked, its bias [out]. */
static void add_linear(spec_list *l, int64_t out, int64_t in, bool bias, const char *prefix,
                       const char *name) {
    ADD2(l, PLAIN, out, in, "%s%s.weight", prefix, name);
    if (bias) ADD1(l, BIAS, out, "%s%s.bias", prefix, name);
}

static void add_text(spec_list *l, const qvl_text_config *t, int64_t q_dim, int64_t kv_dim) {
    const char *p = "model.language_model.";
    const int64_t h = t->hidden_size, ff = t->intermediate_size;
    ADD2(l, PLAIN, t->vocab_size, h, "%sembed_tokens.weight", p);
    char prefix[64];
    for (int64_t i = 0; i < t->num_hidden_layers; i++) {
        snprintf(prefix, sizeof prefix, "%slayers.%lld.", p, (long long)i);
        ADD1(l, NORM, h, "%sinput_layernorm.weight", prefix);
        add_linear(l, q_dim, h, t->attention_bias, prefix, "self_attn.q_proj");
        add_linear(l, kv_dim, h, t->attention_bias, prefix, "self_attn.k_proj");
        add_linear(l, kv_dim, h, t->attention_bias, prefix, "self_attn.v_proj");
        add_linear(l, h, q_dim, t->attention_bias, prefix, "self_attn.o_proj");
        ADD1(l, NORM, t->head_dim, "%sself_attn.q_norm.weight", prefix);
        ADD1(l, NORM, t->head_dim, "%sself_attn.k_norm.weight", prefix);
        ADD1(l, NORM, h, "%spost_attention_layernorm.weight", prefix);
        add_linear(l, ff, h, false, prefix, "mlp.gate_proj");
        add_linear(l, ff, h, false, prefix, "mlp.up_proj");
        add_linear(l, h, ff, false, prefix, "mlp.down_proj");
    }
    ADD1(l, NORM, h, "%snorm.weight", p);
}

/* LayerNorm weight and bias. */
static void add_layer_norm(spec_list *l, int64_t dim, const char *prefix, const char *name) {
    ADD1(l, NORM, dim, "%s%s.weight", prefix, name);
    ADD1(l, BIAS, dim, "%s%s.bias", prefix, name);
}

static void add_vision(spec_list *l, const qvl_vision_config *v, int64_t merged) {
    const char *p = "model.visual.";
    const int64_t h = v->hidden_size, ff = v->intermediate_size;
    add(l, PLAIN, 5, SHAPE(h, v->in_channels, v->temporal_patch_size, v->patch_size, v->patch_size),
        "%spatch_embed.proj.weight", p);
    ADD1(l, BIAS, h, "%spatch_embed.proj.bias", p);
    ADD2(l, PLAIN, v->num_position_embeddings, h, "%spos_embed.weight", p);
    char prefix[64];
    for (int64_t i = 0; i < v->depth; i++) {
        snprintf(prefix, sizeof prefix, "%sblocks.%lld.", p, (long long)i);
        add_layer_norm(l, h, prefix, "norm1");
        add_linear(l, 3 * h, h, true, prefix, "attn.qkv");
        add_linear(l, h, h, true, prefix, "attn.proj");
        add_layer_norm(l, h, prefix, "norm2");
        add_linear(l, ff, h, true, prefix, "mlp.linear_fc1");
        add_linear(l, h, ff, true, prefix, "mlp.linear_fc2");
    }
    /* The final merger normalises each patch before the m x m concat; the deepstack mergers
     * normalise after it. */
    snprintf(prefix, sizeof prefix, "%smerger.", p);
    add_layer_norm(l, h, prefix, "norm");
    add_linear(l, merged, merged, true, prefix, "linear_fc1");
    add_linear(l, v->out_hidden_size, merged, true, prefix, "linear_fc2");
    for (int32_t k = 0; k < v->n_deepstack; k++) {
        snprintf(prefix, sizeof prefix, "%sdeepstack_merger_list.%d.", p, (int)k);
        add_layer_norm(l, merged, prefix, "norm");
        add_linear(l, merged, merged, true, prefix, "linear_fc1");
        add_linear(l, v->out_hidden_size, merged, true, prefix, "linear_fc2");
    }
}

/* Sizes must be positive and small enough that every product below stays exact. */
#define CHECK_POSITIVE(val, key)                                                                  \
    do {                                                                                          \
        if ((val) < 1 || (val) > ((int64_t)1 << 31))                                              \
            return qvl_fail(err, QVL_E_INVALID, "tensor specs: %s = %lld is out of range", key,   \
                            (long long)(val));                                                    \
    } while (0)

qvl_status qvl_qwen3vl_tensor_specs(const qvl_qwen3vl_config *cfg, qvl_tensor_spec **out,
                                    size_t *n, qvl_error *err) {
    if (!cfg || !out || !n) return qvl_fail(err, QVL_E_INVALID, "tensor specs: missing argument");
    *out = NULL;
    *n = 0;
    const qvl_text_config *t = &cfg->text;
    CHECK_POSITIVE(t->vocab_size, "text_config.vocab_size");
    CHECK_POSITIVE(t->hidden_size, "text_config.hidden_size");
    CHECK_POSITIVE(t->intermediate_size, "text_config.intermediate_size");
    CHECK_POSITIVE(t->num_hidden_layers, "text_config.num_hidden_layers");
    CHECK_POSITIVE(t->num_attention_heads, "text_config.num_attention_heads");
    CHECK_POSITIVE(t->num_key_value_heads, "text_config.num_key_value_heads");
    CHECK_POSITIVE(t->head_dim, "text_config.head_dim");
    int64_t q_dim, kv_dim, merged = 0;
    if (!qvl_mul_i64(t->num_attention_heads, t->head_dim, &q_dim) ||
        !qvl_mul_i64(t->num_key_value_heads, t->head_dim, &kv_dim))
        return qvl_fail(err, QVL_E_LIMIT, "tensor specs: heads x head_dim overflows");
    if (cfg->has_vision) {
        const qvl_vision_config *v = &cfg->vision;
        CHECK_POSITIVE(v->depth, "vision_config.depth");
        CHECK_POSITIVE(v->hidden_size, "vision_config.hidden_size");
        CHECK_POSITIVE(v->intermediate_size, "vision_config.intermediate_size");
        CHECK_POSITIVE(v->patch_size, "vision_config.patch_size");
        CHECK_POSITIVE(v->temporal_patch_size, "vision_config.temporal_patch_size");
        CHECK_POSITIVE(v->spatial_merge_size, "vision_config.spatial_merge_size");
        CHECK_POSITIVE(v->in_channels, "vision_config.in_channels");
        CHECK_POSITIVE(v->out_hidden_size, "vision_config.out_hidden_size");
        CHECK_POSITIVE(v->num_position_embeddings, "vision_config.num_position_embeddings");
        if (v->n_deepstack < 0 || v->n_deepstack > QVL_MAX_DEEPSTACK)
            return qvl_fail(err, QVL_E_INVALID, "tensor specs: %d deepstack mergers (at most %d)",
                            (int)v->n_deepstack, QVL_MAX_DEEPSTACK);
        if (!qvl_mul_i64(v->spatial_merge_size, v->spatial_merge_size, &merged) ||
            !qvl_mul_i64(merged, v->hidden_size, &merged))
            return qvl_fail(err, QVL_E_LIMIT, "tensor specs: merged vision width overflows");
    }
    /* Layer counts come from the file: bound them so a hostile config cannot ask for a
     * gigantic list (names are at most QVL_TENSOR_NAME_MAX bytes each). */
    if (t->num_hidden_layers > 100000 || (cfg->has_vision && cfg->vision.depth > 100000))
        return qvl_fail(err, QVL_E_LIMIT, "tensor specs: more than 100000 layers");

    spec_list l = {.status = QVL_OK, .err = err};
    add_text(&l, t, q_dim, kv_dim);
    if (!cfg->tie_word_embeddings) ADD2(&l, PLAIN, t->vocab_size, t->hidden_size, "lm_head.weight");
    if (cfg->has_vision) add_vision(&l, &cfg->vision, merged);
    if (l.status != QVL_OK) {
        free(l.v);
        return l.status;
    }
    *out = l.v;
    *n = l.n;
    return QVL_OK;
}
