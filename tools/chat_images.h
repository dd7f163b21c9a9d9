/* The pictures of several chat messages as one run_images: after the context is rebuilt the
 * prompt holds the pictures of every message kept, and run_encode_text / run_generate take one
 * run_images whose pictures are in prompt order. */
#ifndef QVL_TOOLS_CHAT_IMAGES_H
#define QVL_TOOLS_CHAT_IMAGES_H

#include "run_images.h"

/* out gets n, grids, tokens, total_tokens, pad_id and pc of parts[0..n_parts) in order, and
 * with with_features their encoded features concatenated (every part must be encoded). Parts
 * without pictures are skipped. Free out with run_images_free. */
qvl_status chat_images_join(run_images *const *parts, size_t n_parts, bool with_features,
                            run_images *out, qvl_error *err);

#endif
