/* A plugin built for another backend ABI, whose table is SHORTER than qvl's: only `abi`
 * exists. The registry must refuse it reading nothing but `abi` (under ASan a read of any
 * other field is a global-buffer-overflow). */
#include "qvl/backend.h"

/* The first field of every ABI's table, and nothing else. */
typedef struct short_table {
    uint32_t abi;
} short_table;

static const short_table wrong_abi_table = {QVL_BACKEND_ABI + 1u};

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) {
    return (const qvl_backend_iface *)(const void *)&wrong_abi_table;
}
