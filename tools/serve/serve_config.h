/* qvl serve: the settings of one server (from the command line; read-only once it runs). */
#ifndef QVL_SERVE_CONFIG_H
#define QVL_SERVE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/backend.h" /* qvl_options */

typedef struct serve_config {
    const char *model;     /* model directory or GGUF file */
    const char *mmproj;    /* --mmproj: the vision GGUF of a GGUF model */
    const char *model_id;  /* the name /v1/models reports and responses carry */
    const char *host;      /* address to bind: an IPv4 or IPv6 literal */
    int port;
    int parallel;          /* slots: sequences decoded at once, each with its own KV cache */
    int queue;             /* requests that may wait for a slot; one more is refused (429) */
    int64_t ctx;           /* KV cache capacity of each slot, in tokens */
    const char *api_key;   /* --api-key; NULL: none */
    const char *api_key_file; /* --api-key-file: more keys, one per line; NULL: none */
    char **api_keys;       /* both together (serve_auth_load); none: no authentication */
    size_t n_api_keys;
    int64_t max_image_memory; /* bytes pictures may hold at once (serve_budget.h) */
    const char *image_dir; /* NULL: local image files are refused */
    int max_images;        /* pictures and videos per request */
    int64_t max_video_frames; /* frames one video part may give */
    int max_video_seconds; /* seconds one video may last (its frames / its fps) */
    size_t max_body;       /* request body bytes */
    int timeout;           /* seconds a connection may stay idle (slow or stalled clients) */
    int request_timeout;   /* seconds from queueing after which a request generates no more
                              tokens (docs/serving.md, "Deadline"); 0: none */
    int max_connections;   /* connections served at once; more are refused by the listener */
    /* Connection handling under hostile clients (docs/serving.md, "Slow and hostile clients"): */
    int max_connections_per_ip; /* connections from one client address at once; 0: no limit */
    int receive_timeout;   /* seconds in which a request must arrive whole (headers and body),
                              from the connection's opening or the previous answer on it */
    const char *allow_host; /* comma-separated Host names answered besides the loopback ones
                               when listening on loopback ("*": any); NULL: none */
    const char *backend, *plugins, *weights; /* as qvl run's --backend, --plugins, --weights */
    const char *kv_type;   /* --kv-type (or -ctk/-ctv when equal); NULL: the backend's default */
    const char *cors;      /* --cors: comma-separated origins answered with CORS headers ("*":
                              any); NULL: no CORS headers, preflights are 405 */
    bool no_slots;         /* --no-slots: GET /slots is 404 */
    const qvl_options *backend_options; /* laid over plugins.yaml (-t); NULL: none */
    const char *gpu_layers, *cpu_backend, *vision_backend; /* as qvl run's -ngl, --cpu-backend,
                                                              --vision-backend */
    bool verbose;
    bool no_webui;         /* --no-webui: GET / is 404 instead of the chat page */
} serve_config;

#endif
