/* qvl run / qvl chat: prompt -> chat template -> tokens -> model -> sampled answer. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "qvl/chat.h"
#include "qvl/gen_config.h"
#include "qvl/generate.h"
#include "qvl/image.h"
#include "qvl/image_preprocess.h"
#include "qvl/log.h"
#include "qvl/mm_prompt.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/sampling.h"
#include "qvl/text_stream.h"
#include "qvl/tokenizer.h"
#include "qvl_commands.h"

typedef struct run_args {
    const char *model, *prompt, *system, *ids, *dump_logits, *backend, *plugins, *weights;
    const char *image_help; /* --image is collected before parsing (repeatable) */
    int64_t n_predict, top_k, seed, ctx, min_pixels, max_pixels;
    double temp, top_p, min_p, repeat_penalty, presence_penalty;
    bool print_ids, no_fuse, no_mmap, verbose;
} run_args;

enum {
    OPT_TEMP, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT, OPT_PRESENCE, OPT_SEED, OPT_MIN_PIXELS,
    OPT_MAX_PIXELS, OPT_COUNT
};

/* The pictures of the prompt, from files to the encoder's features. */
typedef struct run_images {
    size_t n;
    const char **paths;     /* --image values in order (point into argv) */
    qvl_image_grid *grids;  /* per image, in patches */
    int64_t *tokens;        /* LLM tokens per image */
    float *pixels;          /* all images' pixel matrices, concatenated */
    int32_t pad_id;         /* the model's image_token_id */
    qvl_image_features feats;
} run_images;

static void run_images_free(run_images *im) {
    free(im->paths);
    free(im->grids);
    free(im->tokens);
    free(im->pixels);
    qvl_image_features_free(&im->feats);
}

/* Take every "--image FILE" / "--image=FILE" out of argv (cli_parse has no repeatable flags);
 * returns the new argc, or -1 when --image lacks its value. */
static int collect_images(const char *prog, int argc, char **argv, run_images *im) {
    im->paths = calloc((size_t)argc + 1, sizeof *im->paths);
    if (!im->paths) return -1;
    int out = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) { /* the rest is positional: keep it as it is */
            while (i < argc) argv[out++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], "--image") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: --image needs a FILE\n", prog);
                return -1;
            }
            im->paths[im->n++] = argv[++i];
        } else if (strncmp(argv[i], "--image=", 8) == 0) {
            im->paths[im->n++] = argv[i] + 8;
        } else {
            argv[out++] = argv[i];
        }
    }
    return out;
}

