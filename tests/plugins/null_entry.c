/* A plugin whose entry point returns no table. */
#include <stddef.h>

#include "qvl/backend_helpers.h"

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) { return NULL; }
