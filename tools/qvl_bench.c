/* qvl-bench: how fast qvl runs a model on a backend, and how that compares with what the
 * machine can do at most (roofline probes measured in the same run).
 *
 * Procedure: load the model (timed), run one prefill of the prompt right away (the cold first
 * token: weights are paged in), then REPS repetitions of {fresh KV cache, prefill of the
 * prompt, N decode steps}. The prompt is random in-vocabulary ids; each decode step feeds the
 * greedy (argmax) token of the previous logits, and the argmax is outside the timed region, as
 * is any tokenisation (there is none), as llama-bench does. Then one profiled prefill and one
 * profiled decode step give the per-op breakdown, peak RSS is read, and last the probes run
 * (their 1 GiB buffer would otherwise count in the peak RSS).
 *
 * --image WxH: a synthetic picture of that size is preprocessed once (not timed, like
 * tokenisation; resized as qvl run resizes it, --image-max-tokens included) and encoded by the
 * vision tower once cold, then REPS times timed, then once profiled. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_probe.h"
#include "backend_args.h"
#include "bench_parallel.h"
#include "bench_report.h"
#include "cli.h"
#include "image_bounds.h"
#include "qvl/image.h"
#include "qvl/image_preprocess.h"
#include "qvl/log.h"
#include "qvl/model_files.h"
#include "qvl/qwen3vl_model.h"

#define PROG "qvl-bench"
#define PROBE_PASSES 5

typedef struct bench_args {
    const char *model, *backend, *plugins, *weights, *image, *kv_type;
    const char *mmproj; /* --mmproj: the vision GGUF of a -m MODEL.gguf */
    int64_t n_prompt, n_gen, threads, reps, probe_mib, seed, ctx, parallel;
    int64_t image_max_tokens; /* --image-max-tokens as qvl run takes it; 0: not given */
    bool json, no_profile, no_probe, no_mmap, verbose;
    backend_args be; /* -ngl, --cpu-backend, --vision-backend, --gpu-mem-mib (threads: above) */
} bench_args;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* FLOPs of one prefill of p tokens into an empty cache, from the config: 2 per multiply-add of
 * every projection for every token, the output projection for the last token only (that is
 * all the graph computes), and attention's QK^T and PV over the causal triangle. Norms, rope
 * and activations are left out (a fraction of a percent). */
static double prefill_flops(const qvl_text_config *t, int64_t p) {
    double h = (double)t->hidden_size, q = (double)(t->num_attention_heads * t->head_dim);
    double kv = (double)(t->num_key_value_heads * t->head_dim);
    double per_layer = h * q + 2 * h * kv + q * h + 3 * h * (double)t->intermediate_size;
    double layers = (double)t->num_hidden_layers;
    double pairs = (double)p * (double)(p + 1) / 2; /* (query, key) pairs under the mask */
    return 2 * (double)p * per_layer * layers + 2 * h * (double)t->vocab_size +
           layers * 4 * q * pairs;
}

/* FLOPs of the vision tower on one picture of S patches, from the config: patch embedding,
 * per block qkv/proj/fc1/fc2 and full (non-causal) attention over the picture's patches, and
 * the merger plus one merger per deepstack tap on S / merge^2 tokens. */
static double vision_flops(const qvl_vision_config *v, const qvl_image_grid *g) {
    double S = (double)(g->t * g->h * g->w), h = (double)v->hidden_size;
    double width = (double)(v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size);
    double m2 = (double)(v->spatial_merge_size * v->spatial_merge_size), in = m2 * h;
    double per_block = 2 * S * (4 * h * h + 2 * h * (double)v->intermediate_size) + 4 * S * S * h;
    double mergers = (1 + (double)v->n_deepstack) * 2 * (S / m2) * (in * in + in * (double)v->out_hidden_size);
    return 2 * S * width * h + (double)v->depth * per_block + mergers;
}

