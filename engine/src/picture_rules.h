/* The engine's picture rules are the model's preprocessing config (internal). */
#ifndef QVL_ENGINE_PICTURE_RULES_H
#define QVL_ENGINE_PICTURE_RULES_H

#include "qvl/engine_picture.h"
#include "qvl/engine_video.h"
#include "qvl/image_preprocess.h"
#include "qvl/video_preprocess.h"

struct qvl_picture_rules {
    qvl_preprocess_config pc;
};

/* The model's video processor (video_preprocessor_config.json). */
struct qvl_video_rules {
    qvl_video_config vc;
};

static inline qvl_image_grid qvl_picture_grid(const qvl_picture *p) {
    return (qvl_image_grid){.t = p->grid_t, .h = p->grid_h, .w = p->grid_w};
}

#endif
