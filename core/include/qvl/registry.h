/* The plugin registry: reads plugins.yaml (libyaml), loads backends with dlopen, picks one.
 *
 * plugins.yaml:
 *   backends:
 *     - name: cuda_sm61
 *       library: build/backends/cuda_sm61/libqvl-cuda_sm61.so  # relative to this file, or absolute
 *       priority: 100            # higher is tried first (default 0)
 *       required: false          # true: failing to load is an error, not a skip
 *       fallback: true           # false: this backend must run every node placed on it;
 *                                # a node it refuses is an error, never moved to another
 *       options: { device: 0 }   # passed to the backend's init() as strings
 *
 * Where the file comes from (qvl_plugins_locate): an explicit path (--plugins), else
 * $QVL_PLUGINS, else <exe dir>/../plugins.yaml (the copy CMake writes into the build tree),
 * else the installed default, else a built-in list (reference only); never the current
 * directory. A file named explicitly
 * (--plugins or $QVL_PLUGINS) must exist and parse. When `library` is omitted the backend is
 * looked for as libqvl-<name>.so in the build tree next to the running executable
 * (<exe dir>/../backends/<name>/), then in the install tree (<exe dir>/../lib/qvl/ and the
 * configured install libdir). Nothing is loaded from the current directory or through
 * LD_LIBRARY_PATH: every path handed to dlopen contains a '/'. */
#ifndef QVL_REGISTRY_H
#define QVL_REGISTRY_H

#include <stdbool.h>

#include "qvl/backend_helpers.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_plugin_spec {
    char *name;
    char *library; /* as written (NULL when omitted) */
    long priority;
    bool required;
    /* `fallback: false`: nodes this backend refuses are an error instead of running on the
     * next backend of the file that takes them (zero, the default, allows fallback). */
    bool no_fallback;
    qvl_options options;
    int line; /* line of the entry in the file, 1-based */
} qvl_plugin_spec;

typedef struct qvl_plugin_config {
    char *path; /* the file it was read from (NULL for the built-in fallback) */
    char *dir;  /* its directory, for relative library paths */
    size_t n;
    qvl_plugin_spec *specs; /* sorted by priority, highest first (stable) */
} qvl_plugin_config;

/* Parse a plugins.yaml. Errors name the file, line and column (syntax) or the key/entry. */
qvl_status qvl_plugins_parse_file(const char *path, qvl_plugin_config **out, qvl_error *err);
/* Parse from memory; `path` is used only for messages and relative libraries. */
qvl_status qvl_plugins_parse_string(const char *text, size_t len, const char *path,
                                    qvl_plugin_config **out, qvl_error *err);
void qvl_plugins_free(qvl_plugin_config *cfg);

/* Find and parse the config by the search order above. explicit_path may be NULL. When no
 * file is found anywhere, *out is a built-in config listing only "reference". */
qvl_status qvl_plugins_locate(const char *explicit_path, qvl_plugin_config **out, qvl_error *err);

/* A loaded and initialised backend. */
typedef struct qvl_loaded_backend {
    const qvl_backend_iface *iface;
    qvl_backend *be;
    void *dl_handle;
    char *name;
    char *library_path; /* resolved path that was loaded */
    /* The entry's `weights` option (e.g. f16, q8_0): the dtype the model stores matrix weights
     * in on this backend unless the caller asks for another; NULL when absent. The backend's
     * init sees it too and may ignore it. */
    char *weights;
    /* The entry's `kv_type` option (f32, f16, q8_0): the dtype of the model's KV cache on this
     * backend unless the caller asks for another; NULL when absent. */
    char *kv_type;
    /* The entry's `fallback: false`: the split scheduler gives no node it refuses to another
     * backend (split.h). */
    bool no_fallback;
} qvl_loaded_backend;

/* Resolve the library path of a spec (see search order above). */
qvl_status qvl_plugin_resolve_library(const qvl_plugin_config *cfg, const qvl_plugin_spec *spec,
                                      char **out_path, qvl_error *err);
/* dlopen + entry symbol + ABI check + init. Errors name the file and the reason. */
qvl_status qvl_backend_load(const qvl_plugin_config *cfg, const qvl_plugin_spec *spec,
                            qvl_loaded_backend **out, qvl_error *err);
/* Try backends in priority order: one that fails is skipped, unless it is `required`, with one
 * info-level line naming the reason (seen at -v / QVL_LOG=info; when none loads, the error
 * names them all and the last reason). With force_name (--backend) only that backend
 * is tried (taken from the config if listed there, else found by the default search) and its
 * failure is an error. */
qvl_status qvl_backend_select(const qvl_plugin_config *cfg, const char *force_name,
                              qvl_loaded_backend **out, qvl_error *err);
/* release() and free. The library itself stays mapped until the process exits (backend.h,
 * "Lifetime"). */
void qvl_backend_unload(qvl_loaded_backend *lb);

/* What tools call: locate the config (plugins_path may be NULL) and select a backend
 * (backend_name may be NULL). */
qvl_status qvl_backend_open(const char *plugins_path, const char *backend_name,
                            qvl_loaded_backend **out, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
