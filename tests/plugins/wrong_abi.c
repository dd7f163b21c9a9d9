/* A plugin that claims a newer backend ABI than qvl's: the registry must refuse it before
 * touching anything else in the table. */
#include "qvl/backend.h"

static const qvl_backend_iface wrong_abi_iface = {
    .abi = QVL_BACKEND_ABI + 1u,
    .name = "wrong_abi",
    .description = "registry test: built for another ABI",
};

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) { return &wrong_abi_iface; }
