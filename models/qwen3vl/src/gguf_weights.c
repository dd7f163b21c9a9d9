/* The weight table over a text GGUF and its mmproj, under the checkpoint's names and shapes
 * (docs/MODEL.md, "GGUF files").
 *
 * Shapes: a GGUF tensor's row-major shape (qvl_gguf_tensor.shape, ne reversed) is the
 * checkpoint's; a linear weight is [out, in] in both, so its bytes are used as they are. Two
 * things the converter changed are undone here:
 *   - the Conv3D patch embedding [out, in, t=2, p, p] was written as two 2-D kernels,
 *     v.patch_embd.weight (t = 0) and v.patch_embd.weight.1 (t = 1), each [out, in, p, p]: they
 *     are interleaved back into one tensor (a copy: the only one made for a float file);
 *   - the deepstack mergers are named by the vision block they follow (v.deepstack.L.*), the
 *     checkpoint numbers them 0, 1, ... in the order of deepstack_visual_indexes.
 * The fused vision QKV (v.blk.N.attn_qkv) is the checkpoint's attn.qkv, kept fused.
 *
 * Types: F32, F16, BF16, Q8_0, Q4_K, Q6_K are read in place; the other types qvl reads are
 * converted once (qvl_ggml_convert_target picks the dtype) with a warning naming the tensor and
 * the RMS error added; a type qvl cannot read is refused naming the tensor. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/ggml_types.h"
#include "qvl/log.h"
#include "qvl/qwen3vl_gguf.h"

/* What keeps the table's data alive: the two mappings, converted copies, the names. */
typedef struct owner {
    qvl_gguf *file[2];
    void **bufs;
    size_t n_bufs;
    char **names;
    size_t n_names;
} owner;

static void owner_free(void *p) {
    owner *o = p;
    if (!o) return;
    qvl_gguf_close(o->file[0]);
    qvl_gguf_close(o->file[1]);
    for (size_t i = 0; i < o->n_bufs; i++) free(o->bufs[i]);
    for (size_t i = 0; i < o->n_names; i++) free(o->names[i]);
    free(o->bufs);
    free(o->names);
    free(o);
}

static void *owner_alloc(owner *o, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return NULL;
    o->bufs[o->n_bufs++] = p; /* room reserved: one per spec */
    return p;
}

