/* Pictures for qvl run/chat: plan from the headers, then decode (run_images.h). */
#define _POSIX_C_SOURCE 200809L

#include "run_images.h"
#include "image_bounds.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "qvl/file.h"
#include "qvl/image.h"
#include "qvl/log.h"

void run_images_free(run_images *im) {
    if (im->files)
        for (size_t i = 0; i < im->n; i++) free(im->files[i]);
    free(im->files);
    free(im->file_sizes);
    free(im->paths);
    free(im->widths);
    free(im->heights);
    free(im->grids);
    free(im->tokens);
    free(im->pixels);
    for (size_t i = 0; im->videos && i < im->n; i++) run_video_free(&im->videos[i]);
    free(im->videos);
    free(im->is_video);
    memset(im, 0, sizeof *im);
}

/* The value of "--NAME V" or "--NAME=V" at argv[*i] (advancing *i), NULL when argv[*i] is
 * another argument; *missing when the flag has no value. */
static const char *flag_value(const char *name, int argc, char **argv, int *i, bool *missing) {
    const size_t len = strlen(name);
    *missing = false;
    if (strncmp(argv[*i], name, len) != 0) return NULL;
    if (argv[*i][len] == '=') return argv[*i] + len + 1;
    if (argv[*i][len] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

int run_images_collect(const char *prog, int argc, char **argv, run_images *im) {
    im->paths = calloc((size_t)argc + 1, sizeof *im->paths);
    im->is_video = calloc((size_t)argc + 1, sizeof *im->is_video);
    im->videos = calloc((size_t)argc + 1, sizeof *im->videos);
    if (!im->paths || !im->is_video || !im->videos) return -1;
    int out = 0;
    static const char *const flags[] = {"--image", "--video-frames", "--video-fps", "--video"};
    static const char *const values[] = {"a FILE", "DIR or F1,F2,...", "a rate R", "a FILE"};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) { /* the rest is positional: keep it as it is */
            while (i < argc) argv[out++] = argv[i++];
            break;
        }
        int which = -1;
        const char *v = NULL;
        for (int f = 0; f < 4 && which < 0; f++) {
            bool missing;
            v = flag_value(flags[f], argc, argv, &i, &missing);
            if (missing) {
                fprintf(stderr, "%s: %s needs %s\n", prog, flags[f], values[f]);
                return -1;
            }
            if (v) which = f;
        }
        if (which < 0) {
            argv[out++] = argv[i];
        } else if (which == 2) { /* the rate of the video just before */
            char *end = NULL;
            errno = 0;
            double r = strtod(v, &end);
            if (im->n > 0 && im->is_video[im->n - 1] && im->videos[im->n - 1].is_file) {
                fprintf(stderr, "%s: --video-fps %s: a --video FILE's rate is the file's own "
                        "(--video-fps goes with --video-frames)\n", prog, v);
                return -1;
            }
            if (im->n == 0 || !im->is_video[im->n - 1] || im->videos[im->n - 1].fps_set) {
                fprintf(stderr, "%s: --video-fps %s must follow its --video-frames (one each)\n",
                        prog, v);
                return -1;
            }
            if (end == v || *end || errno || !isfinite(r) || r <= 0 || r > 1e6) {
                fprintf(stderr, "%s: --video-fps %s is not a frame rate (frames per second, > 0)\n",
                        prog, v);
                return -1;
            }
            im->videos[im->n - 1].fps = r;
            im->videos[im->n - 1].fps_set = true;
        } else {
            im->is_video[im->n] = which == 1 || which == 3;
            im->videos[im->n].is_file = which == 3;
            im->n_videos += which == 1 || which == 3;
            im->paths[im->n++] = v;
        }
    }
    return out;
}

/* video_preprocessor_config.json (or the video processor's defaults) and the --video-* flags
 * over it. */
