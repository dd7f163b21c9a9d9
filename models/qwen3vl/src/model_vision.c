/* The vision encoder's graph, kept for the next encode (qvl_model_encode_images).
 *
 * The vision graph depends on the image grids only, so images of the grids encoded last (the
 * same picture size again: a benchmark's repetitions, a server's requests, several screenshots)
 * reuse it: nothing is built, split, fused, planned or bound again, and the host-side inputs
 * that depend on the grids alone (position taps, rope positions, segments) are computed once.
 * Only the pixels are new per encode. Other grids build a new graph in its place.
 *
 * Its arena stays allocated from one encode to the next, until a prompt runs
 * (model_vision_release): a large image's activations must not stay on the device beside the
 * prompt's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_internal.h"
#include "qvl/image_preprocess.h"

void model_vision_forget(qvl_model *m) {
    vision_step *v = &m->vision;
    qvl_split_free(v->sp);
    free(v->grids);
    free(v->pos_idx);
    free(v->pos_w);
    free(v->rope_pos);
    free(v->segments);
    memset(v, 0, sizeof *v);
}

void model_vision_release(qvl_model *m) { qvl_split_release_arenas(m->vision.sp); }

static bool same_grids(const vision_step *v, size_t n_images, const qvl_image_grid *grids) {
    return v->sp && v->n_images == n_images &&
           memcmp(v->grids, grids, n_images * sizeof *grids) == 0;
}

/* The kept graph for these grids, building (and keeping) it when the last grids differ. */
static qvl_status vision_ready(qvl_model *m, size_t n_images, const qvl_image_grid *grids,
                               qvl_error *err) {
    vision_step *v = &m->vision;
    if (same_grids(v, n_images, grids)) return QVL_OK;
    model_vision_forget(m);
    qvl_vision_graph_opts vo = {.n_images = n_images, .grids = grids,
                                .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
                                .matrix_dtype_of = model_bound_dtype, .matrix_dtype_ctx = m};
    qvl_graph *g = NULL;
    qvl_status st = qvl_qwen3vl_build_vision(&m->cfg, &vo, &g, err);
    if (st == QVL_OK) st = model_split(m, g, false, &v->sp, err);
    qvl_graph_free(g);
    /* The graph checked the grids, so these sizes do not overflow. */
    int64_t S = 0, G = 0;
    for (size_t i = 0; st == QVL_OK && i < n_images; i++) {
        S += qvl_image_grid_patches(&grids[i]);
        G += grids[i].t;
    }
    if (st == QVL_OK) {
        v->S = S;
        v->G = G;
        v->grids = malloc(n_images * sizeof *grids);
        v->pos_idx = malloc((size_t)(4 * S) * sizeof *v->pos_idx);
        v->pos_w = malloc((size_t)(4 * S) * sizeof *v->pos_w);
        v->rope_pos = malloc((size_t)(2 * S) * sizeof *v->rope_pos);
        v->segments = malloc((size_t)(G + 1) * sizeof *v->segments);
        if (!v->grids || !v->pos_idx || !v->pos_w || !v->rope_pos || !v->segments)
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    if (st == QVL_OK)
        st = qvl_qwen3vl_vision_aux(&m->cfg, n_images, grids, v->pos_idx, v->pos_w, v->rope_pos,
                                    v->segments, err);
    if (st != QVL_OK) {
        model_vision_forget(m);
        return st;
    }
    memcpy(v->grids, grids, n_images * sizeof *grids);
    v->n_images = n_images;
    return QVL_OK;
}

/* Every input, set again before each run: the planner may reuse an input's bytes after its
 * last reader (graph.h). */
static qvl_status set_vision_inputs(qvl_model *m, const float *pixels, qvl_error *err) {
    const vision_step *v = &m->vision;
    const qvl_vision_config *c = &m->cfg.vision;
    const int64_t S = v->S;
    const int64_t width = c->in_channels * c->temporal_patch_size * c->patch_size * c->patch_size;
    qvl_status st = qvl_split_set(v->sp, "patches", pixels, (size_t)(S * width) * sizeof *pixels,
                                  err);
    if (st == QVL_OK)
        st = qvl_split_set(v->sp, "pos_interp.idx", v->pos_idx,
                           (size_t)(4 * S) * sizeof *v->pos_idx, err);
    if (st == QVL_OK)
        st = qvl_split_set(v->sp, "pos_interp.w", v->pos_w, (size_t)(4 * S) * sizeof *v->pos_w,
                           err);
    if (st == QVL_OK)
        st = qvl_split_set(v->sp, "rope_pos", v->rope_pos, (size_t)(2 * S) * sizeof *v->rope_pos,
                           err);
    if (st == QVL_OK)
        st = qvl_split_set(v->sp, "segments", v->segments,
                           (size_t)(v->G + 1) * sizeof *v->segments, err);
    return st;
}

/* The features' host memory: merger output and deepstack blocks, [K, D] floats each. */
typedef struct feature_memory {
    int64_t K, D;
    size_t bytes;  /* of one [K, D] block */
    int32_t n_deepstack;
    float *embeds, *deepstack;
    pthread_t thread;
    bool threaded;
} feature_memory;

/* malloc(bytes) with one byte of every page written (NULL when out of memory). */
static float *malloc_touched(size_t bytes) {
    char *p = malloc(bytes);
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    for (size_t i = 0; p && i < bytes; i += step) ((volatile char *)p)[i] = 0;
    return (float *)p;
}

/* Allocates the features' memory, its pages touched: fresh pages cost a fault each when first
 * touched (about 10 ms for the 25 MB of a 1024x768 picture), which the copy from the device
 * would otherwise pay after the run. */
static void *feature_memory_fault_in(void *arg) {
    feature_memory *fm = arg;
    fm->embeds = malloc_touched(fm->bytes);
    fm->deepstack = malloc_touched(fm->bytes * (fm->n_deepstack ? (size_t)fm->n_deepstack : 1));
    return NULL;
}

/* Starts feature_memory_fault_in on a helper thread, to run while the device computes (or
 * runs it here when no thread can be made). */
static void feature_memory_start(const qvl_model *m, feature_memory *fm) {
    const qvl_vision_config *c = &m->cfg.vision;
    memset(fm, 0, sizeof *fm);
    fm->K = m->vision.S / (c->spatial_merge_size * c->spatial_merge_size);
    fm->D = c->out_hidden_size;
    fm->bytes = (size_t)(fm->K * fm->D) * sizeof(float);
    fm->n_deepstack = c->n_deepstack;
    fm->threaded = pthread_create(&fm->thread, NULL, feature_memory_fault_in, fm) == 0;
    if (!fm->threaded) feature_memory_fault_in(fm);
}

static void feature_memory_wait(feature_memory *fm) {
    if (fm->threaded) pthread_join(fm->thread, NULL);
    fm->threaded = false;
}

/* Downloads the features into fm's memory, which out then owns. */
static qvl_status get_vision_outputs(qvl_model *m, feature_memory *fm, qvl_image_features *out,
                                     qvl_error *err) {
    out->n_tokens = fm->K;
    out->hidden = fm->D;
    out->n_deepstack = fm->n_deepstack;
    out->embeds = fm->embeds;
    out->deepstack = fm->deepstack;
    fm->embeds = fm->deepstack = NULL;
    if (!out->embeds || !out->deepstack) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    const size_t bytes = fm->bytes;
    qvl_status st = qvl_split_get(m->vision.sp, "merger", out->embeds, bytes, err);
    for (int32_t k = 0; st == QVL_OK && k < fm->n_deepstack; k++) {
        char name[32];
        snprintf(name, sizeof name, "deepstack.%d", (int)k);
        st = qvl_split_get(m->vision.sp, name, out->deepstack + (size_t)(k * fm->K * fm->D), bytes,
                           err);
    }
    return st;
}

qvl_status model_vision_encode(qvl_model *m, const float *pixels, size_t n_images,
                               const qvl_image_grid *grids, qvl_image_features *out,
                               qvl_error *err) {
    qvl_status st = vision_ready(m, n_images, grids, err);
    if (st == QVL_OK) {
        qvl_split_set_profiling(m->vision.sp, m->inst.profiling);
        qvl_split_set_progress(m->vision.sp, m->inst.vision_progress, m->inst.vision_progress_arg);
        st = set_vision_inputs(m, pixels, err);
    }
    feature_memory fm = {0};
    if (st == QVL_OK) {
        feature_memory_start(m, &fm);
        st = qvl_split_run(m->vision.sp, err);
        feature_memory_wait(&fm);
    }
    if (st == QVL_OK) model_collect_profile(m, m->vision.sp);
    if (st == QVL_OK) st = get_vision_outputs(m, &fm, out, err);
    free(fm.embeds); /* left over when the run failed */
    free(fm.deepstack);
    /* A failed run may leave the backend's buffers in any state: the next encode starts over. */
    if (st != QVL_OK) model_vision_forget(m);
    return st;
}

void qvl_model_set_vision_progress(qvl_model *m, qvl_exec_progress_fn fn, void *arg) {
    m->inst.vision_progress = fn;
    m->inst.vision_progress_arg = fn ? arg : NULL;
}