bool qvl_qwen3vl_gguf_name(const char *hf, const qvl_vision_config *v, char *out, size_t size,
                           bool *vision) {
    static const struct { const char *hf, *gg; } text_layer[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    static const struct { const char *hf, *gg; } vision_block[] = {
        {"norm1.", "ln1."}, {"norm2.", "ln2."}, {"attn.qkv.", "attn_qkv."},
        {"attn.proj.", "attn_out."}, {"mlp.linear_fc1.", "ffn_up."},
        {"mlp.linear_fc2.", "ffn_down."},
    };
    static const struct { const char *hf, *gg; } merger[] = {
        {"norm.", "norm."}, {"linear_fc1.", "fc1."}, {"linear_fc2.", "fc2."},
    };
    const char *t = "model.language_model.", *vp = "model.visual.";
    int n = 0;
    long idx = 0;
    *vision = false;
    if (!strcmp(hf, "lm_head.weight")) return snprintf(out, size, "output.weight") > 0;
    if (!strncmp(hf, t, strlen(t))) {
        const char *r = hf + strlen(t);
        if (!strcmp(r, "embed_tokens.weight")) return snprintf(out, size, "token_embd.weight") > 0;
        if (!strcmp(r, "norm.weight")) return snprintf(out, size, "output_norm.weight") > 0;
        if (sscanf(r, "layers.%ld.%n", &idx, &n) != 1 || n == 0) return false;
        for (size_t i = 0; i < sizeof text_layer / sizeof *text_layer; i++)
            if (!strcmp(r + n, text_layer[i].hf))
                return snprintf(out, size, "blk.%ld.%s", idx, text_layer[i].gg) > 0;
        return false;
    }
    if (strncmp(hf, vp, strlen(vp)) != 0) return false;
    *vision = true;
    const char *r = hf + strlen(vp);
    if (!strncmp(r, "patch_embed.proj.", 17))
        return snprintf(out, size, "v.patch_embd.%s", r + 17) > 0;
    if (!strcmp(r, "pos_embed.weight")) return snprintf(out, size, "v.position_embd.weight") > 0;
    if (!strncmp(r, "merger.norm.", 12)) return snprintf(out, size, "v.post_ln.%s", r + 12) > 0;
    if (!strncmp(r, "merger.linear_fc1.", 18)) return snprintf(out, size, "mm.0.%s", r + 18) > 0;
    if (!strncmp(r, "merger.linear_fc2.", 18)) return snprintf(out, size, "mm.2.%s", r + 18) > 0;
    if (sscanf(r, "blocks.%ld.%n", &idx, &n) == 1 && n > 0) {
        for (size_t i = 0; i < sizeof vision_block / sizeof *vision_block; i++) {
            const size_t len = strlen(vision_block[i].hf);
            if (!strncmp(r + n, vision_block[i].hf, len))
                return snprintf(out, size, "v.blk.%ld.%s%s", idx, vision_block[i].gg,
                                r + n + len) > 0;
        }
        return false;
    }
    if (sscanf(r, "deepstack_merger_list.%ld.%n", &idx, &n) == 1 && n > 0 && idx >= 0 &&
        idx < v->n_deepstack) {
        const int32_t layer = v->deepstack_visual_indexes[idx];
        for (size_t i = 0; i < sizeof merger / sizeof *merger; i++) {
            const size_t len = strlen(merger[i].hf);
            if (!strncmp(r + n, merger[i].hf, len))
                return snprintf(out, size, "v.deepstack.%d.%s%s", (int)layer, merger[i].gg,
                                r + n + len) > 0;
        }
    }
    return false;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

static qvl_status check_shape(const qvl_gguf *g, const qvl_gguf_tensor *t, int ndim,
                              const int64_t *want, qvl_error *err) {
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == want[i];
    if (same) return QVL_OK;
    char a[96], b[96];
    shape_str(a, sizeof a, t->ndim, t->shape);
    shape_str(b, sizeof b, ndim, want);
    return qvl_fail(err, QVL_E_SHAPE, "%s: tensor '%s' is %s, the model's keys imply %s",
                    qvl_gguf_path(g), t->name, a, b);
}

/* One tensor as the table holds it: in place, or converted into a buffer of the owner. */
static qvl_status take(owner *o, const qvl_gguf *g, const qvl_gguf_tensor *t, qvl_st_tensor *out,
                       qvl_error *err) {
    const qvl_ggml_type_info *info = t->info;
    if (info && info->support == QVL_GGML_NATIVE && info->native != QVL_I32) {
        out->dtype = info->native;
        out->data = t->data;
        out->nbytes = t->nbytes;
        return QVL_OK;
    }
    const int64_t row = t->ndim ? t->ne[0] : 1, rows = row ? t->nelems / row : 0;
    qvl_dtype to;
    if (!info || info->support != QVL_GGML_CONVERTED || !qvl_ggml_convert_target(t->type, row, &to))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: tensor '%s' is %s, which qvl cannot read "
                        "(docs/QUANT.md lists the GGUF types it reads)", qvl_gguf_path(g),
                        t->name, info ? info->name : "an unknown type");
    size_t row_bytes = 0;
    if (!qvl_dtype_row_bytes(to, row, &row_bytes) || rows > (int64_t)(SIZE_MAX / row_bytes))
        return qvl_fail(err, QVL_E_LIMIT, "%s: tensor '%s' is too large", qvl_gguf_path(g),
                        t->name);
    const size_t bytes = (size_t)rows * row_bytes;
    void *dst = owner_alloc(o, bytes);
    if (!dst) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", qvl_gguf_path(g));
    qvl_ggml_convert_error e = {0};
    qvl_status st = qvl_ggml_convert(t->name, t->type, t->data, rows, row, to, dst, &e, err);
    if (st != QVL_OK) return st;
    QVL_LOG_W("%s: tensor '%s' is %s, converted at load to %s (adds RMS error %.4f of its RMS)",
              qvl_gguf_path(g), t->name, info->name, qvl_dtype_name(to), qvl_ggml_rel_rms(&e));
    out->dtype = to;
    out->data = dst;
    out->nbytes = bytes;
    return QVL_OK;
}

/* The two temporal kernels back into [out, in, 2, p, p], in their float type when both share
 * one, else in f32. */
static qvl_status join_patch(owner *o, const qvl_gguf *g, const qvl_gguf_tensor *k0,
                             const qvl_gguf_tensor *k1, qvl_st_tensor *out, qvl_error *err) {
    if (k0->type != k1->type)
        return qvl_fail(err, QVL_E_INVALID, "%s: the patch kernels v.patch_embd.weight and "
                        "v.patch_embd.weight.1 have different types (%s, %s)", qvl_gguf_path(g),
                        k0->info ? k0->info->name : "?", k1->info ? k1->info->name : "?");
    const qvl_ggml_type_info *info = k0->info;
    const bool plain = info && info->support == QVL_GGML_NATIVE &&
                       (info->native == QVL_F32 || info->native == QVL_F16 ||
                        info->native == QVL_BF16);
    const int64_t outer = k0->shape[0] * k0->shape[1], inner = k0->shape[2] * k0->shape[3];
    const size_t esz = plain ? qvl_dtype_block_bytes(info->native) : sizeof(float);
    unsigned char *dst = owner_alloc(o, (size_t)(2 * outer * inner) * esz);
    float *tmp = plain ? NULL : malloc((size_t)(2 * k0->nelems) * sizeof *tmp);
    if (!dst || (!plain && !tmp)) {
        free(tmp);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", qvl_gguf_path(g));
    }
    const unsigned char *src[2] = {k0->data, k1->data};
    if (!plain) {
        if (!qvl_ggml_to_f32(k0->type, k0->data, tmp, k0->nelems) ||
            !qvl_ggml_to_f32(k1->type, k1->data, tmp + k0->nelems, k1->nelems)) {
            free(tmp);
            return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: tensor 'v.patch_embd.weight' is %s, "
                            "which qvl cannot read", qvl_gguf_path(g), info ? info->name : "?");
        }
        src[0] = (const unsigned char *)tmp;
        src[1] = (const unsigned char *)(tmp + k0->nelems);
    }
    const size_t run = (size_t)inner * esz;
    for (int64_t i = 0; i < outer; i++)
        for (int tt = 0; tt < 2; tt++)
            memcpy(dst + ((size_t)i * 2 + (size_t)tt) * run, src[tt] + (size_t)i * run, run);
    free(tmp);
    out->dtype = plain ? info->native : QVL_F32;
    out->data = dst;
    out->nbytes = (size_t)(2 * outer) * run;
    return QVL_OK;
}