static bool parse_image(const char *s, int64_t *w, int64_t *h) {
    char *end = NULL;
    long long a = strtoll(s, &end, 10);
    if (end == s || (*end != 'x' && *end != 'X') || a <= 0 || a > 100000) return false;
    const char *s2 = end + 1;
    long long b = strtoll(s2, &end, 10);
    if (end == s2 || *end || b <= 0 || b > 100000) return false;
    *w = a;
    *h = b;
    return true;
}

/* Free device memory as the backend reports it, through a second instance opened before the
 * model (so the model's own use shows as a drop). Host-memory backends report nothing. */
static void *device_memory_probe_open(const bench_args *a, uint64_t *free_before) {
    qvl_log_level saved = qvl_log_level_get();
    qvl_log_level_set(QVL_LOG_ERROR); /* skipped backends are reported once, by the model */
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_backend_open(a->plugins, a->backend, &lb, &err);
    qvl_log_level_set(saved);
    if (st != QVL_OK) return NULL; /* the model's load will say why */
    qvl_device_info info;
    if (!lb->iface->describe || lb->iface->describe(lb->be, &info) != QVL_OK ||
        info.host_memory || info.memory_free == 0) {
        qvl_backend_unload(lb);
        return NULL;
    }
    *free_before = info.memory_free;
    return lb;
}

static qvl_status timed_eval(qvl_model *m, const int32_t *ids, int64_t n, float *logits,
                             double *seconds, qvl_error *err) {
    double t0 = now_seconds();
    qvl_status st = qvl_model_eval(m, ids, n, NULL, false, logits, err);
    *seconds = now_seconds() - t0;
    return st;
}

/* REPS x {fresh cache, prefill, n_gen greedy decode steps}. */
static qvl_status run_reps(qvl_model *m, const bench_args *a, const int32_t *prompt,
                           float *logits, bench_results *r, qvl_error *err) {
    const int64_t vocab = qvl_model_config(m)->text.vocab_size;
    double *pre = calloc((size_t)a->reps, sizeof *pre), *dec = calloc((size_t)a->reps, sizeof *dec);
    if (!pre || !dec) {
        free(pre);
        free(dec);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    qvl_status st = QVL_OK;
    for (int64_t rep = 0; rep < a->reps && st == QVL_OK; rep++) {
        qvl_model_truncate(m, 0);
        double dt;
        st = timed_eval(m, prompt, a->n_prompt, logits, &dt, err);
        pre[rep] = dt > 0 ? (double)a->n_prompt / dt : 0;
        double decode_time = 0;
        for (int64_t i = 0; i < a->n_gen && st == QVL_OK; i++) {
            int32_t id = argmax(logits, vocab); /* outside the timed region */
            st = timed_eval(m, &id, 1, logits, &dt, err);
            decode_time += dt;
        }
        dec[rep] = decode_time > 0 ? (double)a->n_gen / decode_time : 0;
    }
    if (st == QVL_OK) {
        r->prefill_tps = bench_spread_of(pre, (int)a->reps);
        r->decode_tps = bench_spread_of(dec, (int)a->reps);
    }
    free(pre);
    free(dec);
    return st;
}

/* One profiled prefill and one profiled decode step. */
static qvl_status run_profile(qvl_model *m, const bench_args *a, const int32_t *prompt,
                              float *logits, bench_results *r, qvl_error *err) {
    const int64_t vocab = qvl_model_config(m)->text.vocab_size;
    qvl_model_truncate(m, 0);
    qvl_model_profile_reset(m);
    qvl_model_set_profiling(m, true);
    qvl_status st = timed_eval(m, prompt, a->n_prompt, logits, &r->prof_prefill_wall, err);
    qvl_model_profile(m, &r->prof_prefill);
    qvl_model_profile_reset(m);
    if (st == QVL_OK) {
        int32_t id = argmax(logits, vocab);
        st = timed_eval(m, &id, 1, logits, &r->prof_decode_wall, err);
        qvl_model_profile(m, &r->prof_decode);
    }
    qvl_model_set_profiling(m, false);
    r->profiled = st == QVL_OK;
    return st;
}

/* A picture with some structure (gradients and noise), the same for a given size. */
static qvl_status synthetic_picture(int64_t w, int64_t h, qvl_image *img, qvl_error *err) {
    img->width = (int32_t)w;
    img->height = (int32_t)h;
    img->rgb = malloc((size_t)(w * h) * 3);
    if (!img->rgb) return qvl_fail(err, QVL_E_NOMEM, "out of memory for a %lldx%lld picture",
                                   (long long)w, (long long)h);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            uint8_t *px = img->rgb + (y * w + x) * 3;
            px[0] = (uint8_t)(255 * x / w);
            px[1] = (uint8_t)(255 * y / h);
            px[2] = (uint8_t)(xorshift(&seed) >> 56);
        }
    return QVL_OK;
}

