/* qvl serve: an OpenAI-compatible HTTP server for one model. The listener starts first (so
 * /health can say "loading"), the engine thread loads the model, and the main thread waits for
 * SIGINT/SIGTERM, then shuts down in order: engine (finishing every job), the answers of the
 * requests in flight, then connections. */
#define _XOPEN_SOURCE 700

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "backend_args.h"
#include "cli.h"
#include "qvl/log.h"
#include "qvl_commands.h"
#include "serve_auth.h"
#include "qvl/engine.h"
#include "serve_http.h"
#include "serve_json.h"

#define SERVE_MMAP_THRESHOLD (4 << 20)

/* The name a model directory goes by: its last path component. */
static const char *base_name(const char *dir, char *buf, size_t n) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(buf, n, "%.*s", (int)(len - start), dir + start);
    return buf;
}

/* The one KV cache type from --kv-type and llama.cpp's -ctk/-ctv (K and V share qvl's type, so
 * the spellings must agree). false: a one-line error was printed. */
static bool kv_type_of(const char *kv, const char *k, const char *v, const char **out) {
    static const char *const known[] = {"f32", "f16", "q8_0"};
    const char *names[3] = {kv, k, v}, *flags[3] = {"--kv-type", "-ctk", "-ctv"};
    *out = NULL;
    for (int i = 0; i < 3; i++) {
        if (!names[i]) continue;
        bool ok = false;
        for (size_t t = 0; t < sizeof known / sizeof known[0]; t++) ok |= !strcmp(names[i], known[t]);
        if (!ok) {
            fprintf(stderr, "qvl serve: %s %s: the KV cache type must be f32, f16 or q8_0\n",
                    flags[i], names[i]);
            return false;
        }
        if (*out && strcmp(*out, names[i]) != 0) {
            fprintf(stderr, "qvl serve: %s %s differs from %s: qvl keeps K and V in one type; "
                    "give the same type (or --kv-type TYPE)\n", flags[i], names[i], *out);
            return false;
        }
        *out = names[i];
    }
    return true;
}

/* -fa/--flash-attn takes llama.cpp's values; qvl's attention is the same either way
 * (docs/serving.md, "llama-server's flags"). */
