/* Fuzz target: qvl serve's request parser (POST /v1/chat/completions bodies from strangers).
 * Properties: a refused body gives a 400 (413 for a body whose JSON would take too much memory,
 * 500 for memory) with a one-line message and *out NULL; an accepted one has a prompt, at most
 * max_images pictures, stops within their bounds and sampling values the sampler takes, and
 * none of its text holds a vision special token. The JSON is parsed as the server parses it,
 * under the per-thread allocation budget of serve_json.c: cJSON never holds more than the
 * budget, and the value count taken before parsing always covers what cJSON builds (the budget
 * never has to refuse an allocation). Pictures come only from data: URLs here (no --image-dir),
 * so the target touches no file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "qvl/engine_picture.h"
#include "qvl/image_preprocess.h"
#include "qvl/sampling.h"
#include "serve/serve_json.h"
#include "serve/serve_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static qvl_picture_rules *rules;
    static qvl_sampling_params defaults;
    static int ready;
    if (!ready) {
        qvl_vision_config v;
        memset(&v, 0, sizeof v);
        v.patch_size = 16;
        v.temporal_patch_size = 2;
        v.spatial_merge_size = 2;
        qvl_preprocess_config pc;
        qvl_preprocess_config_default(&v, &pc);
        pc.max_pixels = 1 << 18; /* keeps every picture a fuzz input can name cheap */
        rules = qvl_picture_rules_create(&pc);
        FUZZ_CHECK(rules != NULL);
        qvl_sampling_params_default(&defaults);
        ready = 1;
    }
    const serve_parse_ctx ctx = {.defaults = &defaults, .pictures = rules, .image_dir = NULL,
                                 .max_images = 4, .max_file_bytes = 1 << 20, .ctx = 4096};
    /* The JSON step alone, with the allocator's figures. */
    serve_bad bad;
    memset(&bad, 0, sizeof bad);
    serve_json_usage usage;
    cJSON *root = serve_json_parse((const char *)data, size, SERVE_MAX_JSON_DEPTH, &bad, &usage);
    FUZZ_CHECK(usage.peak <= usage.budget);
    FUZZ_CHECK(!usage.exceeded);
    FUZZ_CHECK(root || bad.status == 400 || bad.status == 413 || bad.status == 500);
    cJSON_Delete(root);

    serve_request *r = NULL;
    memset(&bad, 0, sizeof bad);
    bool ok = serve_request_parse((const char *)data, size, &ctx, &r, &bad);
    if (!ok) {
        FUZZ_CHECK(r == NULL);
        FUZZ_CHECK(bad.status == 400 || bad.status == 413 || bad.status == 500);
        FUZZ_CHECK(bad.message[0] != '\0');
        FUZZ_CHECK(strchr(bad.message, '\n') == NULL);
        return 0;
    }
    FUZZ_CHECK(r != NULL && r->gen != NULL && r->gen->prompt != NULL);
    const qvl_engine_request *g = r->gen;
    FUZZ_CHECK(g->n_pictures <= (size_t)ctx.max_images);
    FUZZ_CHECK(g->n_stops <= SERVE_MAX_STOPS);
    for (size_t i = 0; i < g->n_stops; i++)
        FUZZ_CHECK(g->stops[i] && strlen(g->stops[i]) <= SERVE_MAX_STOP_BYTES);
    FUZZ_CHECK(g->sampling.temperature >= 0.0f);
    /* the template writes one vision_start/pad/vision_end per picture, nothing more */
    size_t pads = 0;
    for (const char *p = g->prompt; (p = strstr(p, "<|image_pad|>")) != NULL; p++) pads++;
    FUZZ_CHECK(pads == g->n_pictures);
    FUZZ_CHECK(strstr(g->prompt, "<|video_pad|>") == NULL);
    serve_request_free(r);
    return 0;
}
