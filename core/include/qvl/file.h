/* Reading a whole file that comes from a stranger: config.json, tokenizer.json, plugins.yaml,
 * pictures. Only a regular file is read (a FIFO or a device would block the reader or never
 * end), never more than a stated number of bytes, so a bad path costs one error line. */
#ifndef QVL_FILE_H
#define QVL_FILE_H

#include <stddef.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the regular file at `path` into *out (malloc'ed, NUL-terminated after the *out_len
 * bytes; free() it), at most max_bytes of it. A directory, FIFO, socket or device is refused
 * without reading (QVL_E_IO, "PATH: not a regular file (a FIFO)"), as is a file of more than
 * max_bytes bytes (QVL_E_LIMIT, the message names the limit). A path that does not exist returns
 * `if_missing` (loaders differ: an optional file's absence is QVL_E_NOT_FOUND, a required one's
 * QVL_E_IO); other open or read failures return QVL_E_IO. Every message starts with the path.
 * On failure *out is NULL and *out_len 0. */
qvl_status qvl_read_file(const char *path, size_t max_bytes, qvl_status if_missing, char **out,
                         size_t *out_len, qvl_error *err);

/* dir + "/" + name (no second '/' when dir ends with one), malloc'ed; NULL when out of
 * memory. */
char *qvl_path_join(const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif
