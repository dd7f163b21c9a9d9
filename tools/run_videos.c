/* Videos given as frames for qvl run (run_videos.h). */
#define _POSIX_C_SOURCE 200809L

#include "run_videos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/image.h"
#include "qvl/mm_prompt.h"
#include "run_images.h"
#include "video_frames.h"

void run_video_free(run_video *v) {
    for (size_t i = 0; v->files && i < v->n_files; i++) free(v->files[i]);
    free(v->files);
    free(v->kept);
    free(v->text);
    qvl_video_frames_free(&v->decoded);
    memset(v, 0, sizeof *v);
}

/* ---- plan ------------------------------------------------------------------------------------- */

static qvl_status enough_frames(const run_images *im, const run_video *v, qvl_error *err) {
    if (v->n_kept >= im->vc.pc.temporal_patch_size) return QVL_OK;
    return qvl_fail(err, QVL_E_INVALID, "%zu frame(s), %lld kept: a video needs at least %lld",
                    v->n_files, (long long)v->n_kept, (long long)im->vc.pc.temporal_patch_size);
}

/* The processor's sampling, as the decoder asks for it once it knows the stream. */
static qvl_status pick_frames(void *arg, int64_t n_total, double fps, int64_t *idx,
                              int64_t *n_kept, qvl_error *err) {
    return qvl_video_sample_frames(n_total, fps, arg, idx, n_kept, err);
}

/* A --video FILE: its kept frames decoded now, under the caps the flags set. */
static qvl_status plan_file(run_images *im, size_t i, qvl_error *err) {
    run_video *v = &im->videos[i];
    qvl_video_caps caps;
    qvl_video_caps_default(&caps);
    caps.duration_flag = "--video-max-duration";
    caps.bytes_flag = "--video-max-mib";
    caps.seconds_flag = "--video-max-seconds";
    if (im->vb.max_duration > 0) caps.max_duration_s = im->vb.max_duration;
    if (im->vb.max_seconds > 0) caps.max_seconds = im->vb.max_seconds;
    if (im->vb.max_mib > 0) caps.max_bytes = im->vb.max_mib << 20;
    qvl_status st = qvl_video_decode_file(im->paths[i], &caps, pick_frames, &im->vc, &v->decoded,
                                          err);
    if (st != QVL_OK) return qvl_error_prefix(err, "video");
    const qvl_video_frames *d = &v->decoded;
    v->fps = d->fps;
    v->fps_set = true;
    v->n_files = (size_t)d->n_total;
    v->n_kept = d->n;
    if (!(v->kept = malloc((size_t)d->n * sizeof *v->kept)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    memcpy(v->kept, d->indices, (size_t)d->n * sizeof *v->kept);
    im->widths[i] = d->width;
    im->heights[i] = d->height;
    st = enough_frames(im, v, err);
    if (st != QVL_OK) return qvl_error_prefix(err, "video %s", im->paths[i]);
    return QVL_OK;
}

static qvl_status plan_frames(run_images *im, size_t i, qvl_error *err);

qvl_status run_video_plan(run_images *im, size_t i, qvl_error *err) {
    run_video *v = &im->videos[i];
    const char *source = im->paths[i];
    if (v->is_file) {
        qvl_status st = plan_file(im, i, err);
        if (st != QVL_OK) return st;
    } else {
        qvl_status st = plan_frames(im, i, err);
        if (st != QVL_OK) return qvl_error_prefix(err, "video %s", source);
    }
    const int64_t tp = im->vc.pc.temporal_patch_size;
    v->n_groups = (v->n_kept + tp - 1) / tp;
    double *secs = malloc((size_t)v->n_groups * sizeof *secs);
    qvl_status st = secs ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) st = qvl_video_timestamps(v->kept, v->n_kept, v->fps, tp, secs, err);
    if (st == QVL_OK) st = qvl_video_prompt_text(secs, v->n_groups, &v->text, err);
    free(secs);
    if (st != QVL_OK) return qvl_error_prefix(err, "video %s", source);
    return QVL_OK;
}

/* --video-frames: the list, the sampling and every kept frame's header. */
static qvl_status plan_frames(run_images *im, size_t i, qvl_error *err) {
    run_video *v = &im->videos[i];
    const char *source = im->paths[i];
    if (!v->fps_set) v->fps = QVL_VIDEO_DEFAULT_FPS;
    qvl_status st = video_frames_list(source, &v->files, &v->n_files, err);
    if (st == QVL_OK && !(v->kept = malloc(v->n_files * sizeof *v->kept)))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK)
        st = qvl_video_sample_frames((int64_t)v->n_files, v->fps, &im->vc, v->kept, &v->n_kept, err);
    if (st == QVL_OK) st = enough_frames(im, v, err);
    if (st == QVL_OK)
        st = video_frames_probe(v->files, v->kept, v->n_kept, &im->widths[i], &im->heights[i],
                                err);
    return st;
}

