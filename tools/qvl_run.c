/* qvl run / qvl chat: prompt -> chat template -> tokens -> model -> sampled answer (qvl chat
 * goes to the engine once its command line is checked: chat_session.h).
 * Everything that can be decided without the model is decided first (prompt, picture sizes,
 * whether it all fits the context), so a bad request costs no loading or encoding. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chat_session.h"
#include "cli.h"
#include "qvl/file.h"
#include "qvl/log.h"
#include "qvl/qwen3vl_gguf.h"
#include "qvl/video_preprocess.h"
#include "qvl_commands.h"
#include "run_answer.h"
#include "run_context.h"
#include "run_grammar.h"
#include "run_interrupt.h"
#include "run_load.h"
#include "run_sampling.h"
#include "run_session.h"

enum {
    OPT_TEMP, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT, OPT_PRESENCE, OPT_FREQUENCY, OPT_SEED,
    OPT_MIN_PIXELS,
    OPT_MAX_PIXELS, OPT_MIN_TOKENS, OPT_MAX_TOKENS, OPT_THREADS, OPT_V_MAX_FRAMES,
    OPT_V_MIN_FRAMES, OPT_V_MAX_TOKENS, OPT_V_MAX_PIXELS, OPT_COUNT
};

/* llama.cpp's spellings. */
static const cli_alias run_aliases[] = {
    {"-sys", "system"}, {"--system-prompt", "system"}, {"--ctx-size", "ctx"},
    {"-cnv", "interactive"}, {"--conversation", "interactive"}, {"-ngl", "gpu-layers"},
    {"--n-gpu-layers", "gpu-layers"}, {"--grammar-file", "grammar"},
};
/* Options of qvl run only: qvl chat's help leaves them out. */
static const char *const run_only[] = {"prompt", "file", "ids", "dump-logits", "interactive",
                                       "json", "json-schema", "grammar", "ignore-eos", NULL};

/* Prompts read from a file or stdin are refused above this (a mistaken -f on a model file
 * should cost one line, not the tokenizer's time). */
#define PROMPT_MAX_BYTES ((size_t)64 << 20)

static int fail(const char *cmd, const qvl_error *err) {
    fprintf(stderr, "qvl %s: %s\n", cmd, err->msg);
    return 1;
}

/* Which sampling flags were given (qvl chat gets the same record). */
static chat_flags flags_seen(const cli_opt *opts) {
    return (chat_flags){
        .temp = opts[OPT_TEMP].seen, .top_k = opts[OPT_TOP_K].seen, .top_p = opts[OPT_TOP_P].seen,
        .min_p = opts[OPT_MIN_P].seen, .repeat_penalty = opts[OPT_REPEAT].seen,
        .presence_penalty = opts[OPT_PRESENCE].seen, .frequency_penalty = opts[OPT_FREQUENCY].seen,
        .seed = opts[OPT_SEED].seen, .threads = opts[OPT_THREADS].seen};
}

/* --ids with --image: the ids must already hold each picture's pad tokens. */
static qvl_status check_id_pads(const int32_t *ids, int64_t n, const run_images *im,
                                qvl_error *err) {
    int64_t have = 0;
    for (int64_t i = 0; i < n; i++) have += ids[i] == im->pad_id;
    if (have != im->total_tokens)
        return qvl_fail(err, QVL_E_INVALID,
                        "--ids holds %lld image pad ids (%d) but the %zu image(s) need %lld",
                        (long long)have, (int)im->pad_id, im->n, (long long)im->total_tokens);
    return QVL_OK;
}

/* The whole prompt against the context, before any picture is decoded or the model loaded. */
static qvl_status check_fits(int64_t n_prompt, const run_images *im, int64_t ctx,
                             qvl_error *err) {
    if (n_prompt <= ctx) return QVL_OK;
    if (im->n == 0)
        return qvl_fail(err, QVL_E_LIMIT, "the prompt is %lld tokens but the context holds %lld: "
                        "raise --ctx (-c)", (long long)n_prompt, (long long)ctx);
    return qvl_fail(err, QVL_E_LIMIT,
                    "the prompt is %lld tokens (%lld of them for %zu %s) but the context "
                    "holds %lld: raise --ctx (-c) or lower --image-max-tokens%s",
                    (long long)n_prompt, (long long)im->total_tokens, im->n,
                    im->n_videos ? "image(s)/video(s)" : "image(s)", (long long)ctx,
                    im->n_videos ? " / --video-max-tokens" : "");
}