/* Decode and preprocess every picture; prints what each becomes. */
static qvl_status prepare_images(const run_args *a, const cli_opt *opts, run_images *im,
                                 qvl_error *err) {
    if (im->n == 0) return QVL_OK;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", a->model);
    qvl_qwen3vl_config cfg;
    qvl_status st = qvl_qwen3vl_config_load(path, &cfg, err);
    if (st != QVL_OK) return st;
    if (!cfg.has_vision || cfg.image_token_id < 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: the model has no vision_config / image_token_id",
                        path);
    im->pad_id = (int32_t)cfg.image_token_id;
    qvl_preprocess_config pc;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", a->model);
    st = qvl_preprocess_config_load(path, &cfg.vision, &pc, err);
    if (st == QVL_E_NOT_FOUND) {
        QVL_LOG_I("%s not found: the Qwen3-VL defaults", path);
        qvl_preprocess_config_default(&cfg.vision, &pc);
        st = QVL_OK;
    }
    if (st != QVL_OK) return st;
    if (opts[OPT_MIN_PIXELS].seen) pc.min_pixels = a->min_pixels;
    if (opts[OPT_MAX_PIXELS].seen) pc.max_pixels = a->max_pixels;
    if (pc.min_pixels > pc.max_pixels)
        return qvl_fail(err, QVL_E_INVALID, "--min-pixels %lld exceeds --max-pixels %lld",
                        (long long)pc.min_pixels, (long long)pc.max_pixels);
    if (pc.patch_size != cfg.vision.patch_size || pc.merge_size != cfg.vision.spatial_merge_size ||
        pc.temporal_patch_size != cfg.vision.temporal_patch_size)
        return qvl_fail(err, QVL_E_INVALID, "%s: patch/merge/temporal sizes differ from config.json",
                        path);
    im->grids = calloc(im->n, sizeof *im->grids);
    im->tokens = calloc(im->n, sizeof *im->tokens);
    if (!im->grids || !im->tokens) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    int64_t rows = 0;
    for (size_t i = 0; i < im->n; i++) {
        qvl_image img;
        float *px = NULL;
        st = qvl_image_load(im->paths[i], &img, err);
        if (st == QVL_OK) {
            st = qvl_image_preprocess(&img, &pc, &px, &im->grids[i], err);
            if (st != QVL_OK) qvl_error_prefix(err, "%s", im->paths[i]);
        }
        if (st != QVL_OK) {
            qvl_image_free(&img);
            return st;
        }
        const int64_t n_rows = qvl_image_grid_patches(&im->grids[i]);
        const int64_t width = 3 * pc.temporal_patch_size * pc.patch_size * pc.patch_size;
        float *grown = realloc(im->pixels, (size_t)((rows + n_rows) * width) * sizeof *grown);
        if (!grown) {
            free(px);
            qvl_image_free(&img);
            return qvl_fail(err, QVL_E_NOMEM, "out of memory for the pixels of %s", im->paths[i]);
        }
        im->pixels = grown;
        memcpy(im->pixels + rows * width, px, (size_t)(n_rows * width) * sizeof *px);
        rows += n_rows;
        im->tokens[i] = qvl_image_grid_tokens(&im->grids[i], pc.merge_size);
        fprintf(stderr, "image %zu: %dx%d -> grid %lldx%lld, %lld tokens\n", i + 1, img.width,
                img.height, (long long)im->grids[i].h, (long long)im->grids[i].w,
                (long long)im->tokens[i]);
        free(px);
        qvl_image_free(&img);
    }
    return QVL_OK;
}

static const char image_marker[] = "<image>";

static size_t count_markers(const char *text) {
    size_t n = 0;
    for (const char *p = strstr(text, image_marker); p; p = strstr(p + 1, image_marker)) n++;
    return n;
}

/* The user's message: the pictures at "<image>" markers in the text when it has any (as many
 * markers as pictures), else all pictures first and then the text. */
static qvl_status add_user_message(qvl_chat *chat, const char *text, size_t n_images,
                                   qvl_error *err) {
    const char *marker = image_marker;
    /* Without pictures "<image>" is just text. */
    size_t n_markers = n_images > 0 ? count_markers(text) : 0;
    qvl_status st = qvl_chat_add(chat, QVL_CHAT_USER, NULL, err);
    if (st != QVL_OK) return st;
    if (n_markers == 0) {
        for (size_t i = 0; st == QVL_OK && i < n_images; i++) st = qvl_chat_add_image(chat, err);
        return st == QVL_OK ? qvl_chat_add_text(chat, text, err) : st;
    }
    if (n_markers != n_images)
        return qvl_fail(err, QVL_E_INVALID, "the prompt has %zu <image> markers but %zu --image "
                        "files were given", n_markers, n_images);
    const char *p = text;
    for (const char *q = strstr(p, marker); st == QVL_OK && q; q = strstr(p, marker)) {
        if (q > p) {
            char *part = strndup(p, (size_t)(q - p));
            if (!part) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
            st = qvl_chat_add_text(chat, part, err);
            free(part);
        }
        if (st == QVL_OK) st = qvl_chat_add_image(chat, err);
        p = q + strlen(marker);
    }
    if (st == QVL_OK && *p) st = qvl_chat_add_text(chat, p, err);
    return st;
}

/* What the generation callback needs. */
typedef struct run_output {
    const qvl_tokenizer *tok;
    bool print_text;
    qvl_text_stream stream;
    int32_t *ids;
    size_t n_ids, cap_ids;
    bool oom;
} run_output;

static void write_stdout(const char *text, size_t len, void *user) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