static qvl_status load_video_processor(const qvl_model_files *files, const qvl_qwen3vl_config *cfg,
                                       run_images *im, qvl_error *err) {
    if (cfg->video_token_id < 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: the model has no video_token_id",
                        files->model);
    const char *path = files->model;
    qvl_status st = qvl_model_files_video(files, &cfg->vision, &im->vc, err);
    if (st != QVL_OK) return st;
    const run_video_bounds *vb = &im->vb;
    qvl_video_config *vc = &im->vc;
    if (vb->min_frames_set) vc->min_frames = vb->min_frames;
    if (vb->max_frames_set) vc->max_frames = vb->max_frames;
    if (vb->max_pixels_set) vc->pc.max_pixels = vb->max_pixels;
    if (vc->min_frames > vc->max_frames)
        return qvl_fail(err, QVL_E_INVALID, "min frames %lld exceed max frames %lld "
                        "(--video-min-frames / --video-max-frames)", (long long)vc->min_frames,
                        (long long)vc->max_frames);
    if (vc->pc.min_pixels > vc->pc.max_pixels) /* the flag the user gave wins */
        vc->pc.min_pixels = vc->pc.max_pixels;
    if (vc->pc.patch_size != cfg->vision.patch_size ||
        vc->pc.merge_size != cfg->vision.spatial_merge_size ||
        vc->pc.temporal_patch_size != cfg->vision.temporal_patch_size)
        return qvl_fail(err, QVL_E_INVALID, "%s: patch/merge/temporal sizes differ from config.json",
                        path);
    return QVL_OK;
}

/* The vision config (config.json or the GGUF keys) and the image processor
 * (preprocessor_config.json, the mmproj's, or the processor's defaults). */
static qvl_status load_processor(const qvl_model_files *files, run_images *im, const char **source,
                                 qvl_error *err) {
    const char *path = files->model;
    qvl_qwen3vl_config cfg;
    qvl_status st = qvl_model_files_config(files, &cfg, err);
    if (st != QVL_OK) return st;
    if (!cfg.has_vision || cfg.image_token_id < 0) return qvl_model_files_no_vision(files, err);
    im->pad_id = (int32_t)cfg.image_token_id;
    st = qvl_model_files_preprocess(files, &cfg.vision, &im->pc, source, err);
    if (st != QVL_OK) return st;
    im->video_pad_id = (int32_t)cfg.video_token_id;
    if (st == QVL_OK && im->n_videos > 0) st = load_video_processor(files, &cfg, im, err);
    if (st != QVL_OK) return st;
    const qvl_preprocess_config *pc = &im->pc;
    if (pc->patch_size != cfg.vision.patch_size || pc->merge_size != cfg.vision.spatial_merge_size ||
        pc->temporal_patch_size != cfg.vision.temporal_patch_size)
        return qvl_fail(err, QVL_E_INVALID, "%s: patch/merge/temporal sizes differ from config.json",
                        path);
    return QVL_OK;
}

/* ---- plan ---------------------------------------------------------------------------------- */

/* The picture's upright size from its headers (EXIF orientations 5-8 swap the sides), with the
 * decoder's own size checks and errors. */
static qvl_status probe_size(const char *path, const char *data, size_t size, int32_t *w,
                             int32_t *h, qvl_error *err) {
    return qvl_image_probe(data, size, path, w, h, err);
}