/* ---- budget ----------------------------------------------------------------------------------- */

/* The largest grid of video i within `budget` tokens (qvl_video_fit_grid). */
static qvl_status fit_one(run_images *im, size_t i, int64_t budget, const char *why,
                          qvl_error *err) {
    run_video *v = &im->videos[i];
    qvl_video_fit fit;
    qvl_status st = qvl_video_fit_grid(v->n_kept, im->widths[i], im->heights[i], &im->vc, budget,
                                       &fit, err);
    if (st != QVL_OK) return qvl_error_prefix(err, "video %s", im->paths[i]);
    if (!fit.fits)
        return qvl_fail(err, QVL_E_LIMIT,
                        "video %s: %lld frame groups need at least %lld tokens, but %s allows "
                        "%lld: lower --video-max-frames or raise --ctx (-c)", im->paths[i],
                        (long long)v->n_groups, (long long)v->n_groups, why, (long long)budget);
    v->min_pixels = fit.min_pixels;
    v->max_pixels = fit.max_pixels;
    im->grids[i] = fit.grid;
    im->tokens[i] = fit.tokens;
    return QVL_OK;
}

qvl_status run_videos_fit(run_images *im, const int32_t *ids, int64_t n, int64_t ctx,
                          qvl_error *err) {
    if (im->n_videos == 0) return QVL_OK;
    int64_t pads = 0, groups = 0;
    for (int64_t k = 0; k < n; k++) pads += ids[k] == im->video_pad_id;
    for (size_t i = 0; i < im->n; i++) groups += im->is_video[i] ? im->videos[i].n_groups : 0;
    if (pads != groups)
        return qvl_fail(err, QVL_E_INVALID, "the prompt holds %lld video pads, the videos %lld "
                        "frame groups", (long long)pads, (long long)groups);
    /* Everything but the videos' own tokens: text (timestamps included) and pictures. */
    int64_t other = n - pads;
    for (size_t i = 0; i < im->n; i++) other += im->is_video[i] ? 0 : im->tokens[i];
    const int64_t left = ctx - other;
    char why[160];
    int64_t budget;
    if (im->vb.max_tokens_set) {
        budget = im->vb.max_tokens;
        snprintf(why, sizeof why, "--video-max-tokens");
    } else {
        budget = left > 0 ? left / (int64_t)im->n_videos : 0;
        snprintf(why, sizeof why, "the context (%lld tokens, %lld of them for the rest of the "
                 "prompt, shared by %zu video(s))", (long long)ctx, (long long)other, im->n_videos);
    }
    for (size_t i = 0; i < im->n; i++) {
        if (!im->is_video[i]) continue;
        qvl_status st = fit_one(im, i, budget, why, err);
        if (st != QVL_OK) return st;
        im->total_tokens += im->tokens[i];
        const run_video *v = &im->videos[i];
        char what[128] = "";
        if (v->is_file)
            snprintf(what, sizeof what, " (%s in %s%s)", v->decoded.codec, v->decoded.container,
                     v->decoded.rotation == 90    ? ", turned 90"
                     : v->decoded.rotation == 180 ? ", turned 180"
                     : v->decoded.rotation == 270 ? ", turned 270"
                                                  : "");
        else if (!v->fps_set)
            snprintf(what, sizeof what, " (assumed: no --video-fps)");
        if (!im->quiet)
            fprintf(stderr, "video %zu: %s, %zu frames at %g fps%s -> %lld kept, %dx%d -> grid "
                    "%lldx%lldx%lld, %lld tokens\n", i + 1, im->paths[i], v->n_files, v->fps,
                    what, (long long)v->n_kept,
                    im->widths[i], im->heights[i], (long long)im->grids[i].t,
                    (long long)im->grids[i].h, (long long)im->grids[i].w,
                    (long long)im->tokens[i]);
    }
    return QVL_OK;
}