static void on_token(int32_t id, void *user) {
    run_output *o = user;
    if (o->n_ids == o->cap_ids) {
        size_t cap = o->cap_ids ? 2 * o->cap_ids : 64;
        int32_t *grown = realloc(o->ids, cap * sizeof *grown);
        if (!grown) {
            o->oom = true;
            return;
        }
        o->ids = grown;
        o->cap_ids = cap;
    }
    o->ids[o->n_ids++] = id;
    if (o->print_text && o->tok && !qvl_tokenizer_is_special(o->tok, id)) {
        const char *bytes;
        size_t len;
        if (qvl_tokenizer_token_to_piece(o->tok, id, &bytes, &len, NULL) == QVL_OK)
            qvl_text_stream_feed(&o->stream, bytes, len);
    }
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int fail(const char *cmd, const qvl_error *err) {
    fprintf(stderr, "qvl %s: %s\n", cmd, err->msg);
    return 1;
}

static qvl_status write_logits(const char *path, const float *logits, size_t count,
                               qvl_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return qvl_fail(err, QVL_E_IO, "%s: cannot write: %s", path, strerror(errno));
    size_t written = fwrite(logits, sizeof *logits, count, f); /* x86/ARM hosts: little-endian */
    int closed = fclose(f);
    if (written != count || closed != 0)
        return qvl_fail(err, QVL_E_IO, "%s: short write", path);
    return QVL_OK;
}

/* Tokenize text (the rendered chat) with the model's tokenizer. */
static qvl_status encode(qvl_tokenizer *tok, const char *text, int32_t **ids, int64_t *n,
                         qvl_error *err) {
    size_t count = 0;
    qvl_status st = qvl_tokenizer_encode(tok, text, strlen(text), ids, &count, err);
    *n = (int64_t)count;
    if (st == QVL_OK && count == 0) {
        free(*ids);
        *ids = NULL;
        return qvl_fail(err, QVL_E_INVALID, "the prompt is empty");
    }
    return st;
}

static void print_stats(const qvl_generation_result *r, int64_t n_prompt) {
    QVL_LOG_I("prompt: %lld tokens in %.2f s (%.1f tok/s); generated %lld tokens in %.2f s "
              "(%.2f tok/s)",
              (long long)n_prompt, r->prefill_seconds,
              r->prefill_seconds > 0 ? n_prompt / r->prefill_seconds : 0.0,
              (long long)r->n_generated, r->decode_seconds,
              r->decode_seconds > 0 ? r->n_generated / r->decode_seconds : 0.0);
}

/* One generation: prompt ids in, answer streamed out. */
static qvl_status answer(qvl_model *m, const run_args *a, qvl_sampler *sampler,
                         const qvl_gen_config *gen, run_output *out, const int32_t *ids,
                         int64_t n, bool feed_last, const run_images *im, qvl_error *err) {
    int64_t vocab = qvl_model_config(m)->text.vocab_size;
    int32_t *pos = NULL;
    if (im && im->n > 0) { /* 3-D positions: images change them (qvl_model_positions) */
        pos = malloc((size_t)n * 3 * sizeof *pos);
        if (!pos) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        qvl_status st = qvl_model_positions(m, ids, n, im->grids, im->n, pos, err);
        if (st != QVL_OK) {
            free(pos);
            return st;
        }
    }
    float *prompt_logits = NULL;
    if (a->dump_logits) {
        prompt_logits = malloc((size_t)n * (size_t)vocab * sizeof(float));
        if (!prompt_logits) {
            free(pos);
            return qvl_fail(err, QVL_E_NOMEM, "out of memory for --dump-logits");
        }
    }
    qvl_generation g = {
        .max_new = a->n_predict, .stop = gen, .sampler = sampler, .feed_last = feed_last,
        .on_token = on_token, .user = out, .prompt_logits = prompt_logits,
        .prompt_pos = pos, .images = im && im->n > 0 ? &im->feats : NULL,
    };
    qvl_generation_result r;
    out->n_ids = 0;
    qvl_status st = qvl_generate(m, ids, n, &g, &r, err);
    if (st == QVL_OK && out->oom) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK && prompt_logits)
        st = write_logits(a->dump_logits, prompt_logits, (size_t)n * (size_t)vocab, err);
    free(prompt_logits);
    free(pos);
    qvl_text_stream_flush(&out->stream);
    if (st != QVL_OK) return st;
    if (out->print_text) fputc('\n', stdout);
    if (a->print_ids) {
        for (size_t i = 0; i < out->n_ids; i++) printf(i ? " %d" : "%d", out->ids[i]);
        printf("\n");
    }
    fflush(stdout);
    print_stats(&r, n);
    if (r.stop == QVL_STOP_CONTEXT)
        return qvl_fail(err, QVL_E_LIMIT, "the context of %lld tokens is full (raise --ctx)",
                        (long long)qvl_model_ctx(m));
    return QVL_OK;
}

