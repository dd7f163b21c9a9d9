/* The size window a picture is resized into: the image processor's bounds with the user's
 * --max-pixels / --min-pixels / --image-max-tokens / --image-min-tokens over them, and with no
 * flag for the largest size the default token budget (RUN_IMAGE_MAX_TOKENS_DEFAULT). */
#ifndef QVL_TOOLS_IMAGE_BOUNDS_H
#define QVL_TOOLS_IMAGE_BOUNDS_H

#include <stddef.h>

#include "qvl/status.h"
#include "qvl/image_preprocess.h"
#include "run_args.h"

/* Sets pc->min_pixels and pc->max_pixels from b (source names the processor's file in
 * messages); cap_what gets what bounds the largest size, for messages. A bound the user gave
 * wins over one they did not; two of theirs that cross are an error. */
qvl_status image_bounds_resolve(const run_image_bounds *b, const char *source,
                                qvl_preprocess_config *pc, char *cap_what, size_t cap_size,
                                qvl_error *err);

#endif