/* Encode the picture: once cold, REPS times timed, once profiled. */
static qvl_status run_vision(qvl_model *m, const bench_args *a, bench_results *r,
                             qvl_error *err) {
    const qvl_qwen3vl_config *cfg = qvl_model_config(m);
    if (!cfg->has_vision) {
        r->vision_note = "the model has no vision encoder";
        return QVL_OK;
    }
    qvl_preprocess_config pc;
    qvl_model_files files;
    const char *source = NULL;
    qvl_status st = qvl_model_files_find(a->model, a->mmproj, &files, err);
    if (st == QVL_OK) {
        st = qvl_model_files_preprocess(&files, &cfg->vision, &pc, &source, err);
        qvl_model_files_free(&files);
    }
    if (st == QVL_OK) { /* the window qvl run resizes into, so both encode the same grid */
        const run_image_bounds b = {.max_tokens = a->image_max_tokens,
                                    .max_tokens_set = a->image_max_tokens > 0};
        char cap[128];
        st = image_bounds_resolve(&b, source, &pc, cap, sizeof cap, err);
    }
    qvl_image img = {0};
    float *pixels = NULL;
    if (st == QVL_OK) st = synthetic_picture(r->image_w, r->image_h, &img, err);
    if (st == QVL_OK) st = qvl_image_preprocess(&img, &pc, &pixels, &r->image_grid, err);
    qvl_image_free(&img);
    double *ms = calloc((size_t)a->reps, sizeof *ms);
    if (st == QVL_OK && !ms) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_image_features f;
    for (int64_t rep = -1; st == QVL_OK && rep <= a->reps; rep++) {
        bool profiled = rep == a->reps;
        if (profiled && a->no_profile) break;
        if (profiled) {
            qvl_model_profile_reset(m);
            qvl_model_set_profiling(m, true);
        }
        double t0 = now_seconds();
        st = qvl_model_encode_images(m, pixels, 1, &r->image_grid, &f, err);
        double dt = now_seconds() - t0;
        if (st != QVL_OK) break;
        r->vision_tokens = f.n_tokens;
        qvl_image_features_free(&f);
        if (rep < 0) r->vision_first_ms = dt * 1e3; /* cold: vision weights paged in */
        else if (!profiled) ms[rep] = dt * 1e3;
        else {
            qvl_model_profile(m, &r->prof_vision);
            r->prof_vision_wall = dt;
            r->vision_profiled = true;
        }
    }
    qvl_model_set_profiling(m, false);
    if (st == QVL_OK) {
        r->vision_ms = bench_spread_of(ms, (int)a->reps);
        r->vision_flops = vision_flops(&cfg->vision, &r->image_grid);
        r->has_vision = true;
    }
    free(ms);
    free(pixels);
    return st;
}

