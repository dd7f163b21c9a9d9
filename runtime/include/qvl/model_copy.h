/* Copying a model directory's auxiliary files (config.json, tokenizer.json, chat templates...)
 * into a new directory, as qvl quantize and qvl mkmodel do, without copying what a symbolic
 * link planted in the source points at (docs/hostile-input.md, "Files qvl writes").
 *
 * The rule: a file is copied when it resolves (realpath) to a regular file inside the model
 * directory's own resolved path, or, when that directory is a Hugging Face cache snapshot
 * (.../<repo>/snapshots/<revision>), inside that repository's blobs/ directory, where the hub
 * keeps every snapshot's files (snapshots/<revision>/x -> ../../blobs/<hash>). Anything else
 * is refused with a message naming the file and where it leads. The copy keeps the source's
 * permission bits (less the umask), so a private file stays private. Weights are only read,
 * never copied, and may be reached through any link. */
#ifndef QVL_MODEL_COPY_H
#define QVL_MODEL_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies dir/name to `to` (at most max_bytes) under the rule above; *copied says whether it
 * did. A name absent from dir is no error (*copied false). */
qvl_status qvl_model_file_copy(const char *dir, const char *name, const char *to,
                               size_t max_bytes, bool *copied, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