/* -f FILE, or -p - (stdin): the prompt text, one trailing newline run dropped. */
static qvl_status read_prompt(const char *path, char **out, qvl_error *err) {
    size_t len = 0;
    char *buf = NULL;
    if (strcmp(path, "-") == 0) {
        size_t cap = 0;
        for (;;) {
            if (len + 4096 + 1 > cap) {
                if (cap >= PROMPT_MAX_BYTES) {
                    free(buf);
                    return qvl_fail(err, QVL_E_LIMIT, "the prompt on stdin is over %zu MiB",
                                    PROMPT_MAX_BYTES >> 20);
                }
                cap = cap ? 2 * cap : 65536;
                char *grown = realloc(buf, cap);
                if (!grown) {
                    free(buf);
                    return qvl_fail(err, QVL_E_NOMEM, "out of memory");
                }
                buf = grown;
            }
            size_t got = fread(buf + len, 1, cap - len - 1, stdin);
            len += got;
            if (got == 0) break;
        }
        if (ferror(stdin)) {
            free(buf);
            return qvl_fail(err, QVL_E_IO, "reading the prompt from stdin failed");
        }
        if (!buf && !(buf = malloc(1))) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        buf[len] = '\0';
    } else {
        qvl_status st = qvl_read_file(path, PROMPT_MAX_BYTES, QVL_E_IO, &buf, &len, err);
        if (st != QVL_OK) return st;
    }
    if (strlen(buf) != len) {
        free(buf);
        return qvl_fail(err, QVL_E_INVALID, "%s: the prompt holds a NUL byte",
                        strcmp(path, "-") == 0 ? "stdin" : path);
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = '\0';
    *out = buf;
    return QVL_OK;
}

/* -m names a model directory or a GGUF file (qvl/model_files.h). */
static int check_model_dir(const char *prog, const char *dir, const char *mmproj,
                           qvl_model_files *files) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        fprintf(stderr, "%s: model directory not found: %s\n", prog, dir);
        return 1;
    }
    if (!S_ISDIR(sb.st_mode) && !qvl_is_gguf_path(dir)) {
        fprintf(stderr, "%s: %s is not a directory (-m takes the model's directory or a GGUF "
                "file)\n", prog, dir);
        return 1;
    }
    qvl_error err = {0};
    if (qvl_model_files_find(dir, mmproj, files, &err) != QVL_OK) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    return 0;
}

static int check_usage(const char *prog, const run_args *a, bool chat_mode) {
    if (!a->model) {
        fprintf(stderr, "%s: -m MODEL_DIR is required\n", prog);
        return 2;
    }
    if (a->prompt && a->file) {
        fprintf(stderr, "%s: -p and -f exclude each other\n", prog);
        return 2;
    }
    if (!chat_mode && !a->prompt && !a->file && !a->ids) {
        fprintf(stderr, "%s: give a prompt with -p TEXT, -f FILE (or token ids with --ids)\n", prog);
        return 2;
    }
    if (!chat_mode && (a->prompt || a->file) && a->ids) {
        fprintf(stderr, "%s: -p/-f and --ids exclude each other\n", prog);
        return 2;
    }
    if (chat_mode && (a->ids || a->dump_logits || a->prompt || a->file)) {
        fprintf(stderr, "%s: -p, -f, --ids and --dump-logits do not go with a chat (qvl chat, -i, -cnv)\n",
                prog);
        return 2;
    }
    if (chat_mode && a->ignore_eos) {
        fprintf(stderr, "%s: --ignore-eos does not go with a chat (a turn ends at its end token)\n",
                prog);
        return 2;
    }
    return 0;
}