qvl_status run_videos_expand(const run_images *im, int32_t **ids, int64_t *n, qvl_error *err) {
    if (im->n_videos == 0) return QVL_OK;
    int64_t groups = 0;
    for (size_t i = 0; i < im->n; i++) groups += im->is_video[i] ? im->grids[i].t : 0;
    int64_t *counts = malloc((size_t)(groups > 0 ? groups : 1) * sizeof *counts);
    if (!counts) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    int64_t k = 0;
    const int64_t mm = im->vc.pc.merge_size * im->vc.pc.merge_size;
    for (size_t i = 0; i < im->n; i++)
        for (int64_t g = 0; im->is_video[i] && g < im->grids[i].t; g++)
            counts[k++] = im->grids[i].h * im->grids[i].w / mm;
    int32_t *out = NULL;
    int64_t n_out = 0;
    qvl_status st = qvl_expand_image_pads(*ids, *n, im->video_pad_id, counts, (size_t)groups,
                                          &out, &n_out, err);
    free(counts);
    if (st != QVL_OK) return st;
    free(*ids);
    *ids = out;
    *n = n_out;
    return QVL_OK;
}

/* ---- decode ----------------------------------------------------------------------------------- */

qvl_status run_video_decode(run_images *im, size_t i, float **px, qvl_error *err) {
    run_video *v = &im->videos[i];
    *px = NULL;
    qvl_image *frames = v->is_file ? v->decoded.frames : calloc((size_t)v->n_kept, sizeof *frames);
    if (!frames) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = QVL_OK;
    int64_t loaded = 0;
    for (; !v->is_file && st == QVL_OK && loaded < v->n_kept; loaded++) {
        const char *f = v->files[v->kept[loaded]];
        st = qvl_image_load(f, &frames[loaded], err);
        if (st == QVL_OK && (frames[loaded].width != im->widths[i] ||
                             frames[loaded].height != im->heights[i]))
            st = qvl_fail(err, QVL_E_PARSE, "%s: decoded size %dx%d differs from the header's "
                          "%dx%d", f, frames[loaded].width, frames[loaded].height, im->widths[i],
                          im->heights[i]);
    }
    /* The bounds the budget settled on (run_videos_fit): the grid comes out as planned. */
    qvl_image_grid g = {0};
    qvl_video_config vc = im->vc;
    vc.pc.min_pixels = v->min_pixels;
    vc.pc.max_pixels = v->max_pixels;
    if (st == QVL_OK) st = qvl_video_preprocess(frames, (size_t)v->n_kept, &vc, px, &g, err);
    if (st == QVL_OK && (g.t != im->grids[i].t || g.h != im->grids[i].h || g.w != im->grids[i].w)) {
        free(*px);
        *px = NULL;
        st = qvl_fail(err, QVL_E_MISMATCH, "preprocessed grid differs from the plan");
    }
    if (v->is_file) { /* held since planning; not needed any more */
        qvl_video_frames_free(&v->decoded);
    } else {
        for (int64_t k = 0; k < loaded; k++) qvl_image_free(&frames[k]);
        free(frames);
    }
    if (st != QVL_OK) return qvl_error_prefix(err, "video %s", im->paths[i]);
    return QVL_OK;
}
