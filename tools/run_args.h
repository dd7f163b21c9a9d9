/* qvl run's and qvl chat's settings once the command line is parsed. Model-free: qvl chat
 * runs on the engine and sees no model header. */
#ifndef QVL_TOOLS_RUN_ARGS_H
#define QVL_TOOLS_RUN_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend_args.h"
#include "run_videos.h"

/* Default of --image-max-tokens: a picture never costs more tokens than this unless asked
 * (4096 merged tokens = 4,194,304 pixels with 16-pixel patches merged 2x2). */
#define RUN_IMAGE_MAX_TOKENS_DEFAULT 4096

/* The pixel/token bounds as the user gave them; *_set says the flag was on the command line. */
typedef struct run_image_bounds {
    int64_t min_pixels, max_pixels, min_tokens, max_tokens;
    bool min_pixels_set, max_pixels_set, min_tokens_set, max_tokens_set;
} run_image_bounds;

typedef struct run_args {
    const char *model, *prompt, *file, *system, *ids, *dump_logits, *backend, *plugins, *weights;
    const char *kv_type; /* --kv-type */
    const char *mmproj;  /* --mmproj: the vision GGUF of a -m MODEL.gguf */
    const char *json_schema, *grammar; /* --json-schema FILE, --grammar FILE (run_grammar.h) */
    bool json;                         /* --json */
    const char *image_help; /* --image is collected before parsing (repeatable) */
    const char *video_help, *video_fps_help; /* so are --video-frames and --video-fps */
    const char *video_file_help;             /* and --video */
    int64_t n_predict, top_k, seed, ctx, batch;
    backend_args be; /* -t, -ngl, --cpu-backend, --vision-backend, --gpu-mem-mib */
    run_image_bounds bounds;
    run_video_bounds vbounds;
    double temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int64_t repeat_last_n; /* --repeat-last-n: the penalties' window; -1 the context, 0 none */
    bool print_ids, no_fuse, no_mmap, verbose, quiet, interactive;
    bool ignore_eos;    /* --ignore-eos */
    bool until_context; /* -n -1: a full context ends the answer, it is no error */
} run_args;

#endif