/* Sampling settings: generation_config.json, then the flags that were given. */
static qvl_status make_sampler(const run_args *a, const cli_opt *opts, const qvl_gen_config *gen,
                               const qvl_model *m, const qvl_tokenizer *tok, qvl_sampler **out,
                               qvl_error *err) {
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    qvl_gen_config_sampling_params(gen, &p);
    if (opts[OPT_TEMP].seen) p.temperature = (float)a->temp;
    if (opts[OPT_TOP_K].seen) p.top_k = (int32_t)a->top_k;
    if (opts[OPT_TOP_P].seen) p.top_p = (float)a->top_p;
    if (opts[OPT_MIN_P].seen) p.min_p = (float)a->min_p;
    if (opts[OPT_REPEAT].seen) p.repetition_penalty = (float)a->repeat_penalty;
    if (opts[OPT_PRESENCE].seen) p.presence_penalty = (float)a->presence_penalty;
    /* A sampling setting given on the command line means the user wants to sample. */
    p.seed = opts[OPT_SEED].seen ? (uint64_t)a->seed : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    int32_t vocab = (int32_t)qvl_model_config(m)->text.vocab_size;
    /* Rows past the tokenizer's last id are untrained padding: never sample them. */
    p.n_valid = tok ? qvl_tokenizer_vocab_size(tok) : 0;
    if (p.n_valid > vocab) p.n_valid = vocab;
    return qvl_sampler_create(&p, vocab, out, err);
}

/* Tokenize rendered text and give each image placeholder its token count. */
static qvl_status encode_with_images(qvl_tokenizer *tok, const char *text, const run_images *im,
                                     int32_t image_pad, int32_t **ids, int64_t *n,
                                     qvl_error *err) {
    qvl_status st = encode(tok, text, ids, n, err);
    if (st != QVL_OK || !im || im->n == 0) return st;
    int32_t *expanded = NULL;
    int64_t n_expanded = 0;
    st = qvl_expand_image_pads(*ids, *n, image_pad, im->tokens, im->n, &expanded, &n_expanded,
                               err);
    free(*ids);
    *ids = expanded;
    *n = n_expanded;
    return st;
}

static int run_chat_loop(qvl_model *m, const run_args *a, qvl_sampler *sampler,
                         const qvl_gen_config *gen, qvl_tokenizer *tok, run_output *out,
                         const run_images *im) {
    qvl_error err = {0};
    qvl_chat *chat = NULL;
    if (qvl_chat_create(&chat, &err) != QVL_OK) return fail("chat", &err);
    if (a->system && qvl_chat_add(chat, QVL_CHAT_SYSTEM, a->system, &err) != QVL_OK) {
        qvl_chat_free(chat);
        return fail("chat", &err);
    }
    bool interactive = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t line_cap = 0;
    bool first_turn = true;
    int rc = 0;
    for (;;) {
        if (interactive) fprintf(stderr, "> ");
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) break;
        size_t user_index = qvl_chat_count(chat);
        char *text = NULL;
        /* The pictures go with the first message. */
        const size_t n_img = first_turn && im ? im->n : 0;
        qvl_status st = add_user_message(chat, line, n_img, &err);
        if (st == QVL_OK)
            st = first_turn ? qvl_chat_render(chat, true, &text, NULL, &err)
                            : qvl_chat_render_continuation(chat, user_index, true, &text, NULL, &err);
        int32_t *ids = NULL;
        int64_t n = 0;
        if (st == QVL_OK)
            st = encode_with_images(tok, text, n_img ? im : NULL,
                                    (int32_t)qvl_model_config(m)->image_token_id, &ids, &n, &err);
        free(text);
        /* The sampler keeps its history across turns: the penalties see the whole
         * conversation, as they would if it were sent again as one prompt. */
        if (st == QVL_OK) st = answer(m, a, sampler, gen, out, ids, n, true, n_img ? im : NULL, &err);
        free(ids);
        char *reply = NULL;
        if (st == QVL_OK)
            st = qvl_tokenizer_decode(tok, out->ids, out->n_ids, false, &reply, NULL, &err);
        if (st == QVL_OK) st = qvl_chat_add(chat, QVL_CHAT_ASSISTANT, reply, &err);
        free(reply);
        if (st != QVL_OK) {
            rc = fail("chat", &err);
            break;
        }
        first_turn = false;
    }
    free(line);
    qvl_chat_free(chat);
    return rc;
}