/* The tensors of the two files that no spec took, as one error line. */
static qvl_status check_unused(qvl_gguf *const *files, bool *const *used, qvl_error *err) {
    for (int f = 0; f < 2; f++) {
        if (!files[f]) continue;
        for (size_t i = 0; i < qvl_gguf_tensor_count(files[f]); i++)
            if (!used[f][i])
                return qvl_fail(err, QVL_E_INVALID, "%s: unexpected tensor '%s' (not part of a "
                                "Qwen3-VL %s with these keys)", qvl_gguf_path(files[f]),
                                qvl_gguf_tensor_at(files[f], i)->name,
                                f ? "vision tower" : "text model");
    }
    return QVL_OK;
}

static size_t index_of(const qvl_gguf *g, const qvl_gguf_tensor *t) {
    for (size_t i = 0; i < qvl_gguf_tensor_count(g); i++)
        if (qvl_gguf_tensor_at(g, i) == t) return i;
    return 0;
}

qvl_status qvl_qwen3vl_gguf_weights(qvl_gguf *text, qvl_gguf *mmproj,
                                    const qvl_qwen3vl_config *cfg, qvl_weights **out,
                                    qvl_error *err) {
    *out = NULL;
    owner *o = calloc(1, sizeof *o);
    if (!o) {
        qvl_gguf_close(text);
        qvl_gguf_close(mmproj);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    o->file[0] = text;
    o->file[1] = cfg->has_vision ? mmproj : NULL;
    if (!cfg->has_vision) qvl_gguf_close(mmproj);
    qvl_tensor_spec *specs = NULL;
    size_t n = 0;
    qvl_st_tensor *tensors = NULL;
    bool *used[2] = {NULL, NULL};
    qvl_status st = qvl_qwen3vl_tensor_specs(cfg, &specs, &n, err);
    if (st == QVL_OK) {
        tensors = calloc(n ? n : 1, sizeof *tensors);
        o->bufs = calloc(n ? n : 1, sizeof *o->bufs);
        o->names = calloc(n ? n : 1, sizeof *o->names);
        for (int f = 0; f < 2; f++)
            used[f] = calloc(o->file[f] ? qvl_gguf_tensor_count(o->file[f]) + 1 : 1, 1);
        if (!tensors || !o->bufs || !o->names || !used[0] || !used[1])
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; st == QVL_OK && i < n; i++) {
        const qvl_tensor_spec *sp = &specs[i];
        char name[QVL_TENSOR_NAME_MAX + 32];
        bool vision = false;
        if (!qvl_qwen3vl_gguf_name(sp->name, &cfg->vision, name, sizeof name, &vision)) {
            st = qvl_fail(err, QVL_E_INVALID, "no GGUF name for tensor '%s'", sp->name);
            break;
        }
        qvl_gguf *g = o->file[vision ? 1 : 0];
        const qvl_gguf_tensor *t = qvl_gguf_tensor_find(g, name);
        if (!t) {
            st = qvl_fail(err, QVL_E_NOT_FOUND, "%s: tensor '%s' is missing", qvl_gguf_path(g),
                          name);
            break;
        }
        used[vision][index_of(g, t)] = true;
        qvl_st_tensor *q = &tensors[i];
        if (!(o->names[o->n_names] = strdup(sp->name))) {
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
            break;
        }
        q->name = o->names[o->n_names++];
        q->ndim = sp->ndim;
        for (int d = 0; d < sp->ndim; d++) q->shape[d] = sp->shape[d];
        if (sp->ndim == 5) { /* the patch embedding: two [out, in, p, p] kernels */
            const int64_t half[4] = {sp->shape[0], sp->shape[1], sp->shape[3], sp->shape[4]};
            snprintf(name + strlen(name), sizeof name - strlen(name), ".1");
            const qvl_gguf_tensor *t1 = qvl_gguf_tensor_find(g, name);
            if (sp->shape[2] != 2)
                st = qvl_fail(err, QVL_E_UNSUPPORTED, "temporal patch size %lld: GGUF holds 2",
                              (long long)sp->shape[2]);
            else if (!t1)
                st = qvl_fail(err, QVL_E_NOT_FOUND, "%s: tensor '%s' is missing (the second "
                              "temporal slice of the patch embedding)", qvl_gguf_path(g), name);
            if (st == QVL_OK) st = check_shape(g, t, 4, half, err);
            if (st == QVL_OK) st = check_shape(g, t1, 4, half, err);
            if (st == QVL_OK) {
                used[1][index_of(g, t1)] = true;
                st = join_patch(o, g, t, t1, q, err);
            }
            continue;
        }
        st = check_shape(g, t, sp->ndim, sp->shape, err);
        if (st == QVL_OK) st = take(o, g, t, q, err);
    }
    if (st == QVL_OK) st = check_unused(o->file, used, err);
    free(used[0]);
    free(used[1]);
    if (st != QVL_OK) {
        free(specs);
        free(tensors);
        owner_free(o);
        return st;
    }
    st = qvl_weights_open_tensors(qvl_gguf_path(text), specs, n, tensors, n, NULL, 0, o,
                                  owner_free, out, err);
    free(specs);
    free(tensors);
    return st;
}
