/* Qwen3-VL as llama.cpp's two GGUF files (qvl/qwen3vl_gguf_export.h): which tensor goes to which
 * file under which name and type, converted chunk by chunk while the file is written. The keys
 * are gguf_export_keys.c's. */
#define _POSIX_C_SOURCE 200809L
#include "gguf_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/ggml_types.h"
#include "qvl/qwen3vl_gguf.h"
#include "qvl/weight_convert.h"
#include "qvl/weight_mix.h"

#define POS_EMBED "model.visual.pos_embed.weight"

/* One tensor of one output file, at the writer's index. */
typedef struct part {
    const qvl_st_tensor *src;
    qvl_dtype to;
    char name[QVL_TENSOR_NAME_MAX + 32]; /* the GGUF name */
    double sums[2];                      /* squared error, squared source, so far */
    uint64_t bytes;
} part;

typedef struct job {
    part *p;
    size_t n;
    int threads;
    size_t converted;
} job;

bool qvl_qwen3vl_gguf_file_type(const char *weights, uint32_t *out) {
    static const struct { const char *name; uint32_t ftype; } t[] = {
        {"f32", 0}, {"f16", 1}, {"q8_0", 7}, {"q4_k", 14}, {"q4_k_m", 15}, {"q6_k", 18},
        {"bf16", 32},
    };
    for (size_t i = 0; weights && i < sizeof t / sizeof *t; i++)
        if (!strcmp(weights, t[i].name)) {
            *out = t[i].ftype;
            return true;
        }
    return false;
}

static uint32_t ggml_type_of(qvl_dtype d) {
    switch (d) {
    case QVL_F16: return QVL_GGML_F16;
    case QVL_BF16: return QVL_GGML_BF16;
    case QVL_Q8_0: return QVL_GGML_Q8_0;
    case QVL_Q4_K: return QVL_GGML_Q4_K;
    case QVL_Q6_K: return QVL_GGML_Q6_K;
    default: return QVL_GGML_F32;
    }
}

/* The writer asks for a chunk of a converted tensor (whole groups of 256 elements from the
 * start: whole blocks of the source dtype too). */
static qvl_status fill(void *user, size_t index, uint64_t byte_offset, void *dst, size_t nbytes,
                       qvl_error *err) {
    job *j = user;
    part *p = &j->p[index];
    bool last = false;
    qvl_status st = qvl_convert_piece(p->src, p->to, byte_offset, dst, nbytes, j->threads,
                                      p->sums, &last, err);
    if (st == QVL_OK && last) {
        qvl_print_conversion(40, p->name, p->src, p->to, p->sums);
        j->converted++;
    }
    return st;
}

/* The dtype of a tensor in the GGUF file: see the header. */
static qvl_status plan_dtype(const qvl_qwen3vl_export *x, const qvl_st_tensor *t, qvl_dtype *to,
                             qvl_error *err) {
    const bool mix = !strcmp(x->weights, "q4_k_m");
    qvl_dtype d = QVL_Q4_K;
    if (!mix && (!qvl_dtype_parse(x->weights, &d) || d == QVL_I32))
        return qvl_fail(err, QVL_E_INVALID, "--weights '%s' is not one of f32, f16, bf16, q8_0, "
                        "q4_k, q6_k, q4_k_m", x->weights);
    if (t->ndim < 2 || !strcmp(t->name, POS_EMBED)) {
        *to = QVL_F32;
        return QVL_OK;
    }
    const qvl_dtype base = mix ? qvl_qwen3vl_mix_dtype(x->cfg, t->name, t->ndim, t->shape,
                                                       t->dtype)
                               : d;
    if (t->ndim == 5) { /* the patch kernels: ggml's 2-D convolution takes F16 or F32 */
        *to = base == QVL_F16 || qvl_dtype_is_quant(base) ? QVL_F16 : QVL_F32;
        return QVL_OK;
    }
    /* rows that are not whole blocks fall back as llama.cpp's tools do: to q8_0 (32-value
     * blocks), else to f16 */
    const int64_t row = t->shape[t->ndim - 1];
    *to = base;
    if (row % (int64_t)qvl_dtype_block_elems(*to)) *to = QVL_Q8_0;
    if (row % (int64_t)qvl_dtype_block_elems(*to)) *to = QVL_F16;
    return QVL_OK;
}

/* The Conv3D kernel [out, in, 2, p, p] as the two kernels [out, in, p, p] of its temporal
 * slices, in dtype `to` (buffers the caller frees). */
