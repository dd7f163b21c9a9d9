/* The plugin registry: finds plugins.yaml, resolves and dlopens backends, picks one.
 *
 * Every path handed to dlopen contains a '/', so the dynamic loader never searches
 * LD_LIBRARY_PATH or the current directory for a backend. */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/log.h"
#include "qvl/registry.h"

#define BUILTIN_CONFIG "backends:\n  - name: reference\n"

/* printf into a fresh heap string (NULL when out of memory). */
static char *str_printf(const char *fmt, ...) QVL_PRINTF(1, 2);
static char *str_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static char *path_join(const char *dir, const char *name) {
    size_t len = strlen(dir);
    bool has_slash = len > 0 && dir[len - 1] == '/';
    return str_printf("%s%s%s", dir, has_slash ? "" : "/", name);
}

static bool is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Backend names become parts of paths: only letters, digits, '_' and '-'. */
static bool valid_backend_name(const char *s) {
    if (!s || !s[0]) return false;
    for (const char *p = s; *p; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok) return false;
    }
    return true;
}

static qvl_status bad_name(qvl_error *err, const char *name) {
    return qvl_fail(err, QVL_E_INVALID,
                    "backend name '%s' may contain only letters, digits, '_' and '-'",
                    name ? name : "");
}

static char *exe_dir(void);

/* ---- finding plugins.yaml ---------------------------------------------------------------- */

/* A default location counts when something is there (even unreadable: that is reported). */
static bool present(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
}

qvl_status qvl_plugins_locate(const char *explicit_path, qvl_plugin_config **out, qvl_error *err) {
    *out = NULL;
    if (explicit_path) {
        if (!explicit_path[0]) return qvl_fail(err, QVL_E_INVALID, "--plugins: empty path");
        return qvl_plugins_parse_file(explicit_path, out, err);
    }
    const char *env = getenv("QVL_PLUGINS");
    if (env && env[0]) {
        qvl_status st = qvl_plugins_parse_file(env, out, err);
        if (st != QVL_OK) qvl_error_prefix(err, "$QVL_PLUGINS");
        return st;
    }
    /* Never the current directory: a plugins.yaml planted there would choose libraries to
     * load into the process. The build tree's copy sits one level above the executable
     * (build/tools/qvl -> build/plugins.yaml, written by CMake). */
    char *exe = exe_dir();
    char *beside = exe ? str_printf("%s/../plugins.yaml", exe) : NULL;
    free(exe);
    const char *defaults[] = {
        beside,
#ifdef QVL_INSTALL_DATA_DIR
        QVL_INSTALL_DATA_DIR "/plugins.yaml",
#endif
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        if (defaults[i] && present(defaults[i])) {
            qvl_status st = qvl_plugins_parse_file(defaults[i], out, err);
            free(beside);
            return st;
        }
    }
    free(beside);
    qvl_status st =
        qvl_plugins_parse_string(BUILTIN_CONFIG, strlen(BUILTIN_CONFIG), NULL, out, err);
    if (st == QVL_OK) QVL_LOG_D("no plugins.yaml found: using the built-in list (reference)");
    return st;
}

/* ---- resolving a backend's library ------------------------------------------------------- */

/* Directory of the running executable, or NULL when /proc is not there. */
static char *exe_dir(void) {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf);
    if (n <= 0 || (size_t)n >= sizeof buf) return NULL;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    if (slash == buf) slash++; /* the executable sits in / */
    *slash = '\0';
    return strdup(buf);
}

