/* What happens when a mapped model file shrinks under a running qvl.
 *
 * Weights are read in place from file mappings. If another program truncates or rewrites the
 * file (`cp` over it, an interrupted re-download), pages past the new end can no longer be
 * read and the kernel delivers SIGBUS at the next access, from whichever thread touches them.
 * qvl then cannot continue: the weights it was computing with are gone. Instead of dying with
 * "Bus error" it prints one line naming the file and exits with status 1. Replacing a model
 * with `mv` (a new inode) is safe: the running process keeps reading the old file.
 *
 * Every mapping registers itself here; a SIGBUS inside a registered range prints that
 * mapping's message, any other SIGBUS gets the default action. */
#ifndef QVL_MAPPED_FILES_H
#define QVL_MAPPED_FILES_H

#include <stddef.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers [addr, addr+len) as a mapping of path (installs the handler on first use).
 * Returns a slot for qvl_mapped_forget, or -1 when all slots are taken (the mapping then
 * just lacks the friendly message). */
int qvl_mapped_register(const void *addr, size_t len, const char *path);
/* Unregisters slot (before munmap). -1 is ignored. */
void qvl_mapped_forget(int slot);

/* Maps the regular file at path read-only and registers the mapping: *map, *size, *slot. An
 * empty file gives *map NULL and *size 0 (nothing to map; the caller's size check refuses it).
 * Errors name the path: QVL_E_NOT_FOUND, QVL_E_IO (not a regular file, cannot map),
 * QVL_E_LIMIT (larger than the address space). */
qvl_status qvl_mapped_open(const char *path, unsigned char **map, size_t *size, int *slot,
                           qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