static qvl_status split_patch(const qvl_st_tensor *t, qvl_dtype to, int threads, void *half[2],
                              qvl_error *err) {
    const int64_t outer = t->shape[0] * t->shape[1], inner = t->shape[3] * t->shape[4];
    const int64_t n = outer * 2 * inner;
    float *all = malloc((size_t)n * sizeof *all), *slice = malloc((size_t)(n / 2) * sizeof *slice);
    half[0] = malloc((size_t)(n / 2) * qvl_dtype_block_bytes(to));
    half[1] = malloc((size_t)(n / 2) * qvl_dtype_block_bytes(to));
    qvl_status st = all && slice && half[0] && half[1]
                        ? qvl_convert_elements(t->dtype, t->data, QVL_F32, all, n, threads, err)
                        : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int tt = 0; st == QVL_OK && tt < 2; tt++) {
        for (int64_t i = 0; i < outer; i++)
            memcpy(slice + i * inner, all + (i * 2 + tt) * inner, (size_t)inner * sizeof *slice);
        st = qvl_convert_elements(QVL_F32, slice, to, half[tt], n / 2, threads, err);
    }
    free(all);
    free(slice);
    return st;
}

static qvl_status check_config(const qvl_qwen3vl_export *x, qvl_error *err) {
    const qvl_qwen3vl_config *c = x->cfg;
    if (!c->text.mrope_interleaved || c->text.attention_bias || strcmp(c->text.hidden_act, "silu"))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "GGUF's qwen3vl has interleaved M-RoPE, no "
                        "attention bias and SiLU: this model's config differs");
    if (x->mmproj_out && !c->has_vision)
        return qvl_fail(err, QVL_E_INVALID, "--mmproj-out: the model has no vision tower (give "
                        "its mmproj with --mmproj, or leave --mmproj-out out)");
    if (c->has_vision && (c->vision.temporal_patch_size != 2 || c->vision.in_channels != 3))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "GGUF's qwen3vl_merger holds a temporal patch of "
                        "2 over 3 channels: this model has %lld over %lld",
                        (long long)c->vision.temporal_patch_size, (long long)c->vision.in_channels);
    return QVL_OK;
}

typedef struct outputs {
    qvl_gguf_writer *w[2];
    job jobs[2];
    void *patch[2];
    qvl_gguf *src[2];
    size_t by_dtype[2][QVL_DTYPE_COUNT]; /* tensors written per file and type */
} outputs;

static void outputs_free(outputs *o) {
    for (int f = 0; f < 2; f++) {
        qvl_gguf_writer_free(o->w[f]);
        free(o->jobs[f].p);
        free(o->patch[f]);
        qvl_gguf_close(o->src[f]);
    }
}

/* Every tensor into its file's writer (the vision tower's only when written). */
static qvl_status add_tensors(const qvl_qwen3vl_export *x, outputs *o, qvl_error *err) {
    const size_t n = qvl_weights_count(x->w);
    for (int f = 0; f < 2; f++) {
        o->jobs[f].p = calloc(n + 1, sizeof *o->jobs[f].p);
        o->jobs[f].threads = x->threads;
        if (!o->jobs[f].p) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const qvl_st_tensor *t = qvl_weights_at(x->w, i);
        char name[QVL_TENSOR_NAME_MAX + 32];
        bool vision = false;
        if (!qvl_qwen3vl_gguf_name(t->name, &x->cfg->vision, name, sizeof name, &vision))
            return qvl_fail(err, QVL_E_INVALID, "%s: no GGUF name for this tensor", t->name);
        if (vision && !o->w[1]) continue;
        qvl_dtype to = QVL_F32;
        qvl_status st = plan_dtype(x, t, &to, err);
        if (st != QVL_OK) return st;
        qvl_gguf_writer *w = o->w[vision];
        job *j = &o->jobs[vision];
        if (t->ndim == 5) {
            const int64_t half[4] = {t->shape[0], t->shape[1], t->shape[3], t->shape[4]};
            if ((st = split_patch(t, to, x->threads, o->patch, err)) != QVL_OK) return st;
            char second[sizeof name + 2];
            snprintf(second, sizeof second, "%s.1", name);
            st = qvl_gguf_writer_add_tensor(w, name, ggml_type_of(to), 4, half, o->patch[0],
                                            NULL, NULL, err);
            if (st == QVL_OK)
                st = qvl_gguf_writer_add_tensor(w, second, ggml_type_of(to), 4, half,
                                                o->patch[1], NULL, NULL, err);
            if (st != QVL_OK) return st;
            j->n += 2;
            o->by_dtype[vision][to] += 2;
            continue;
        }
        part *p = &j->p[j->n++];
        *p = (part){.src = t, .to = to};
        snprintf(p->name, sizeof p->name, "%s", name);
        if (!qvl_dtype_row_bytes(to, t->shape[t->ndim - 1], &(size_t){0}))
            return qvl_fail(err, QVL_E_SHAPE, "%s: rows do not fit %s", t->name,
                            qvl_dtype_name(to));
        int64_t elems = 1;
        for (int d = 0; d < t->ndim; d++) elems *= t->shape[d];
        size_t bytes = 0;
        qvl_dtype_row_bytes(to, elems, &bytes);
        p->bytes = bytes;
        st = qvl_gguf_writer_add_tensor(w, name, ggml_type_of(to), t->ndim, t->shape,
                                        to == t->dtype ? t->data : NULL,
                                        to == t->dtype ? NULL : fill, j, err);
        if (st != QVL_OK) return st;
        o->by_dtype[vision][to]++;
    }
    return QVL_OK;
}