/* Prompt ids for qvl run from text: the chat template over it. */
static qvl_status run_prompt_ids(const run_args *a, const char *text, qvl_tokenizer *tok,
                                 run_images *im, int32_t **ids, int64_t *n,
                                 qvl_error *err) {
    qvl_chat *chat = NULL;
    char *rendered = NULL;
    qvl_status st = qvl_chat_create(&chat, err);
    if (st == QVL_OK && a->system) st = qvl_chat_add(chat, QVL_CHAT_SYSTEM, a->system, err);
    if (st == QVL_OK)
        st = im->n_videos ? run_add_user_media(chat, text, im, err)
                          : run_add_user_message(chat, text, im->n, err);
    if (st == QVL_OK) st = qvl_chat_render(chat, true, &rendered, NULL, err);
    if (st == QVL_OK && im->n_videos) { /* each video pad becomes its timestamped groups */
        const char **texts = calloc(im->n_videos, sizeof *texts);
        char *full = NULL;
        size_t k = 0;
        for (size_t i = 0; texts && i < im->n; i++)
            if (im->is_video[i]) texts[k++] = im->videos[i].text;
        st = texts ? qvl_video_expand_text(rendered, texts, k, &full, err)
                   : qvl_fail(err, QVL_E_NOMEM, "out of memory");
        free(texts);
        free(rendered);
        rendered = full;
    }
    if (st == QVL_OK) st = run_encode_text(tok, rendered, im, ids, n, err);
    if (st == QVL_OK && im->n_videos) {
        st = run_videos_fit(im, *ids, *n, a->ctx, err);
        if (st == QVL_OK) st = run_videos_expand(im, ids, n, err);
        if (st != QVL_OK) {
            free(*ids);
            *ids = NULL;
        }
    }
    free(rendered);
    qvl_chat_free(chat);
    return st;
}

/* Everything after the command line is parsed. */
static int run_files(const char *cmd, const char *prog, const run_args *args, const cli_opt *opts,
                     bool chat_mode, run_images *im, double start, const qvl_model_files *files);

static int run_parsed(const char *cmd, const char *prog, const run_args *args, const cli_opt *opts,
                      bool chat_mode, run_images *im, double start) {
    run_args a = *args;
    int rc = check_usage(prog, &a, chat_mode);
    if (!rc) rc = run_grammar_check_usage(prog, &a);
    if (rc) return rc;
    if (a.verbose) qvl_log_level_set(QVL_LOG_INFO);
    qvl_model_files files;
    if ((rc = check_model_dir(prog, a.model, a.mmproj, &files))) return rc;
    qvl_error err = {0};
    if (a.ctx == 0 && run_context_auto(&files, a.kv_type, a.quiet, &a.ctx, &err) != QVL_OK) {
        qvl_model_files_free(&files);
        return fail(cmd, &err);
    }
    /* -1 (llama.cpp's "no limit"): the context is the only bound, and no answer outgrows it */
    if (a.until_context) a.n_predict = a.ctx;
    rc = run_files(cmd, prog, &a, opts, chat_mode, im, start, &files);
    qvl_model_files_free(&files);
    return rc;
}