qvl_status qvl_plugin_resolve_library(const qvl_plugin_config *cfg, const qvl_plugin_spec *spec,
                                      char **out_path, qvl_error *err) {
    *out_path = NULL;
    if (!spec || !valid_backend_name(spec->name)) return bad_name(err, spec ? spec->name : NULL);
    const char *name = spec->name;

    if (spec->library) {
        if (!spec->library[0])
            return qvl_fail(err, QVL_E_INVALID, "backend '%s': library path is empty", name);
        if (spec->library[0] == '/') {
            *out_path = strdup(spec->library);
        } else {
            if (!cfg || !cfg->dir)
                return qvl_fail(err, QVL_E_INVALID,
                                "backend '%s': library '%s' is relative but there is no "
                                "plugins file to resolve it against",
                                name, spec->library);
            *out_path = path_join(cfg->dir, spec->library);
        }
        return *out_path ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }

    /* No `library`: the build tree next to the executable, then the install trees. */
    char *dirs[3] = {NULL, NULL, NULL};
    size_t n_dirs = 0;
    char *exe = exe_dir();
    if (exe) {
        dirs[n_dirs++] = str_printf("%s/../backends/%s", exe, name);
        dirs[n_dirs++] = str_printf("%s/../lib/qvl", exe);
        free(exe);
    }
#ifdef QVL_INSTALL_PLUGIN_DIR
    dirs[n_dirs++] = strdup(QVL_INSTALL_PLUGIN_DIR);
#endif
    char *file = str_printf("libqvl-%s.so", name);
    qvl_status st = file ? QVL_OK : QVL_E_NOMEM;
    for (size_t i = 0; i < n_dirs && st == QVL_OK && !*out_path; i++) {
        if (!dirs[i]) {
            st = QVL_E_NOMEM;
            break;
        }
        char *candidate = path_join(dirs[i], file);
        if (!candidate) {
            st = QVL_E_NOMEM;
        } else if (is_regular_file(candidate)) {
            *out_path = candidate;
        } else {
            QVL_LOG_D("backend '%s': no %s", name, candidate);
            free(candidate);
        }
    }
    if (st == QVL_E_NOMEM) {
        qvl_fail(err, QVL_E_NOMEM, "out of memory");
    } else if (!*out_path) {
        char looked[768] = "";
        size_t used = 0;
        for (size_t i = 0; i < n_dirs && used < sizeof looked; i++) {
            int w = snprintf(looked + used, sizeof looked - used, "%s%s", i ? ", " : "", dirs[i]);
            if (w > 0) used += (size_t)w;
        }
        st = qvl_fail(err, QVL_E_NOT_FOUND, "backend '%s': %s not found (looked in %s)", name,
                      file, n_dirs ? looked : "no directory");
    }
    free(file);
    for (size_t i = 0; i < n_dirs; i++) free(dirs[i]);
    return st;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* Which mandatory entry of the table is NULL, if any. */
static const char *missing_function(const qvl_backend_iface *t) {
    if (!t->init) return "init";
    if (!t->release) return "release";
    if (!t->describe) return "describe";
    if (!t->buffer_alloc) return "buffer_alloc";
    if (!t->buffer_free) return "buffer_free";
    if (!t->upload) return "upload";
    if (!t->download) return "download";
    if (!t->synchronize) return "synchronize";
    if (!t->ops) return "ops";
    return NULL;
}

/* dlerror() usually starts with the path; drop it since our messages already name it. */
static const char *dl_reason(const char *path) {
    const char *msg = dlerror();
    if (!msg) return "unknown dlopen error";
    size_t len = strlen(path);
    if (strncmp(msg, path, len) == 0 && msg[len] == ':') {
        msg += len + 1;
        while (*msg == ' ') msg++;
    }
    return msg;
}

/* Opens and checks the table; on success *dl and *iface are set and the library stays open. */
static qvl_status open_plugin(const char *path, const char *name, void **dl_out,
                              const qvl_backend_iface **iface_out, qvl_error *err) {
    if (!strchr(path, '/'))
        return qvl_fail(err, QVL_E_INVALID, "%s: refusing a library path without a '/'", path);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return qvl_fail(err, e == ENOENT ? QVL_E_NOT_FOUND : QVL_E_IO,
                        "%s: cannot access the library of backend '%s': %s", path, name,
                        strerror(e));
    }
    /* dlopen of a FIFO or a device blocks or reads forever: only regular files are libraries */
    if (!S_ISREG(sb.st_mode))
        return qvl_fail(err, QVL_E_INVALID, "%s: the library of backend '%s' is not a regular file",
                        path, name);
    dlerror();
    /* RTLD_NODELETE: a plugin's code stays mapped until the process exits, whatever dlclose
     * is called later, so threads a backend leaves behind (OpenMP, BLAS pools) and its
     * destructors at exit never jump into unmapped pages (backend.h, "Lifetime"). */
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!dl) return qvl_fail(err, QVL_E_IO, "%s: cannot load: %s", path, dl_reason(path));

    qvl_status st = QVL_OK;
    void *sym = dlsym(dl, QVL_BACKEND_ENTRY_SYMBOL);
    const qvl_backend_iface *t = NULL;
    if (!sym) {
        st = qvl_fail(err, QVL_E_ABI, "%s: not a qvl backend (no %s symbol)", path,
                      QVL_BACKEND_ENTRY_SYMBOL);
    } else {
        qvl_backend_entry_fn entry;
        memcpy(&entry, &sym, sizeof entry); /* object pointer to function pointer, POSIX-style */
        t = entry();
        /* abi first: a table built for another ABI may be shorter than ours, so no other
         * field is read before it matches. */
        if (!t)
            st = qvl_fail(err, QVL_E_ABI, "%s: %s() returned NULL", path,
                          QVL_BACKEND_ENTRY_SYMBOL);
        else if (t->abi != QVL_BACKEND_ABI)
            st = qvl_fail(err, QVL_E_ABI, "%s: built for backend ABI %u, qvl expects %u", path,
                          (unsigned)t->abi, (unsigned)QVL_BACKEND_ABI);
        else if (!t->name || strcmp(t->name, name) != 0)
            st = qvl_fail(err, QVL_E_ABI, "%s: backend calls itself '%s' but is listed as '%s'",
                          path, t->name ? t->name : "(no name)", name);
        else if (missing_function(t))
            st = qvl_fail(err, QVL_E_ABI, "%s: backend table has no %s", path,
                          missing_function(t));
    }
    if (st != QVL_OK) {
        dlclose(dl);
        return st;
    }
    *dl_out = dl;
    *iface_out = t;
    return QVL_OK;
}