/* Writes both files under temporary names, then moves them into place. */
static qvl_status write_files(const qvl_qwen3vl_export *x, outputs *o, qvl_error *err) {
    const char *paths[2] = {x->out, x->mmproj_out};
    qvl_new_file nf[2] = {{.fd = -1}, {.fd = -1}};
    qvl_status st = QVL_OK;
    for (int f = 0; st == QVL_OK && f < 2; f++) {
        if (!o->w[f]) continue;
        st = qvl_new_file_open(paths[f], &nf[f], err);
        if (st == QVL_OK) st = qvl_gguf_writer_write(o->w[f], &nf[f], err);
    }
    for (int f = 0; st == QVL_OK && f < 2; f++)
        if (o->w[f]) st = qvl_new_file_commit(&nf[f], err);
    qvl_new_file_abandon(&nf[0]);
    qvl_new_file_abandon(&nf[1]);
    return st;
}

qvl_status qvl_qwen3vl_gguf_export(const qvl_qwen3vl_export *x, qvl_qwen3vl_export_stats *stats,
                                   qvl_error *err) {
    memset(stats, 0, sizeof *stats);
    uint32_t ftype = 0;
    if (!qvl_qwen3vl_gguf_file_type(x->weights, &ftype))
        return qvl_fail(err, QVL_E_INVALID, "--weights '%s' is not one of f32, f16, bf16, q8_0, "
                        "q4_k, q6_k, q4_k_m", x->weights ? x->weights : "");
    qvl_status st = check_config(x, err);
    if (st != QVL_OK) return st;
    outputs o;
    memset(&o, 0, sizeof o);
    qvl_preprocess_config pc;
    const char *pc_source = NULL;
    st = qvl_gguf_writer_new(x->out, &o.w[0], err);
    if (st == QVL_OK && x->mmproj_out) st = qvl_gguf_writer_new(x->mmproj_out, &o.w[1], err);
    if (st == QVL_OK && x->files->gguf) st = qvl_gguf_open(x->files->gguf, &o.src[0], err);
    if (st == QVL_OK && x->mmproj_out && x->files->mmproj)
        st = qvl_gguf_open(x->files->mmproj, &o.src[1], err);
    if (st == QVL_OK && x->mmproj_out)
        st = qvl_model_files_preprocess(x->files, &x->cfg->vision, &pc, &pc_source, err);
    if (st == QVL_OK) st = add_tensors(x, &o, err);
    if (st == QVL_OK) st = export_text_keys(o.w[0], x, ftype, o.src[0], err);
    if (st == QVL_OK && o.w[1]) st = export_vision_keys(o.w[1], x, ftype, o.src[1], &pc, err);
    if (st == QVL_OK) st = write_files(x, &o, err);
    if (st == QVL_OK) {
        for (int f = 0; f < 2; f++)
            stats->tensors[f] = o.w[f] ? qvl_gguf_writer_tensor_count(o.w[f]) : 0;
        stats->converted = o.jobs[0].converted + o.jobs[1].converted;
        memcpy(stats->by_dtype, o.by_dtype, sizeof stats->by_dtype);
    }
    outputs_free(&o);
    return st;
}