/* --ids with --image: the ids must already hold each picture's pad tokens. */
static qvl_status check_id_pads(const int32_t *ids, int64_t n, const run_images *im,
                                qvl_error *err) {
    int64_t have = 0, want = 0;
    for (int64_t i = 0; i < n; i++) have += ids[i] == im->pad_id;
    for (size_t i = 0; i < im->n; i++) want += im->tokens[i];
    if (have != want)
        return qvl_fail(err, QVL_E_INVALID,
                        "--ids holds %lld image pad ids (%d) but the %zu image(s) need %lld",
                        (long long)have, (int)im->pad_id, im->n, (long long)want);
    return QVL_OK;
}

/* Everything after the command line is parsed. */
static int run_parsed(const char *cmd, const char *prog, const run_args *args, const cli_opt *opts,
                      bool chat_mode, run_images *im) {
    const run_args a = *args;
    int rc = 0;
    if (a.verbose) qvl_log_level_set(QVL_LOG_INFO);
    if (!a.model) {
        fprintf(stderr, "%s: -m MODEL_DIR is required\n", prog);
        return 2;
    }
    if (!chat_mode && !a.prompt && !a.ids) {
        fprintf(stderr, "%s: give a prompt with -p TEXT (or token ids with --ids)\n", prog);
        return 2;
    }
    if (!chat_mode && a.prompt && a.ids) {
        fprintf(stderr, "%s: -p and --ids exclude each other\n", prog);
        return 2;
    }
    if (chat_mode && (a.ids || a.dump_logits || a.prompt)) {
        fprintf(stderr, "%s: -p, --ids and --dump-logits are for qvl run\n", prog);
        return 2;
    }

    qvl_error err = {0};
    char path[PATH_MAX];
    /* The tokenizer is needed unless ids go in and ids come out. */
    snprintf(path, sizeof path, "%s/tokenizer.json", a.model);
    bool need_tokenizer = chat_mode || !a.ids || !a.print_ids;
    qvl_tokenizer *tok = NULL;
    if (file_exists(path)) {
        if (qvl_tokenizer_load(path, &tok, &err) != QVL_OK) return fail(cmd, &err);
    } else if (need_tokenizer) {
        fprintf(stderr, "%s: %s: not found (needed to %s; --ids with --print-ids runs without it)\n",
                prog, path, a.ids ? "print the answer as text" : "tokenize the prompt");
        return 1;
    }

    qvl_gen_config gen;
    snprintf(path, sizeof path, "%s/generation_config.json", a.model);
    qvl_status st = qvl_gen_config_load(path, &gen, &err);
    if (st == QVL_E_NOT_FOUND) {
        QVL_LOG_I("%s not found: greedy decoding, no stop token", path);
        st = QVL_OK;
    }
    if (st == QVL_OK && a.prompt && im->n > 0) { /* before decoding any picture */
        size_t n_markers = count_markers(a.prompt);
        if (n_markers > 0 && n_markers != im->n)
            st = qvl_fail(&err, QVL_E_INVALID, "the prompt has %zu <image> markers but %zu --image "
                          "files were given", n_markers, im->n);
    }
    if (st == QVL_OK) st = prepare_images(&a, opts, im, &err);
    if (st != QVL_OK) {
        qvl_tokenizer_free(tok);
        return fail(cmd, &err);
    }

    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (a.ids) {
        size_t n = 0;
        ids = cli_parse_ids(prog, a.ids, &n);
        if (!ids) {
            qvl_tokenizer_free(tok);
            return 2;
        }
        n_ids = (int64_t)n;
        if (im->n > 0 && check_id_pads(ids, n_ids, im, &err) != QVL_OK) {
            free(ids);
            qvl_tokenizer_free(tok);
            return fail(cmd, &err);
        }
    } else if (!chat_mode) {
        qvl_chat *chat = NULL;
        char *text = NULL;
        st = qvl_chat_create(&chat, &err);
        if (st == QVL_OK && a.system) st = qvl_chat_add(chat, QVL_CHAT_SYSTEM, a.system, &err);
        if (st == QVL_OK) st = add_user_message(chat, a.prompt, im->n, &err);
        if (st == QVL_OK) st = qvl_chat_render(chat, true, &text, NULL, &err);
        if (st == QVL_OK) st = encode_with_images(tok, text, im, im->pad_id, &ids, &n_ids, &err);
        free(text);
        qvl_chat_free(chat);
        if (st != QVL_OK) {
            qvl_tokenizer_free(tok);
            return fail(cmd, &err);
        }
    }

    qvl_model_options mo = {.plugins_path = a.plugins, .backend_name = a.backend, .ctx = a.ctx,
                            .no_fuse = a.no_fuse, .no_mmap = a.no_mmap,
                            .weight_dtype = a.weights};
    qvl_model *m = NULL;
    qvl_sampler *sampler = NULL;
    st = qvl_model_open(a.model, &mo, &m, &err);
    if (st == QVL_OK) st = make_sampler(&a, opts, &gen, m, tok, &sampler, &err);
    if (st == QVL_OK && im->n > 0) {
        st = qvl_model_encode_images(m, im->pixels, im->n, im->grids, &im->feats, &err);
        if (st == QVL_OK)
            QVL_LOG_I("vision encoder: %zu image(s), %lld tokens in %.2f s", im->n,
                      (long long)im->feats.n_tokens, im->feats.seconds);
    }
    run_output out = {.tok = tok, .print_text = tok && !a.print_ids};
    qvl_text_stream_init(&out.stream, write_stdout, NULL);
    if (st == QVL_OK) {
        if (chat_mode)
            rc = run_chat_loop(m, &a, sampler, &gen, tok, &out, im);
        else
            rc = answer(m, &a, sampler, &gen, &out, ids, n_ids, false, im, &err) == QVL_OK
                     ? 0
                     : fail(cmd, &err);
    } else {
        rc = fail(cmd, &err);
    }
    free(out.ids);
    free(ids);
    qvl_sampler_free(sampler);
    qvl_model_close(m);
    qvl_tokenizer_free(tok);
    return rc;
}

