/* A plugin of the right ABI whose table lacks mandatory functions (only init is set). */
#include "qvl/backend_helpers.h"

static qvl_status incomplete_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    (void)opts;
    (void)err;
    *out = NULL;
    return QVL_OK;
}

static const qvl_backend_iface incomplete_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = "incomplete",
    .description = "registry test: table without release, buffers or kernels",
    .init = incomplete_init,
};

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) { return &incomplete_iface; }