static int run_files(const char *cmd, const char *prog, const run_args *args, const cli_opt *opts,
                     bool chat_mode, run_images *im, double start, const qvl_model_files *files) {
    const run_args a = *args;
    int rc = 0;
    char path[PATH_MAX];
    struct stat sb;
    if (im->n_videos > 0 && (chat_mode || a.ids)) {
        fprintf(stderr, "%s: --video and --video-frames go with qvl run -p/-f only (not --ids or a chat)\n",
                prog);
        return 2;
    }
    if (chat_mode) { /* on the engine (chat_session.h) */
        snprintf(path, sizeof path, "%s/tokenizer.json", a.model);
        if (files->dir && stat(path, &sb) != 0) {
            fprintf(stderr, "%s: %s: not found (needed to tokenize the prompt)\n", prog, path);
            return 1;
        }
        const chat_flags chat_seen = flags_seen(opts);
        return run_chat(&a, &chat_seen, im->paths, im->n, start);
    }
    run_interrupt_install();
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (a.ids) {
        size_t count = 0;
        if (!(ids = cli_parse_ids(prog, a.ids, &count))) return 2;
        n_ids = (int64_t)count;
    }

    qvl_error err = {0};
    char *text = NULL; /* the prompt of qvl run */
    qvl_status st = QVL_OK;
    if (a.file || (a.prompt && strcmp(a.prompt, "-") == 0))
        st = read_prompt(a.file ? a.file : "-", &text, &err);
    else if (a.prompt && !(text = strdup(a.prompt)))
        st = qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    if (st != QVL_OK) {
        free(ids);
        return fail(cmd, &err);
    }
    const chat_flags seen = flags_seen(opts);
    run_session s = {.a = &a, .seen = &seen, .im = im, .be = a.be};
    s.be.threads_seen = seen.threads;
    /* A bad grammar costs one line and no model loading. */
    if (run_grammar_text(&a, &s.grammar, &err) != QVL_OK) {
        free(text);
        free(ids);
        return fail(cmd, &err);
    }
    /* The tokenizer is needed unless ids go in and ids come out (and no grammar follows). */
    bool need_tokenizer = !a.ids || !a.print_ids || s.grammar;
    qvl_tokenizer *tok = NULL;
    st = qvl_model_files_tokenizer(files, &tok, &err);
    if (st == QVL_E_NOT_FOUND && need_tokenizer) {
        fprintf(stderr, "%s: %s (needed to %s; --ids with --print-ids runs without it)\n",
                prog, err.msg, s.grammar ? "follow the grammar" : a.ids ? "print the answer as text"
                                                                   : "tokenize the prompt");
        free(text);
        free(ids);
        free(s.grammar);
        return 1;
    }
    if (st == QVL_E_NOT_FOUND) st = QVL_OK;
    if (st == QVL_OK && text && im->n > 0 && im->n_videos == 0) { /* before reading any picture */
        size_t n_markers = run_count_markers(text);
        if (n_markers > 0 && n_markers != im->n)
            st = qvl_fail(&err, QVL_E_INVALID, "the prompt has %zu <image> markers but %zu --image "
                          "files were given", n_markers, im->n);
    }
    if (st == QVL_OK) st = run_images_plan(files, &a.bounds, im, &err);

    if (st == QVL_OK && text) st = run_prompt_ids(&a, text, tok, im, &ids, &n_ids, &err);
    if (st == QVL_OK && a.ids && im->n > 0) st = check_id_pads(ids, n_ids, im, &err);
    if (st == QVL_OK) st = check_fits(n_ids, im, a.ctx, &err);
    free(text);
    qvl_tokenizer_free(tok); /* the engine has its own */

    s.seed = seen.seed ? (uint64_t)a.seed : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    s.progress = run_progress_create(!a.quiet && isatty(STDERR_FILENO));
    s.timings.start = start;
    s.timings.n_images = im->n;
    s.timings.is_video = im->is_video;
    s.timings.image_seconds = calloc(im->n + 1, sizeof *s.timings.image_seconds);
    if (st == QVL_OK && (!s.progress || !s.timings.image_seconds))
        st = qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK && im->n > 0) {
        run_progress_begin(s.progress, "decoding %zu image(s)", im->n);
        st = run_images_decode(im, &err);
        run_progress_end(s.progress);
    }

    /* --ids with --print-ids runs without a tokenizer (checked above) */
    qvl_engine_options eo = {.image_max_tokens = -1, .tokenizer_optional = true};
    /* placement counts the vision arena for the largest picture this run encodes */
    for (size_t i = 0; i < im->n; i++)
        if (im->tokens && im->tokens[i] > eo.image_max_tokens) eo.image_max_tokens = im->tokens[i];
    run_answer_observer(&s, &eo.observer);
    if (st == QVL_OK) st = run_load_engine(&s, &eo, files->dir == NULL, &err);
    if (st == QVL_OK) {
        rc = run_answer(&s, ids, n_ids, &err) == QVL_OK ? 0 : fail(cmd, &err);
        if (s.interrupted) rc = RUN_EXIT_INTERRUPTED;
        if (!a.quiet && (a.verbose || isatty(STDERR_FILENO)))
            run_timings_print(&s.timings, qvl_engine_model(s.engine));
    } else {
        rc = fail(cmd, &err);
    }
    qvl_engine_free(s.engine);
    run_progress_free(s.progress);
    free(s.timings.image_seconds);
    free(s.grammar);
    free(ids);
    return rc;
}