static bool flash_attn_ok(const char *v) {
    if (!v || !strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto")) return true;
    fprintf(stderr, "qvl serve: -fa %s: give on, off or auto\n", v);
    return false;
}

/* Wait for a stop signal; returns 0 on a signal, 1 when loading failed. */
static int wait_for_stop(const sigset_t *stop, qvl_engine *e, const serve_server *s) {
    bool announced = false;
    for (;;) {
        struct timespec tick = {0, 100 * 1000000L};
        int sig = sigtimedwait(stop, NULL, &tick);
        if (sig > 0) {
            fprintf(stderr, "qvl serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            return 0;
        }
        qvl_engine_phase st = qvl_engine_state(e);
        if (st == QVL_ENGINE_FAILED) {
            fprintf(stderr, "qvl serve: %s\n", qvl_engine_error(e));
            return 1;
        }
        if (st == QVL_ENGINE_READY && !announced) {
            fprintf(stderr, "qvl serve: model loaded, %d slot(s) of %lld tokens\n",
                    s->cfg->parallel, (long long)s->cfg->ctx);
            announced = true;
        }
    }
}

int qvl_cmd_serve(int argc, char **argv) {
    serve_config cfg = {.host = "127.0.0.1", .port = 8080, .parallel = 1, .queue = 16,
                        .ctx = 4096, .max_images = 8, .max_video_frames = 768,
                        .max_video_seconds = 600, .max_body = (size_t)24 << 20,
                        .timeout = 30, .request_timeout = 600, .max_connections = 64,
                        .max_connections_per_ip = 32, .receive_timeout = 60};
    int64_t port = cfg.port, parallel = cfg.parallel, queue = cfg.queue, max_images = cfg.max_images;
    int64_t max_body = (int64_t)cfg.max_body, timeout = cfg.timeout, max_conn = cfg.max_connections;
    int64_t request_timeout = cfg.request_timeout;
    int64_t max_video_frames = cfg.max_video_frames, max_video_seconds = cfg.max_video_seconds;
    int64_t batch_size = 512; /* llama.cpp's default physical batch */
    int64_t max_image_mib = 1024; /* docs/serving.md, "Picture memory": why this default */
    int64_t max_conn_per_ip = cfg.max_connections_per_ip, receive_timeout = cfg.receive_timeout;
    backend_args be = {.threads = -1}; /* -1: -t not given (the parser allows 0 and up) */
    const char *cache_k = NULL, *cache_v = NULL, *flash_attn = NULL;
    bool metrics_flag = false, slots_flag = false;
    cli_opt opts[] = {
        {"model", 'm', CLI_STRING, &cfg.model, "DIR|FILE", "model directory (config.json, *.safetensors, tokenizer.json) or llama.cpp GGUF file", 0, 0, false},
        {"mmproj", 0, CLI_STRING, &cfg.mmproj, "FILE", "the vision part of a GGUF model (llama.cpp's mmproj GGUF), for pictures and videos", 0, 0, false},
        {"host", 0, CLI_STRING, &cfg.host, "ADDR", "address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 or :: for all)", 0, 0, false},
        {"port", 0, CLI_INT, &port, "N", "TCP port (default 8080; 0 picks a free one)", 0, 65535, false},
        {"parallel", 0, CLI_INT, &parallel, "N", "slots: requests answered at once, each with its own KV cache (default 1)", 1, 256, false},
        {"queue", 0, CLI_INT, &queue, "N", "requests that may wait for a slot; beyond that 429 (default 16)", 0, 1 << 20, false},
        {"batch-size", 'b', CLI_INT, &batch_size, "N", "prompt tokens prefilled per scheduling round, in chunks between the running answers' tokens: a stream waits at most one chunk while a long prompt arrives; 0 = each prompt whole (default 512)", 0, 1 << 24, false},
        {"ctx", 0, CLI_INT, &cfg.ctx, "N", "KV cache size of each slot in tokens: prompt + answer (default 4096)", 16, 1 << 24, false},
        {"api-key", 0, CLI_STRING, &cfg.api_key, "KEY", "require Authorization: Bearer KEY on every endpoint but /health and the chat page at /", 0, 0, false},
        {"api-key-file", 0, CLI_STRING, &cfg.api_key_file, "FILE", "accept each key in FILE (one per line; # comments) as --api-key does; prefix reuse never crosses keys", 0, 0, false},
        {"max-image-memory", 0, CLI_INT, &max_image_mib, "MIB", "memory pictures may hold at once, decoding or waiting for their prefill; more waits (default 1024)", 1, 1 << 24, false},
        {"image-dir", 0, CLI_STRING, &cfg.image_dir, "DIR", "allow image_url to name files inside DIR (default: data: URLs only)", 0, 0, false},
        {"max-images", 0, CLI_INT, &max_images, "N", "pictures and videos per request (default 8)", 0, 1024, false},
        {"max-video-frames", 0, CLI_INT, &max_video_frames, "N", "frames one video may give, before the processor keeps some (default 768)", 1, 1 << 20, false},
        {"max-video-seconds", 0, CLI_INT, &max_video_seconds, "S", "seconds one video may last (frames / fps) (default 600)", 1, 1 << 24, false},
        {"max-body", 0, CLI_INT, &max_body, "BYTES", "largest request body; larger is 413 (default 25165824: 8 phone photos as base64, docs/serving.md)", 1024, 1LL << 32, false},
        {"timeout", 0, CLI_INT, &timeout, "S", "close a connection idle for S seconds (default 30)", 1, 86400, false},
        {"request-timeout", 0, CLI_INT, &request_timeout, "S", "stop a request S seconds after it was queued: the answer so far with finish_reason length, or 503 if no slot took it yet; 0 = never (default 600)", 0, 1 << 30, false},
        {"max-connections", 0, CLI_INT, &max_conn, "N", "connections served at once (default 64)", 1, 65536, false},
        {"max-connections-per-ip", 0, CLI_INT, &max_conn_per_ip, "N", "connections from one client address at once; more are closed when accepted; 0 = no limit (default 32; behind a proxy give 0)", 0, 65536, false},
        {"receive-timeout", 0, CLI_INT, &receive_timeout, "S", "a request (headers and body) must arrive whole within S seconds of the connection's opening or the previous answer, else 408 and close (default 60)", 1, 86400, false},
        {"allow-host", 0, CLI_STRING, &cfg.allow_host, "NAMES", "comma-separated Host names answered besides localhost, *.localhost, 127.x.x.x and [::1] when listening on loopback; * = any (default: none; other Hosts get 403)", 0, 0, false},
        {"kv-type", 0, CLI_STRING, &cfg.kv_type, "TYPE", "KV cache dtype: f32, f16 or q8_0 (default: the backend's kv_type: option in plugins.yaml, else f16; as qvl run)", 0, 0, false},
        {"cache-type-k", 0, CLI_STRING, &cache_k, "TYPE", "llama.cpp's K cache type: qvl has one KV type, so it must equal -ctv and --kv-type when given", 0, 0, false},
        {"cache-type-v", 0, CLI_STRING, &cache_v, "TYPE", "llama.cpp's V cache type (as -ctk)", 0, 0, false},
        {"flash-attn", 0, CLI_STRING, &flash_attn, "on|off|auto", "accepted for llama.cpp's command lines; no effect: attention is fused wherever the backend takes the fused op (docs/serving.md)", 0, 0, false},
        {"metrics", 0, CLI_FLAG, &metrics_flag, NULL, "accepted for llama.cpp's command lines: GET /metrics is always served (behind --api-key)", 0, 0, false},
        {"slots", 0, CLI_FLAG, &slots_flag, NULL, "serve GET /slots (the default)", 0, 0, false},
        {"no-slots", 0, CLI_FLAG, &cfg.no_slots, NULL, "do not serve GET /slots (404)", 0, 0, false},
        {"cors", 0, CLI_STRING, &cfg.cors, "ORIGINS", "answer browsers from these origins (comma-separated; * = any) with CORS headers and preflights (default: none)", 0, 0, false},
        {"alias", 0, CLI_STRING, &cfg.model_id, "NAME", "model name in /v1/models and responses (default: the directory's name)", 0, 0, false},
        {"backend", 0, CLI_STRING, &cfg.backend, "NAME", "use this backend (overrides plugins.yaml priorities)", 0, 0, false},
        {"weights", 0, CLI_STRING, &cfg.weights, "DTYPE", "store matrix weights as bf16, f16, f32, q8_0, q4_k, q6_k or the q4_k_m mixture (as qvl run)", 0, 0, false},
        {"plugins", 0, CLI_STRING, &cfg.plugins, "FILE", "plugins.yaml to use (as qvl run)", 0, 0, false},
        {"threads", 't', CLI_INT, &be.threads, "N", "CPU threads of the backend (its `threads` option; overrides plugins.yaml; 0 = all cores)", 0, 4096, false},
        BACKEND_ARGS_CLI_OPTS(&be),
        {"no-webui", 0, CLI_FLAG, &cfg.no_webui, NULL, "do not serve the chat page at GET / (404 instead)", 0, 0, false},
        {"verbose", 'v', CLI_FLAG, &cfg.verbose, NULL, "log loading, speed and HTTP problems to stderr", 0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    size_t n_pos = 0;
    /* llama-server's spellings where the meaning is the same. */
    static const cli_alias aliases[] = {
        {"-ngl", "gpu-layers"}, {"--n-gpu-layers", "gpu-layers"}, {"-c", "ctx"},
        {"--ctx-size", "ctx"}, {"-np", "parallel"}, {"-a", "alias"}, {"-ctk", "cache-type-k"},
        {"-ctv", "cache-type-v"}, {"-fa", "flash-attn"}};
    const size_t n_aliases = sizeof aliases / sizeof aliases[0];
    int rc = cli_parse_aliased("qvl serve", opts, n_opts, aliases, n_aliases, argc, argv, pos, 0,
                               &n_pos);
    if (rc == CLI_HELP) {
        cli_print_help_ex(stdout, "usage: qvl serve -m MODEL_DIR [options]   (OpenAI-compatible "
                          "POST /v1/chat/completions, /v1/completions, GET /v1/models; "
                          "llama-server's /tokenize, /detokenize, /props, /slots; /health, "
                          "/metrics)", opts, n_opts, aliases, n_aliases, NULL);
        return 0;
    }
    if (rc != CLI_OK) return 2;
    if (!cfg.model) {
        fprintf(stderr, "qvl serve: -m MODEL_DIR is required\n");
        return 2;
    }
    if (!kv_type_of(cfg.kv_type, cache_k, cache_v, &cfg.kv_type) || !flash_attn_ok(flash_attn))
        return 2;
    if (slots_flag && cfg.no_slots) {
        fprintf(stderr, "qvl serve: --slots and --no-slots contradict each other\n");
        return 2;
    }
    if (cfg.cors && !cfg.cors[0]) {
        fprintf(stderr, "qvl serve: --cors needs an origin (https://app.example) or *\n");
        return 2;
    }
    cfg.port = (int)port;
    cfg.parallel = (int)parallel;
    cfg.queue = (int)queue;
    cfg.max_images = (int)max_images;
    cfg.max_video_frames = max_video_frames;
    cfg.max_video_seconds = (int)max_video_seconds;
    cfg.max_body = (size_t)max_body;
    cfg.timeout = (int)timeout;
    cfg.request_timeout = (int)request_timeout;
    cfg.max_image_memory = max_image_mib << 20;
    be.threads_seen = be.threads >= 0;
    cfg.backend_options = backend_args_options(&be);
    cfg.gpu_layers = be.gpu_layers;
    cfg.cpu_backend = be.cpu_backend;
    cfg.vision_backend = be.vision_backend;
    cfg.max_connections = (int)max_conn;
    cfg.max_connections_per_ip = (int)max_conn_per_ip;
    cfg.receive_timeout = (int)receive_timeout;
    char name[256];
    if (!cfg.model_id) cfg.model_id = base_name(cfg.model, name, sizeof name);
    if (cfg.verbose) qvl_log_level_set(QVL_LOG_INFO);

    /* Signals go to the main thread only: block them before any thread starts. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that left is a failed write, not a dead server */

    char msg[256];
    if (!serve_auth_load(&cfg, msg, sizeof msg)) {
        fprintf(stderr, "qvl serve: %s\n", msg);
        return 2;
    }

    serve_json_install_hooks(); /* cJSON's allocator, set before any thread uses cJSON */
#ifdef __GLIBC__
    /* Blocks of 4 MiB and more (bodies, their big strings, pictures) get their own mappings,
     * returned to the system when freed. glibc's default raises this threshold to the largest
     * block freed so far (up to 32 MiB), after which such blocks stay in the connection
     * threads' arenas, out of malloc_trim's reach at the top of their heaps. */
    mallopt(M_MMAP_THRESHOLD, SERVE_MMAP_THRESHOLD);
#endif
    serve_metrics *metrics = serve_metrics_create(cfg.parallel);
    if (!metrics) {
        fprintf(stderr, "qvl serve: out of memory\n");
        serve_auth_free(&cfg);
        return 1;
    }
    char image_dir[PATH_MAX];
    if (cfg.image_dir && !realpath(cfg.image_dir, image_dir)) {
        fprintf(stderr, "qvl serve: --image-dir %s: no such directory\n", cfg.image_dir);
        serve_metrics_free(metrics);
        serve_auth_free(&cfg);
        return 1;
    }
    serve_budget budget;
    if (!serve_budget_init(&budget, cfg.max_image_memory)) {
        fprintf(stderr, "qvl serve: cannot make the picture memory budget\n");
        serve_metrics_free(metrics);
        serve_auth_free(&cfg);
        return 1;
    }
    serve_metrics_set_image_budget(metrics, &budget);
    qvl_error err = {0};
    qvl_engine_options eo = {.model = cfg.model, .mmproj = cfg.mmproj, .slots = cfg.parallel, .queue = cfg.queue,
                             .ctx = cfg.ctx, .prefill_chunk = batch_size,
                             .backend = cfg.backend, .plugins = cfg.plugins,
                             .weights = cfg.weights, .kv_type = cfg.kv_type, .gpu_layers = cfg.gpu_layers,
                             .cpu_backend = cfg.cpu_backend, .vision_backend = cfg.vision_backend,
                             .backend_options = cfg.backend_options};
    serve_metrics_observer(metrics, &eo.observer);
    qvl_engine *engine = qvl_engine_start(&eo, &err);
    serve_server srv = {.cfg = &cfg, .engine = engine, .metrics = metrics, .budget = &budget,
                        .image_dir = cfg.image_dir ? image_dir : NULL};
    if (!engine || !serve_http_start(&srv, msg, sizeof msg)) {
        fprintf(stderr, "qvl serve: %s\n", engine ? msg : err.msg);
        qvl_engine_free(engine);
        serve_metrics_set_image_budget(metrics, NULL);
        serve_budget_destroy(&budget);
        serve_metrics_free(metrics);
        serve_auth_free(&cfg);
        return 1;
    }
    const bool v6 = strchr(cfg.host, ':') != NULL;
    fprintf(stderr, "qvl serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", cfg.host,
            v6 ? "]" : "", srv.port);
    rc = wait_for_stop(&stop, engine, &srv);
    /* Decodes and waits for picture memory end first: they make no connection thread wait. */
    serve_budget_close(&budget);
    qvl_engine_stop(engine);
    /* Every job has ended with "shutting down": let each connection write its 503 or its
     * stream's error event and [DONE] before the daemon closes the sockets; a client that
     * stopped reading holds it at most --timeout seconds, as it would any connection. */
    serve_http_drain(&srv, cfg.timeout);
    serve_http_stop(&srv);
    qvl_engine_free(engine);
    serve_metrics_set_image_budget(metrics, NULL);
    serve_budget_destroy(&budget);
    serve_metrics_free(metrics);
    serve_auth_free(&cfg);
    return rc;
}