static int bench(const bench_args *a, const cli_opt *threads_opt, bench_results *r) {
    qvl_error err = {0};
    qvl_model_options mo = {
        .plugins_path = a->plugins, .backend_name = a->backend, .ctx = a->ctx ? a->ctx : a->n_prompt + a->n_gen,
        .weight_dtype = a->weights, .kv_type = a->kv_type, .no_mmap = a->no_mmap,
        .mmproj = a->mmproj,
        /* --parallel's sequences pooled beside the model's own (batched attention) */
        .kv_slots = a->parallel > 1 ? (int)a->parallel + 1 : 1,
    };
    backend_args be = a->be;
    be.threads = a->threads;
    be.threads_seen = threads_opt->seen;
    backend_args_apply(&be, &mo);

    uint64_t free_before = 0;
    qvl_loaded_backend *dev = device_memory_probe_open(a, &free_before);
    qvl_model *m = NULL;
    double t0 = now_seconds();
    qvl_status st = qvl_model_open(a->model, &mo, &m, &err);
    r->load_seconds = now_seconds() - t0;
    r->rss_after_load = peak_rss_bytes();
    if (st == QVL_OK && dev) {
        qvl_device_info info;
        if (dev->iface->describe(dev->be, &info) == QVL_OK) {
            r->has_device_memory = true;
            r->device_memory_bytes = (int64_t)free_before - (int64_t)info.memory_free;
        }
    }
    qvl_backend_unload(dev);
    if (st != QVL_OK) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }

    const qvl_loaded_backend *lb = qvl_model_backend(m);
    static char device[128];
    qvl_device_info info = {.host_memory = true}; /* unless describe says otherwise */
    if (lb->iface->describe && lb->iface->describe(lb->be, &info) == QVL_OK)
        snprintf(device, sizeof device, "%s", info.name);
    r->backend = lb->name;
    r->device = device;
    qvl_model_get_load_stats(m, &r->load);
    r->weights = qvl_dtype_name(r->load.matrix_dtype);
    bench_describe_weights(r);
    const qvl_text_config *tc = &qvl_model_config(m)->text;
    r->prefill_flops = prefill_flops(tc, a->n_prompt);

    int32_t *prompt = malloc((size_t)a->n_prompt * sizeof *prompt);
    /* where qvl run's engine keeps them: page-locked when the logits are on a GPU */
    float *logits = qvl_model_host_alloc(m, (size_t)tc->vocab_size * sizeof *logits);
    if (!prompt || !logits) st = qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    uint64_t seed = (uint64_t)a->seed * 2654435761u + 88172645463325252ull;
    for (int64_t i = 0; st == QVL_OK && i < a->n_prompt; i++)
        prompt[i] = (int32_t)(xorshift(&seed) % (uint64_t)tc->vocab_size);

    if (st == QVL_OK) st = timed_eval(m, prompt, a->n_prompt, logits, &r->first_prefill_seconds, &err);
    if (st == QVL_OK) st = run_reps(m, a, prompt, logits, r, &err);
    if (st == QVL_OK && !a->no_profile) st = run_profile(m, a, prompt, logits, r, &err);
    if (st == QVL_OK && a->parallel > 1) {
        r->parallel = a->parallel;
        st = bench_parallel(m, a->parallel, prompt, a->n_prompt, a->n_gen, a->reps,
                            &r->parallel_tps, &r->parallel_greedy_tps, &r->parallel_prefill_tps,
                            a->no_profile ? NULL : &r->prof_parallel,
                            &r->prof_parallel_wall, &err);
        r->parallel_profiled = st == QVL_OK && !a->no_profile;
    }
    if (st == QVL_OK && r->image_requested) st = run_vision(m, a, r, &err);
    r->rss_peak = peak_rss_bytes();
    qvl_model_placement(m, r->placement, sizeof r->placement);
    r->n_mem = qvl_model_memory(m, r->mem, sizeof r->mem / sizeof r->mem[0]);
    free(prompt);
    qvl_model_host_free(m, logits);
    if (st != QVL_OK) {
        qvl_model_close(m);
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }

    if (!a->no_probe && !info.host_memory) {
        /* A device qvl cannot probe from the host: ask the backend for its ceilings. */
        qvl_backend_probe_fn probe =
            (qvl_backend_probe_fn)qvl_backend_proc(lb->iface, QVL_EXT_PROBE);
        qvl_device_probe dp;
        if (!probe) {
            fprintf(stderr, PROG ": backend %s offers no %s: no roofline figures\n", lb->name,
                    QVL_EXT_PROBE);
        } else if (probe(lb->be, (size_t)a->probe_mib << 20, &dp, &err) != QVL_OK) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            qvl_model_close(m);
            return 1;
        } else {
            static char kind[sizeof dp.kind];
            memcpy(kind, dp.kind, sizeof kind);
            r->probe = (bench_probe){.gbs = dp.read_gbs, .gflops = dp.fma_gflops, .kind = kind,
                                     .device = true, .threads = 0, .bytes = dp.bytes};
            r->probed = true;
        }
    } else if (!a->no_probe) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = a->threads > 0 ? (int)a->threads : (int)(cores > 0 ? cores : 1);
        if (bench_probe_run((size_t)a->probe_mib << 20, threads, PROBE_PASSES, &r->probe) != 0) {
            qvl_model_close(m);
            return 1;
        }
        r->probed = true;
    }
    if (a->json) bench_print_json(stdout, r);
    else bench_print_text(stdout, r);
    qvl_model_close(m);
    return 0;
}

