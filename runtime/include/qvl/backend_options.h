/* Opening a backend with options from the caller laid over those plugins.yaml gives it.
 *
 * A program may set backend options itself (qvl-bench's sweeps, a server's settings); they
 * win over the file's options of the same key, key by key, for every listed backend. A
 * backend_name that plugins.yaml does not list is still found by the registry's default search
 * and gets just the caller's options. */
#ifndef QVL_BACKEND_OPTIONS_H
#define QVL_BACKEND_OPTIONS_H

#include "qvl/backend.h"
#include "qvl/registry.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Like qvl_backend_open (plugins_path NULL: the default search; backend_name NULL: by
 * priority), with extra laid over every candidate's options. extra NULL or empty is exactly
 * qvl_backend_open. extra only needs to live until this returns (the backend's init copies
 * its options). */
qvl_status qvl_backend_open_with_options(const char *plugins_path, const char *backend_name,
                                         const qvl_options *extra, qvl_loaded_backend **out,
                                         qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
