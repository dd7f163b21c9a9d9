/* The pictures of a qvl run prompt, in two steps so that no work is wasted on a picture
 * that cannot be used: run_images_plan reads each file and its header only and decides the
 * size the processor will give it (and so its token count); run_images_decode then decodes and
 * preprocesses the pixels. Between the two the caller checks that the prompt fits the context. */
#ifndef QVL_TOOLS_RUN_IMAGES_H
#define QVL_TOOLS_RUN_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/image_preprocess.h"
#include "qvl/model_files.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/status.h"
#include "qvl/video_preprocess.h"
#include "run_args.h"
#include "run_videos.h"

/* The media of a prompt: pictures (--image) and videos (--video, --video-frames), in command-line
 * order; per-item arrays are indexed alike. */
typedef struct run_images {
    size_t n;
    const char **paths;      /* --image / --video / --video-frames values in order (into argv) */
    bool *is_video;          /* per item */
    run_video *videos;       /* per item (used where is_video) */
    size_t n_videos;
    char **files;            /* each file's bytes, read once, until decoded */
    size_t *file_sizes;
    int32_t *widths, *heights; /* as the picture is meant to be seen (EXIF applied) */
    qvl_image_grid *grids;   /* per image, in patches */
    int64_t *tokens;         /* LLM tokens per image */
    int64_t total_tokens;
    float *pixels;           /* all images' pixel matrices, concatenated (after decode) */
    int32_t pad_id;          /* the model's image_token_id */
    int32_t video_pad_id;    /* the model's video_token_id */
    qvl_preprocess_config pc;
    qvl_video_config vc;     /* video_preprocessor_config.json and the --video-* flags */
    run_video_bounds vb;
    bool quiet;              /* no per-picture line on stderr */
} run_images;

void run_images_free(run_images *im);

/* Take every "--image FILE", "--video FILE", "--video-frames DIR|F1,F2,..." and "--video-fps R"
 * (the rate of the --video-frames before it) out of argv, also in their "=" forms (the flag parser has no
 * repeatable flags); returns the new argc, or -1 on a missing or bad value (message printed). */
int run_images_collect(const char *prog, int argc, char **argv, run_images *im);

/* Read DIR's config.json, preprocessor_config.json (and video_preprocessor_config.json when
 * there are videos: run_video_plan), resolve the bounds (flags over the
 * files; --image-max-tokens caps the processor's default size), read every file's header and
 * plan its grid. Prints one line per picture on stderr ("image 1: WxH -> grid HxW, N tokens").
 * Errors name the file or the flags the user gave. */
qvl_status run_images_plan(const qvl_model_files *files, const run_image_bounds *b, run_images *im,
                           qvl_error *err);

/* Decode and preprocess every planned picture and video into im->pixels (and drop the file
 * bytes). */
qvl_status run_images_decode(run_images *im, qvl_error *err);

#endif