int main(int argc, char **argv) {
    bench_args a = {.n_prompt = 128, .n_gen = 32, .reps = 3, .threads = -1, .probe_mib = 1024,
                    .seed = 1};
    enum { OPT_THREADS = 0 };
    cli_opt opts[] = {
        [OPT_THREADS] = {"threads", 't', CLI_INT, &a.threads, "N", "backend option threads (0 = all cores); also the probes' thread count (default: backend default; probes use all cores)", 0, 4096, false},
        {"model", 'm', CLI_STRING, &a.model, "DIR|FILE", "model directory (config.json, *.safetensors) or llama.cpp GGUF file", 0, 0, false},
        {"mmproj", 0, CLI_STRING, &a.mmproj, "FILE", "the vision part of a GGUF model (llama.cpp's mmproj GGUF), for --image", 0, 0, false},
        {"backend", 0, CLI_STRING, &a.backend, "NAME", "use this backend (overrides plugins.yaml priorities)", 0, 0, false},
        {"plugins", 0, CLI_STRING, &a.plugins, "FILE", "plugins.yaml to use (default: $QVL_PLUGINS, build/plugins.yaml beside the program, installed; never the current directory)", 0, 0, false},
        {"weights", 0, CLI_STRING, &a.weights, "DTYPE", "convert matrix weights once at load: bf16, f16, f32, q8_0, q4_k, q6_k or q4_k_m (default: the backend's weights: option in plugins.yaml, else as stored)", 0, 0, false},
        {"n-prompt", 'p', CLI_INT, &a.n_prompt, "N", "prompt length in tokens (default 128)", 1, 1 << 20, false},
        {"n-gen", 'n', CLI_INT, &a.n_gen, "N", "decode steps after the prompt (default 32)", 1, 1 << 20, false},
        {"image", 0, CLI_STRING, &a.image, "WxH", "also time the vision encoder on a synthetic image of this size", 0, 0, false},
        {"image-max-tokens", 0, CLI_INT, &a.image_max_tokens, "N", "resize the --image picture to at most N tokens, as qvl run does (default 4096)", 1, 1 << 24, false},
        {"reps", 'r', CLI_INT, &a.reps, "N", "repetitions (default 3); figures are median, min and max", 1, 1000, false},
        {"seed", 0, CLI_INT, &a.seed, "S", "seed of the random prompt ids (default 1)", 0, 9.2e18, false},
        {"json", 0, CLI_FLAG, &a.json, NULL, "print one JSON object instead of text", 0, 0, false},
        {"no-profile", 0, CLI_FLAG, &a.no_profile, NULL, "skip the per-op profile (one extra prefill and decode step)", 0, 0, false},
        {"no-probe", 0, CLI_FLAG, &a.no_probe, NULL, "skip the memory-bandwidth and FMA probes", 0, 0, false},
        {"kv-type", 0, CLI_STRING, &a.kv_type, "TYPE", "KV cache dtype: f32, f16 or q8_0 (default: the backend's kv_type: option in plugins.yaml, else f16)", 0, 0, false},
        {"no-mmap", 0, CLI_FLAG, &a.no_mmap, NULL, "copy the weights into memory at load instead of reading them from the file mapping", 0, 0, false},
        BACKEND_ARGS_CLI_OPTS(&a.be),
        {"parallel", 0, CLI_INT, &a.parallel, "N", "also decode N sequences together in batched steps (a server's N busy slots) and report their total tok/s", 1, 64, false},
        {"ctx", 0, CLI_INT, &a.ctx, "N", "KV cache size in tokens (default: -p + -n); e.g. 4096 to see the device memory a long context takes", 1, 1 << 24, false},
        {"probe-mib", 0, CLI_INT, &a.probe_mib, "MIB", "buffer of the memory-read probe in MiB (default 1024: far above any cache)", 1, 1 << 20, false},
        {"verbose", 'v', CLI_FLAG, &a.verbose, NULL, "log loading details to stderr", 0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    size_t n_pos = 0;
    static const cli_alias aliases[] = {{"-ngl", "gpu-layers"}, {"--n-gpu-layers", "gpu-layers"}};
    const size_t n_aliases = sizeof aliases / sizeof aliases[0];
    int rc = cli_parse_aliased(PROG, opts, n_opts, aliases, n_aliases, argc - 1, argv + 1, pos, 0,
                               &n_pos);
    if (rc == CLI_HELP) {
        cli_print_help_ex(stdout, "usage: " PROG " -m MODEL_DIR [options]\n\n"
                       "Measures prefill and decode speed (median, min, max over repetitions), load\n"
                       "time, time to first token, peak RSS, a per-op time breakdown, and compares\n"
                       "them with memory-read and FMA probes run in the same process.",
                       opts, n_opts, aliases, n_aliases, NULL);
        return 0;
    }
    if (rc != CLI_OK) return 2;
    if (!a.model) {
        fprintf(stderr, PROG ": -m MODEL_DIR is required\n");
        return 2;
    }
    if (a.ctx && a.ctx < a.n_prompt + a.n_gen) {
        fprintf(stderr, PROG ": --ctx %lld cannot hold -p %lld + -n %lld tokens\n", (long long)a.ctx,
                (long long)a.n_prompt, (long long)a.n_gen);
        return 2;
    }
    qvl_dtype wd;
    if (a.weights && strcmp(a.weights, "q4_k_m") != 0 &&
        (!qvl_dtype_parse(a.weights, &wd) || wd == QVL_I32)) {
        fprintf(stderr, PROG ": --weights: '%s' is not one of bf16, f16, f32, q8_0, q4_k, q6_k, "
                        "q4_k_m\n", a.weights);
        return 2;
    }
    bench_results r = {.model_dir = a.model, .weights_requested = a.weights != NULL,
                       .threads = opts[OPT_THREADS].seen ? a.threads : -1,
                       .n_prompt = a.n_prompt, .n_gen = a.n_gen, .reps = a.reps};
    if (a.image) {
        if (!parse_image(a.image, &r.image_w, &r.image_h)) {
            fprintf(stderr, PROG ": --image: '%s' is not WIDTHxHEIGHT (e.g. 448x448)\n", a.image);
            return 2;
        }
        /* the synthetic picture obeys the limit every decoded picture does (image.h) */
        if (r.image_w * r.image_h > qvl_image_max_pixels()) {
            fprintf(stderr, PROG ": --image %s: %lld pixels, more than the %lld a picture may have\n",
                    a.image, (long long)(r.image_w * r.image_h), (long long)qvl_image_max_pixels());
            return 2;
        }
        r.image_requested = true;
    }
    qvl_log_level_set(a.verbose ? QVL_LOG_INFO : QVL_LOG_WARN);
    return bench(&a, &opts[OPT_THREADS], &r);
}