qvl_status qvl_backend_load(const qvl_plugin_config *cfg, const qvl_plugin_spec *spec,
                            qvl_loaded_backend **out, qvl_error *err) {
    *out = NULL;
    char *path = NULL;
    qvl_status st = qvl_plugin_resolve_library(cfg, spec, &path, err);
    if (st != QVL_OK) return st;

    void *dl = NULL;
    const qvl_backend_iface *iface = NULL;
    st = open_plugin(path, spec->name, &dl, &iface, err);
    if (st != QVL_OK) {
        free(path);
        return st;
    }

    qvl_loaded_backend *lb = calloc(1, sizeof *lb);
    char *name = strdup(spec->name);
    if (!lb || !name) {
        free(lb);
        free(name);
        dlclose(dl);
        st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
        free(path);
        return st;
    }

    qvl_error why;
    qvl_error_clear(&why);
    qvl_backend *be = NULL;
    st = iface->init(&spec->options, &be, &why);
    if (st != QVL_OK) {
        qvl_fail(err, st, "%s: init failed: %s", path,
                 why.msg[0] ? why.msg : qvl_status_str(st));
        free(lb);
        free(name);
        free(path);
        dlclose(dl);
        return st;
    }
    lb->iface = iface;
    lb->be = be;
    lb->dl_handle = dl;
    lb->name = name;
    lb->library_path = path;
    lb->no_fallback = spec->no_fallback;
    const char *weights = qvl_options_get(&spec->options, "weights");
    const char *kv_type = qvl_options_get(&spec->options, "kv_type");
    if ((weights && !(lb->weights = strdup(weights))) ||
        (kv_type && !(lb->kv_type = strdup(kv_type)))) {
        qvl_backend_unload(lb);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    }
    *out = lb;
    return QVL_OK;
}