int qvl_cmd_run(int argc, char **argv, bool chat_mode) {
    const double start = run_now_seconds();
    run_args a = {.n_predict = 256, .ctx = 4096, .batch = 512,
                  .repeat_last_n = RUN_REPEAT_LAST_N_DEFAULT,
                  .bounds = {.max_tokens = RUN_IMAGE_MAX_TOKENS_DEFAULT}};
    run_image_bounds *b = &a.bounds;
    run_video_bounds *vb = &a.vbounds;
    cli_opt opts[] = {
        [OPT_TEMP] = {"temp", 0, CLI_FLOAT, &a.temp, "T", "sampling temperature; 0 = greedy (default: generation_config.json)", 0, 100, false},
        [OPT_TOP_K] = {"top-k", 0, CLI_INT, &a.top_k, "K", "keep the K most likely tokens; 0 = off", 0, 1e9, false},
        [OPT_TOP_P] = {"top-p", 0, CLI_FLOAT, &a.top_p, "P", "nucleus sampling mass; 1 = off", 0, 1, false},
        [OPT_MIN_P] = {"min-p", 0, CLI_FLOAT, &a.min_p, "P", "drop tokens below P x the top probability; 0 = off", 0, 1, false},
        [OPT_REPEAT] = {"repeat-penalty", 0, CLI_FLOAT, &a.repeat_penalty, "R", "repetition penalty (HF semantics); 1 = off", 1e-3, 100, false},
        [OPT_PRESENCE] = {"presence-penalty", 0, CLI_FLOAT, &a.presence_penalty, "P", "subtract P from tokens already generated; 0 = off", -100, 100, false},
        [OPT_FREQUENCY] = {"frequency-penalty", 0, CLI_FLOAT, &a.frequency_penalty, "F", "subtract F x the times a token was generated; 0 = off", -100, 100, false},
        [OPT_SEED] = {"seed", 's', CLI_INT, &a.seed, "S", "random seed (default: from the clock)", 0, 9.2e18, false},
        [OPT_MIN_PIXELS] = {"min-pixels", 0, CLI_INT, &b->min_pixels, "N", "resize pictures to at least N pixels (default: preprocessor_config.json)", 1, 1e12, false},
        [OPT_MAX_PIXELS] = {"max-pixels", 0, CLI_INT, &b->max_pixels, "N", "resize pictures to at most N pixels (default: preprocessor_config.json, capped by --image-max-tokens)", 1, 1e12, false},
        [OPT_MIN_TOKENS] = {"image-min-tokens", 0, CLI_INT, &b->min_tokens, "N", "resize pictures to at least N tokens (N x (patch x merge)^2 pixels)", 1, 1 << 24, false},
        [OPT_MAX_TOKENS] = {"image-max-tokens", 0, CLI_INT, &b->max_tokens, "N", "resize pictures to at most N tokens (default 4096, as the processor would with N x (patch x merge)^2 max pixels)", 1, 1 << 24, false},
        [OPT_THREADS] = {"threads", 't', CLI_INT, &a.be.threads, "N", "CPU threads of the backend (its `threads` option; overrides plugins.yaml; 0 = all cores)", 0, 4096, false},
        [OPT_V_MAX_FRAMES] = {"video-max-frames", 0, CLI_INT, &vb->max_frames, "N", "keep at most N frames of a video (default: video_preprocessor_config.json, else 768)", 1, 1 << 20, false},
        [OPT_V_MIN_FRAMES] = {"video-min-frames", 0, CLI_INT, &vb->min_frames, "N", "keep at least N frames of a video when it has them (default: the config, else 4)", 1, 1 << 20, false},
        [OPT_V_MAX_TOKENS] = {"video-max-tokens", 0, CLI_INT, &vb->max_tokens, "N", "resize each video's frames to at most N tokens in all (default: an even share of what the context has left)", 1, 1 << 24, false},
        [OPT_V_MAX_PIXELS] = {"video-max-pixels", 0, CLI_INT, &vb->max_pixels, "N", "the processor's pixel bound of a video, all kept frames together (default: the config's size.longest_edge, else 786432)", 1, 1e12, false},
        {"repeat-last-n", 0, CLI_INT, &a.repeat_last_n, "N", "the repeat, presence and frequency penalties look at the last N tokens (default 64; -1: the whole context; 0: no penalties)", -1, 1 << 24, false},
        {"video-max-duration", 0, CLI_FLOAT, &vb->max_duration, "S", "refuse a --video file that declares more than S seconds (default 10800)", 1e-3, 1e9, false},
        {"video-max-mib", 0, CLI_INT, &vb->max_mib, "N", "refuse a --video file whose kept frames need more than N MiB as RGB (default 4096)", 1, 1 << 30, false},
        {"video-max-seconds", 0, CLI_FLOAT, &vb->max_seconds, "S", "give up decoding a --video file after S seconds (default 120)", 1e-3, 1e9, false},
        {"video", 0, CLI_STRING, &a.video_file_help, "FILE", "a video file (MP4/MOV, MKV/WebM, AVI, animated GIF or WebP): the frames the processor keeps at the file's own rate; repeatable, in order with --image and --video-frames, before the text", 0, 0, false},
        {"video-frames", 0, CLI_STRING, &a.video_help, "DIR|F1,F2,...", "a video as frames: a directory's pictures in name order, or a comma-separated list; repeatable, in order with --image, before the text", 0, 0, false},
        {"video-fps", 0, CLI_STRING, &a.video_fps_help, "R", "the frame rate of the --video-frames before it (default 24, as transformers assumes)", 0, 0, false},
        {"image", 0, CLI_STRING, &a.image_help, "FILE", "a picture (JPEG, PNG, WebP, GIF, PPM/PGM) for the prompt; repeatable; placed at <image> markers in the text, else before it", 0, 0, false},
        {"model", 'm', CLI_STRING, &a.model, "DIR|FILE", "model directory (config.json, *.safetensors, tokenizer.json) or llama.cpp GGUF file", 0, 0, false},
        {"mmproj", 0, CLI_STRING, &a.mmproj, "FILE", "the vision part of a GGUF model (llama.cpp's mmproj GGUF), for --image and --video", 0, 0, false},
        {"prompt", 'p', CLI_STRING, &a.prompt, "TEXT", "the user's message; - reads it from stdin", 0, 0, false},
        {"file", 'f', CLI_STRING, &a.file, "FILE", "read the user's message from FILE", 0, 0, false},
        {"system", 0, CLI_STRING, &a.system, "TEXT", "a system message before the conversation", 0, 0, false},
        {"n-predict", 'n', CLI_INT, &a.n_predict, "N", "generate at most N tokens per answer (default 256; -1: until the answer ends or the context is full)", -1, 1e9, false},
        {"ctx", 'c', CLI_INT, &a.ctx, "N", "context (KV cache) size in tokens (default 4096; 0: the model's trained context, capped by memory)", 0, RUN_CTX_MAX, false},
        {"batch-size", 'b', CLI_INT, &a.batch, "N", "prompt tokens per prefill step (default 512)", 1, 1 << 24, false},
        {"interactive", 'i', CLI_FLAG, &a.interactive, NULL, "chat instead of one answer (as qvl chat)", 0, 0, false},
        {"backend", 0, CLI_STRING, &a.backend, "NAME", "use this backend (overrides plugins.yaml priorities)", 0, 0, false},
        {"weights", 0, CLI_STRING, &a.weights, "DTYPE", "store matrix weights as bf16, f16, f32, q8_0, q4_k, q6_k or the q4_k_m mixture, converted once at load (default: the backend's weights: option in plugins.yaml, else as stored)", 0, 0, false},
        {"kv-type", 0, CLI_STRING, &a.kv_type, "TYPE", "KV cache dtype: f32, f16 or q8_0 (default: the backend's kv_type: option in plugins.yaml, else f16; q8_0 needs head_dim a multiple of 32)", 0, 0, false},
        BACKEND_ARGS_CLI_OPTS(&a.be),
        {"plugins", 0, CLI_STRING, &a.plugins, "FILE", "plugins.yaml to use (default: $QVL_PLUGINS, build/plugins.yaml beside the program, installed; never the current directory)", 0, 0, false},
        {"json", 0, CLI_FLAG, &a.json, NULL, "answer with one JSON value (a grammar constrains the sampler)", 0, 0, false},
        {"json-schema", 0, CLI_STRING, &a.json_schema, "FILE", "answer with JSON valid under the JSON Schema in FILE (supported keywords: docs/structured-output.md)", 0, 0, false},
        {"grammar", 0, CLI_STRING, &a.grammar, "FILE", "answer in the language of the GBNF grammar in FILE (llama.cpp's notation; rule root)", 0, 0, false},
        {"ids", 0, CLI_STRING, &a.ids, "\"1,2,3\"", "prompt as token ids: no chat template, no tokenizer", 0, 0, false},
        {"ignore-eos", 0, CLI_FLAG, &a.ignore_eos, NULL, "keep generating past the end-of-answer tokens, up to -n (for benchmarks, as llama.cpp)", 0, 0, false},
        {"print-ids", 0, CLI_FLAG, &a.print_ids, NULL, "print the generated token ids on one line instead of text", 0, 0, false},
        {"dump-logits", 0, CLI_STRING, &a.dump_logits, "FILE", "write the prompt's logits as float32 [n_prompt, vocab]", 0, 0, false},
        {"no-fuse", 0, CLI_FLAG, &a.no_fuse, NULL, "run the unfused graph (debugging)", 0, 0, false},
        {"no-mmap", 0, CLI_FLAG, &a.no_mmap, NULL, "copy the weights into memory at load instead of reading them from the file mapping", 0, 0, false},
        {"quiet", 'q', CLI_FLAG, &a.quiet, NULL, "no progress line, picture summary or timings on stderr", 0, 0, false},
        {"verbose", 'v', CLI_FLAG, &a.verbose, NULL, "log details (skipped backends, files) and print the timings even when stderr is not a terminal", 0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    size_t n_pos = 0;
    char prog[32];
    snprintf(prog, sizeof prog, "qvl %s", chat_mode ? "chat" : "run");
    run_images im = {0};
    argc = run_images_collect(prog, argc, argv, &im);
    if (argc < 0) {
        run_images_free(&im);
        return 2;
    }
    const size_t n_aliases = sizeof run_aliases / sizeof run_aliases[0];
    int rc = cli_parse_aliased(prog, opts, n_opts, run_aliases, n_aliases, argc, argv, pos, 0,
                               &n_pos);
    if (rc == CLI_HELP) {
        cli_print_help_ex(stdout, chat_mode ? "usage: qvl chat -m MODEL_DIR [options]   "
                                              "(one message per line; /help lists the commands)"
                                            : "usage: qvl run -m MODEL_DIR -p \"PROMPT\" [options]",
                          opts, n_opts, run_aliases, n_aliases, chat_mode ? run_only : NULL);
        run_images_free(&im);
        return 0;
    }
    if (rc == CLI_OK && chat_mode && a.interactive) {
        fprintf(stderr, "%s: -i/-cnv is for qvl run (qvl chat is interactive already)\n", prog);
        rc = CLI_ERROR;
    }
    if (rc == CLI_OK && a.n_predict == 0) {
        fprintf(stderr, "%s: --n-predict: 0 is not a budget (give N >= 1, or -1 for no limit)\n",
                prog);
        rc = CLI_ERROR;
    }
    a.until_context = a.n_predict < 0; /* n_predict follows the context (run_parsed) */
    if (rc != CLI_OK) {
        run_images_free(&im);
        return 2;
    }
    b->min_pixels_set = opts[OPT_MIN_PIXELS].seen;
    b->max_pixels_set = opts[OPT_MAX_PIXELS].seen;
    b->min_tokens_set = opts[OPT_MIN_TOKENS].seen;
    b->max_tokens_set = opts[OPT_MAX_TOKENS].seen;
    vb->max_frames_set = opts[OPT_V_MAX_FRAMES].seen;
    vb->min_frames_set = opts[OPT_V_MIN_FRAMES].seen;
    vb->max_tokens_set = opts[OPT_V_MAX_TOKENS].seen;
    vb->max_pixels_set = opts[OPT_V_MAX_PIXELS].seen;
    im.vb = *vb;
    im.quiet = a.quiet;
    const bool chat = chat_mode || a.interactive;
    rc = run_parsed(chat ? "chat" : "run", prog, &a, opts, chat, &im, start);
    run_images_free(&im);
    return rc;
}