int qvl_cmd_run(int argc, char **argv, bool chat_mode) {
    const char *cmd = chat_mode ? "chat" : "run";
    run_args a = {.n_predict = 256, .ctx = 4096};
    cli_opt opts[] = {
        [OPT_TEMP] = {"temp", 0, CLI_FLOAT, &a.temp, "T", "sampling temperature; 0 = greedy (default: generation_config.json)", 0, 100, false},
        [OPT_TOP_K] = {"top-k", 0, CLI_INT, &a.top_k, "K", "keep the K most likely tokens; 0 = off", 0, 1e9, false},
        [OPT_TOP_P] = {"top-p", 0, CLI_FLOAT, &a.top_p, "P", "nucleus sampling mass; 1 = off", 0, 1, false},
        [OPT_MIN_P] = {"min-p", 0, CLI_FLOAT, &a.min_p, "P", "drop tokens below P x the top probability; 0 = off", 0, 1, false},
        [OPT_REPEAT] = {"repeat-penalty", 0, CLI_FLOAT, &a.repeat_penalty, "R", "repetition penalty (HF semantics); 1 = off", 1e-3, 100, false},
        [OPT_PRESENCE] = {"presence-penalty", 0, CLI_FLOAT, &a.presence_penalty, "P", "subtract P from tokens already generated; 0 = off", -100, 100, false},
        [OPT_SEED] = {"seed", 0, CLI_INT, &a.seed, "S", "random seed (default: from the clock)", 0, 9.2e18, false},
        [OPT_MIN_PIXELS] = {"min-pixels", 0, CLI_INT, &a.min_pixels, "N", "resize pictures to at least N pixels (default: preprocessor_config.json)", 1, 1e12, false},
        [OPT_MAX_PIXELS] = {"max-pixels", 0, CLI_INT, &a.max_pixels, "N", "resize pictures to at most N pixels (default: preprocessor_config.json)", 1, 1e12, false},
        {"image", 0, CLI_STRING, &a.image_help, "FILE", "a picture (PNG, JPEG, BMP, GIF, PNM) for the prompt; repeatable; placed at <image> markers in the text, else before it", 0, 0, false},
        {"model", 'm', CLI_STRING, &a.model, "DIR", "model directory (config.json, *.safetensors, tokenizer.json)", 0, 0, false},
        {"prompt", 'p', CLI_STRING, &a.prompt, "TEXT", "the user's message (run)", 0, 0, false},
        {"system", 0, CLI_STRING, &a.system, "TEXT", "a system message before the conversation", 0, 0, false},
        {"n-predict", 'n', CLI_INT, &a.n_predict, "N", "generate at most N tokens (default 256)", 1, 1e9, false},
        {"ctx", 0, CLI_INT, &a.ctx, "N", "KV cache size in tokens (default 4096)", 1, 1 << 24, false},
        {"backend", 0, CLI_STRING, &a.backend, "NAME", "use this backend (overrides plugins.yaml priorities)", 0, 0, false},
        {"weights", 0, CLI_STRING, &a.weights, "DTYPE", "store matrix weights as bf16, f16, f32 or q8_0, converted once at load (default: the backend's weights: option in plugins.yaml, else as stored)", 0, 0, false},
        {"plugins", 0, CLI_STRING, &a.plugins, "FILE", "plugins.yaml to use (default: $QVL_PLUGINS, build/plugins.yaml beside the program, installed; never the current directory)", 0, 0, false},
        {"ids", 0, CLI_STRING, &a.ids, "\"1,2,3\"", "prompt as token ids: no chat template, no tokenizer (run)", 0, 0, false},
        {"print-ids", 0, CLI_FLAG, &a.print_ids, NULL, "print the generated token ids on one line instead of text", 0, 0, false},
        {"dump-logits", 0, CLI_STRING, &a.dump_logits, "FILE", "write the prompt's logits as float32 [n_prompt, vocab] (run)", 0, 0, false},
        {"no-fuse", 0, CLI_FLAG, &a.no_fuse, NULL, "run the unfused graph (debugging)", 0, 0, false},
        {"no-mmap", 0, CLI_FLAG, &a.no_mmap, NULL, "copy the weights into memory at load instead of reading them from the file mapping", 0, 0, false},
        {"verbose", 'v', CLI_FLAG, &a.verbose, NULL, "log progress and speed to stderr", 0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    size_t n_pos = 0;
    char prog[32];
    snprintf(prog, sizeof prog, "qvl %s", cmd);
    run_images im = {0};
    argc = collect_images(prog, argc, argv, &im);
    if (argc < 0) {
        run_images_free(&im);
        return 2;
    }
    int rc = cli_parse(prog, opts, n_opts, argc, argv, pos, 0, &n_pos);
    if (rc != CLI_OK) run_images_free(&im);
    if (rc == CLI_HELP) {
        cli_print_help(stdout, chat_mode ? "usage: qvl chat -m MODEL_DIR [options]   (one message per line; /exit ends)"
                                         : "usage: qvl run -m MODEL_DIR -p \"PROMPT\" [options]",
                       opts, n_opts);
        return 0;
    }
    if (rc != CLI_OK) return 2;
    rc = run_parsed(cmd, prog, &a, opts, chat_mode, &im);
    run_images_free(&im);
    return rc;
}