void qvl_backend_unload(qvl_loaded_backend *lb) {
    if (!lb) return;
    if (lb->iface) lb->iface->release(lb->be);
    if (lb->dl_handle) dlclose(lb->dl_handle);
    free(lb->name);
    free(lb->library_path);
    free(lb->weights);
    free(lb->kv_type);
    free(lb);
}

/* ---- choosing one ------------------------------------------------------------------------- */

/* Warnings are one line: flatten any newline a backend put in its message. */
static void one_line(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\r') *s = ' ';
}

/* The warning names the backend already: drop a "backend 'x': " the reason may start with. */
static const char *skip_name_prefix(const char *msg, const char *name) {
    char prefix[160];
    snprintf(prefix, sizeof prefix, "backend '%s': ", name);
    size_t len = strlen(prefix);
    return strncmp(msg, prefix, len) == 0 ? msg + len : msg;
}

qvl_status qvl_backend_select(const qvl_plugin_config *cfg, const char *force_name,
                              qvl_loaded_backend **out, qvl_error *err) {
    *out = NULL;
    if (!cfg) return qvl_fail(err, QVL_E_INVALID, "no plugin configuration given");

    if (force_name) {
        if (!valid_backend_name(force_name)) return bad_name(err, force_name);
        for (size_t i = 0; i < cfg->n; i++)
            if (strcmp(cfg->specs[i].name, force_name) == 0)
                return qvl_backend_load(cfg, &cfg->specs[i], out, err);
        /* Not listed: found by the default search, with no options. */
        qvl_plugin_spec spec = {0};
        spec.name = (char *)force_name;
        spec.required = true;
        return qvl_backend_load(cfg, &spec, out, err);
    }

    if (cfg->n == 0) return qvl_fail(err, QVL_E_NOT_FOUND, "no usable backend (none listed)");
    char tried[768] = "";
    qvl_error last; /* the last backend's reason, for the error when none loads */
    qvl_error_clear(&last);
    const char *last_name = "";
    size_t used = 0;
    for (size_t i = 0; i < cfg->n; i++) {
        const qvl_plugin_spec *spec = &cfg->specs[i];
        qvl_error why;
        qvl_error_clear(&why);
        qvl_status st = qvl_backend_load(cfg, spec, out, &why);
        if (st == QVL_OK) return QVL_OK;
        one_line(why.msg);
        const char *reason = skip_name_prefix(why.msg, spec->name);
        if (spec->required) {
            if (cfg->path)
                return qvl_fail(err, st, "required backend '%s' (%s:%d): %s", spec->name,
                                cfg->path, spec->line, why.msg);
            return qvl_fail(err, st, "required backend '%s': %s", spec->name, why.msg);
        }
        /* Skipping is by design (a GPU backend listed first on a machine without one): only
         * -v / QVL_LOG=info says so, once, in one line. */
        QVL_LOG_I("backend %s skipped: %s", spec->name, reason);
        last = why;
        last_name = spec->name;
        if (used < sizeof tried) {
            int w = snprintf(tried + used, sizeof tried - used, "%s%s", i ? ", " : "",
                             spec->name);
            if (w > 0) used += (size_t)w;
        }
    }
    return qvl_fail(err, QVL_E_NOT_FOUND, "no usable backend (tried: %s); %s: %s", tried,
                    last_name, skip_name_prefix(last.msg, last_name));
}

qvl_status qvl_backend_open(const char *plugins_path, const char *backend_name,
                            qvl_loaded_backend **out, qvl_error *err) {
    *out = NULL;
    qvl_plugin_config *cfg = NULL;
    qvl_status st = qvl_plugins_locate(plugins_path, &cfg, err);
    if (st != QVL_OK) return st;
    st = qvl_backend_select(cfg, backend_name, out, err);
    if (st == QVL_OK)
        QVL_LOG_I("backend %s (%s), plugins from %s", (*out)->name, (*out)->library_path,
                  cfg->path ? cfg->path : "the built-in list");
    /* The options live in cfg: a backend must copy what it keeps beyond init(). */
    qvl_plugins_free(cfg);
    return st;
}