qvl_status run_images_plan(const qvl_model_files *files, const run_image_bounds *b, run_images *im,
                           qvl_error *err) {
    if (im->n == 0) return QVL_OK;
    const char *source = NULL;
    qvl_status st = load_processor(files, im, &source, err);
    char cap_what[128] = "";
    if (st == QVL_OK) st = image_bounds_resolve(b, source, &im->pc, cap_what, sizeof cap_what, err);
    if (st != QVL_OK) return st;
    im->files = calloc(im->n, sizeof *im->files);
    im->file_sizes = calloc(im->n, sizeof *im->file_sizes);
    im->widths = calloc(im->n, sizeof *im->widths);
    im->heights = calloc(im->n, sizeof *im->heights);
    im->grids = calloc(im->n, sizeof *im->grids);
    im->tokens = calloc(im->n, sizeof *im->tokens);
    if (!im->files || !im->file_sizes || !im->widths || !im->heights || !im->grids || !im->tokens)
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    /* The same size window without the upper bound: tells whether the bound scaled it down. */
    qvl_preprocess_config uncapped = im->pc;
    uncapped.max_pixels = INT64_MAX;
    im->total_tokens = 0;
    for (size_t i = 0; i < im->n; i++) {
        const char *path = im->paths[i];
        if (im->is_video[i]) { /* its grid waits for the token budget (run_videos_fit) */
            st = run_video_plan(im, i, err);
            if (st != QVL_OK) return st;
            continue;
        }
        st = qvl_read_file(path, (size_t)INT32_MAX, QVL_E_IO, &im->files[i], &im->file_sizes[i],
                           err);
        if (st == QVL_OK)
            st = probe_size(path, im->files[i], im->file_sizes[i], &im->widths[i],
                            &im->heights[i], err);
        if (st == QVL_OK) {
            st = qvl_image_plan_grid(im->widths[i], im->heights[i], &im->pc, &im->grids[i], err);
            if (st != QVL_OK) qvl_error_prefix(err, "%s", path);
        }
        if (st != QVL_OK) return st;
        im->tokens[i] = qvl_image_grid_tokens(&im->grids[i], im->pc.merge_size);
        im->total_tokens += im->tokens[i];
        qvl_image_grid full;
        qvl_error ignore = {0};
        bool capped = qvl_image_plan_grid(im->widths[i], im->heights[i], &uncapped, &full,
                                          &ignore) == QVL_OK &&
                      qvl_image_grid_tokens(&full, im->pc.merge_size) > im->tokens[i];
        if (!im->quiet)
            fprintf(stderr, "image %zu: %dx%d -> grid %lldx%lld, %lld tokens%s%s%s\n", i + 1,
                    im->widths[i], im->heights[i], (long long)im->grids[i].h,
                    (long long)im->grids[i].w, (long long)im->tokens[i],
                    capped ? " (scaled down to fit " : "", capped ? cap_what : "",
                    capped ? ")" : "");
    }
    return QVL_OK;
}

/* ---- decode -------------------------------------------------------------------------------- */

qvl_status run_images_decode(run_images *im, qvl_error *err) {
    const qvl_preprocess_config *pc = &im->pc;
    const int64_t width = 3 * pc->temporal_patch_size * pc->patch_size * pc->patch_size;
    int64_t rows = 0;
    for (size_t i = 0; i < im->n; i++) rows += qvl_image_grid_patches(&im->grids[i]);
    free(im->pixels);
    im->pixels = malloc((size_t)(rows * width) * sizeof *im->pixels);
    if (!im->pixels) return qvl_fail(err, QVL_E_NOMEM, "out of memory for the pictures' pixels");
    rows = 0;
    for (size_t i = 0; i < im->n; i++) {
        qvl_image img;
        float *px = NULL;
        qvl_image_grid grid;
        if (im->is_video[i]) {
            qvl_status st = run_video_decode(im, i, &px, err);
            if (st != QVL_OK) return st;
            const int64_t n_rows = qvl_image_grid_patches(&im->grids[i]);
            memcpy(im->pixels + rows * width, px, (size_t)(n_rows * width) * sizeof *px);
            rows += n_rows;
            free(px);
            continue;
        }
        qvl_status st = qvl_image_decode(im->files[i], im->file_sizes[i], im->paths[i], &img, err);
        free(im->files[i]);
        im->files[i] = NULL;
        if (st == QVL_OK && (img.width != im->widths[i] || img.height != im->heights[i]))
            st = qvl_fail(err, QVL_E_PARSE, "%s: decoded size %dx%d differs from the header's %dx%d",
                          im->paths[i], img.width, img.height, im->widths[i], im->heights[i]);
        if (st == QVL_OK) {
            st = qvl_image_preprocess(&img, pc, &px, &grid, err);
            if (st != QVL_OK) qvl_error_prefix(err, "%s", im->paths[i]);
        }
        qvl_image_free(&img);
        if (st != QVL_OK) return st;
        const int64_t n_rows = qvl_image_grid_patches(&grid);
        if (grid.h != im->grids[i].h || grid.w != im->grids[i].w || grid.t != im->grids[i].t) {
            free(px);
            return qvl_fail(err, QVL_E_MISMATCH, "%s: preprocessed grid differs from the plan",
                            im->paths[i]);
        }
        memcpy(im->pixels + rows * width, px, (size_t)(n_rows * width) * sizeof *px);
        rows += n_rows;
        free(px);
    }
    return QVL_OK;
}
