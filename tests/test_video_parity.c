/* Video parity with Hugging Face transformers on the committed fixtures (fixture_videos.json in
 * each tests/fixtures model directory and the frames under tests/fixtures/videos, made by
 * scripts/make_video_fixtures.py), stage by stage, with the tolerances of the image parity
 * test (test_vision_parity.c):
 *
 *  0. the prompt: our frame sampling, timestamps, prompt text, tokenizer and pad expansion give
 *     transformers' input ids exactly; our grids and 3-D positions equal its video_grid_thw and
 *     get_rope_index;
 *  1. pixel_values_videos: our PNG decoding + video preprocessing of the kept frames, each
 *     element within one quantisation step and at most 1% of them differing; for the file case
 *     (vid_file) the frames come from qvl_video_decode_file with our sampling, against
 *     transformers' PyAV loader (same frame count and rate);
 *  2. the vision encoder on transformers' pixel values (a t > 1 grid): merger and deepstack
 *     outputs within 1e-4 x max|HF|;
 *  3. end to end from our pixels (pictures and the video encoded together): the logits of the
 *     prompt's last rows within 1e-4 x max|logit| with an f32 KV cache (2e-3 with f16, as the
 *     image test) and the greedy tokens identical.
 * Stages 2 and 3 run on each backend that loads (parity_backends.h: $QVL_PARITY_BACKENDS picks
 * them, e.g. cuda_sm61 on the GPU machine). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "qvl/image.h"
#include "qvl/mm_prompt.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/tokenizer.h"
#include "qvl/video_decode.h"
#include "qvl/video_preprocess.h"
#include "parity_backends.h"
#include "parity_cases.h"

#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures"
static const char *const models[] = {"tiny-tied", "tiny-untied"};
#define PIXEL_STEP (1.0 / 127.5)
#define PIXEL_MAX_DIFFERING 0.01
#define VISION_RTOL 1e-4
#define LOGIT_RTOL 1e-4
#define LOGIT_RTOL_KV_F16 2e-3
#define MAX_MEDIA 4

static parity_backends list;

static qvl_image_grid json_grid(const cJSON *g) {
    return (qvl_image_grid){(int64_t)cJSON_GetArrayItem(g, 0)->valuedouble,
                            (int64_t)cJSON_GetArrayItem(g, 1)->valuedouble,
                            (int64_t)cJSON_GetArrayItem(g, 2)->valuedouble};
}

/* One case through our side: the pictures and the video preprocessed (pictures first, as the
 * fixtures place them), the grids, the kept indices and the prompt ids. */
typedef struct our_case {
    size_t n_media;
    qvl_image_grid grids[MAX_MEDIA];
    bool is_video[MAX_MEDIA];
    float *pixels;
    int64_t rows, width, video_row0;
    int32_t *ids;
    int64_t n_ids;
} our_case;

static void append_pixels(our_case *o, const float *px, qvl_image_grid g, bool video) {
    assert_true(o->n_media < MAX_MEDIA);
    const int64_t r = g.t * g.h * g.w;
    o->pixels = realloc(o->pixels, (size_t)((o->rows + r) * o->width) * sizeof(float));
    memcpy(o->pixels + o->rows * o->width, px, (size_t)(r * o->width) * sizeof(float));
    if (video) o->video_row0 = o->rows;
    o->rows += r;
    o->grids[o->n_media] = g;
    o->is_video[o->n_media++] = video;
}

static qvl_status pick_sampled(void *arg, int64_t n_total, double fps, int64_t *idx, int64_t *n,
                               qvl_error *err) {
    return qvl_video_sample_frames(n_total, fps, arg, idx, n, err);
}

/* A file case: qvl_video_decode_file with the processor's sampling; its frame count and rate
 * must be the ones transformers' PyAV loader read. *frames holds the kept frames. */
static int64_t *decode_file_case(const char *dir, const cJSON *c, const qvl_video_config *vc,
                                 int64_t *n_kept, qvl_video_frames *frames) {
    char path[1024];
    qvl_error err = {0};
    snprintf(path, sizeof path, "%s/%s", dir, parity_item(c, "video_file")->valuestring);
    if (qvl_video_decode_file(path, NULL, pick_sampled, (void *)vc, frames, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(frames->n_total, parity_num(c, "total_num_frames"));
    assert_true(frames->fps == parity_item(c, "fps")->valuedouble);
    int64_t *idx = calloc((size_t)frames->n, sizeof *idx);
    memcpy(idx, frames->indices, (size_t)frames->n * sizeof *idx);
    *n_kept = frames->n;
    return idx;
}

static void run_our_side(const char *dir, const cJSON *c, our_case *o) {
    memset(o, 0, sizeof *o);
    const char *name = parity_item(c, "name")->valuestring;
    char path[1024];
    qvl_error err = {0};
    qvl_qwen3vl_config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(qvl_qwen3vl_config_load(path, &cfg, &err), QVL_OK);
    qvl_preprocess_config pc;
    qvl_video_config vc;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    if (qvl_preprocess_config_load(path, &cfg.vision, &pc, &err)) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/video_preprocessor_config.json", dir);
    if (qvl_video_config_load(path, &cfg.vision, &vc, &err)) fail_msg("%s", err.msg);
    o->width = 3 * pc.temporal_patch_size * pc.patch_size * pc.patch_size;

    int64_t image_tokens[MAX_MEDIA];
    size_t n_images = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, parity_item(c, "pictures")) {
        snprintf(path, sizeof path, "%s/%s", dir, p->valuestring);
        qvl_image im;
        float *px = NULL;
        qvl_image_grid g;
        if (qvl_image_load(path, &im, &err) || qvl_image_preprocess(&im, &pc, &px, &g, &err))
            fail_msg("%s: %s", path, err.msg);
        append_pixels(o, px, g, false);
        image_tokens[n_images++] = qvl_image_grid_tokens(&g, pc.merge_size);
        free(px);
        qvl_image_free(&im);
    }

    /* Frame sampling and the frames' pixels (a file case: decoded by qvl_video_decode_file). */
    const cJSON *frames = parity_item(c, "frames");
    const int n_frames_json = cJSON_GetArraySize(frames);
    const int64_t n_total = n_frames_json > 0 ? n_frames_json : 1;
    const double fps = parity_item(c, "fps")->valuedouble;
    const bool file_case = cJSON_IsString(cJSON_GetObjectItem(c, "video_file"));
    qvl_video_frames decoded = {0};
    assert_true(n_frames_json > 0 || file_case);
    int64_t *idx = NULL, n_kept = 0;
    if (file_case) {
        idx = decode_file_case(dir, c, &vc, &n_kept, &decoded);
    } else {
        idx = calloc((uint32_t)n_total, sizeof *idx);
        if (qvl_video_sample_frames(n_total, fps, &vc, idx, &n_kept, &err)) fail_msg("%s", err.msg);
    }
    const cJSON *want_idx = parity_item(c, "sampled_indices");
    assert_int_equal(n_kept, cJSON_GetArraySize(want_idx));
    for (int64_t i = 0; i < n_kept; i++)
        if (idx[i] != (int64_t)cJSON_GetArrayItem(want_idx, (int)i)->valuedouble)
            fail_msg("%s %s: kept frame %lld is %lld", dir, name, (long long)i, (long long)idx[i]);
    qvl_image *imgs = file_case ? decoded.frames : calloc((uint32_t)n_kept, sizeof *imgs);
    for (int64_t i = 0; !file_case && i < n_kept; i++) {
        snprintf(path, sizeof path, "%s/videos/%s/%s", FIXTURES,
                 parity_item(c, "video")->valuestring,
                 cJSON_GetArrayItem(frames, (int)idx[i])->valuestring);
        if (qvl_image_load(path, &imgs[i], &err)) fail_msg("%s", err.msg);
    }
    float *px = NULL;
    qvl_image_grid vg;
    if (qvl_video_preprocess(imgs, (size_t)n_kept, &vc, &px, &vg, &err)) fail_msg("%s", err.msg);
    qvl_image_grid want = json_grid(cJSON_GetArrayItem(parity_item(c, "video_grid_thw"), 0));
    if (vg.t != want.t || vg.h != want.h || vg.w != want.w)
        fail_msg("%s %s: grid %lldx%lldx%lld, transformers %lldx%lldx%lld", dir, name,
                 (long long)vg.t, (long long)vg.h, (long long)vg.w, (long long)want.t,
                 (long long)want.h, (long long)want.w);
    append_pixels(o, px, vg, true);
    free(px);
    if (file_case) {
        qvl_video_frames_free(&decoded);
    } else {
        for (int64_t i = 0; i < n_kept; i++) qvl_image_free(&imgs[i]);
        free(imgs);
    }

    /* The prompt: timestamps into the text, tokenize, then the pads to their counts. */
    double *secs = malloc((size_t)vg.t * sizeof *secs);
    char *vtext = NULL, *full = NULL;
    if (qvl_video_timestamps(idx, n_kept, fps, pc.temporal_patch_size, secs, &err) ||
        qvl_video_prompt_text(secs, vg.t, &vtext, &err))
        fail_msg("%s", err.msg);
    const char *texts[1] = {vtext};
    if (qvl_video_expand_text(parity_item(c, "text")->valuestring, texts, 1, &full, &err))
        fail_msg("%s", err.msg);
    qvl_tokenizer *tok = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(qvl_tokenizer_load(path, &tok, &err), QVL_OK);
    int32_t *ids = NULL, *step = NULL;
    size_t n = 0;
    assert_int_equal(qvl_tokenizer_encode(tok, full, strlen(full), &ids, &n, &err), QVL_OK);
    int64_t n1 = 0, group_tokens[4096];
    assert_true(vg.t <= 4096);
    for (int64_t gi = 0; gi < vg.t; gi++) group_tokens[gi] = vg.h * vg.w / (pc.merge_size * pc.merge_size);
    if (qvl_expand_image_pads(ids, (int64_t)n, (int32_t)cfg.image_token_id, image_tokens,
                              n_images, &step, &n1, &err) ||
        qvl_expand_image_pads(step, n1, (int32_t)cfg.video_token_id, group_tokens,
                              (size_t)vg.t, &o->ids, &o->n_ids, &err))
        fail_msg("%s %s: %s", dir, name, err.msg);
    free(step);
    free(ids);
    qvl_tokenizer_free(tok);
    free(full);
    free(vtext);
    free(secs);
    free(idx);
}

/* Stages 0 and 1 (no model). */
static void check_prompt_and_pixels(const char *dir, const cJSON *c) {
    const char *name = parity_item(c, "name")->valuestring;
    our_case o;
    run_our_side(dir, c, &o);
    int64_t n_prompt;
    int32_t *want = parity_json_ids(parity_item(c, "prompt_ids"), &n_prompt);
    if (o.n_ids != n_prompt) fail_msg("%s %s: %lld ids, transformers %lld", dir, name,
                                      (long long)o.n_ids, (long long)n_prompt);
    for (int64_t i = 0; i < n_prompt; i++)
        if (o.ids[i] != want[i])
            fail_msg("%s %s: id %lld is %d, transformers %d", dir, name, (long long)i, o.ids[i],
                     want[i]);
    /* Positions of the whole prompt, from position 0. */
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    qvl_qwen3vl_config cfg;
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_config_load(path, &cfg, &err), QVL_OK);
    int32_t *pos = malloc((size_t)(3 * n_prompt) * sizeof *pos);
    int64_t next = 0;
    if (qvl_mrope_positions_media(o.ids, n_prompt, (int32_t)cfg.image_token_id,
                                  (int32_t)cfg.video_token_id, o.grids, o.is_video, o.n_media,
                                  cfg.vision.spatial_merge_size, 0, pos, &next, &err))
        fail_msg("%s %s: %s", dir, name, err.msg);
    const cJSON *hp = parity_item(c, "positions");
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < n_prompt; i++) {
            int32_t w = (int32_t)cJSON_GetArrayItem(cJSON_GetArrayItem(hp, a), (int)i)->valuedouble;
            if (pos[a * n_prompt + i] != w)
                fail_msg("%s %s: position axis %d token %lld is %d, transformers %d", dir, name, a,
                         (long long)i, pos[a * n_prompt + i], w);
        }
    assert_int_equal(next - n_prompt, parity_num(c, "rope_delta"));
    printf("%s %s: %lld prompt ids, grids and positions as transformers\n", dir, name,
           (long long)n_prompt);

    const cJSON *pf = cJSON_GetObjectItem(c, "pixels_file");
    if (cJSON_IsString(pf)) {
        const int64_t vrows = o.rows - o.video_row0;
        const size_t count = (size_t)(vrows * o.width);
        uint8_t *codes = parity_read_exact(dir, pf->valuestring, count);
        double max_diff = 0;
        size_t differing = 0;
        for (size_t i = 0; i < count; i++) {
            float hf = ((float)codes[i] - 127.5f) / 127.5f;
            double d = fabs((double)o.pixels[o.video_row0 * o.width + (int64_t)i] - hf);
            max_diff = fmax(max_diff, d);
            differing += d > 1e-6;
        }
        printf("%s %s: pixel_values_videos max diff %.3g (one step %.3g), %zu of %zu differ\n",
               dir, name, max_diff, PIXEL_STEP, differing, count);
        assert_true(max_diff <= PIXEL_STEP + 1e-6);
        assert_true((double)differing <= PIXEL_MAX_DIFFERING * (double)count);
        free(codes);
    }
    free(pos);
    free(want);
    free(o.ids);
    free(o.pixels);
}

/* Stages 2 and 3 on one backend; false when the backend cannot run them. */
static bool check_model(const char *dir, const char *backend, const cJSON *c) {
    const char *name = parity_item(c, "name")->valuestring;
    qvl_error err = {0};
    qvl_model *m = NULL;
    qvl_model_options mo = parity_model_options(backend, 128);
    assert_int_equal(qvl_model_open(dir, &mo, &m, &err), QVL_OK);
    const int64_t K = parity_num(c, "n_visual_tokens"), n_ds = parity_num(c, "n_deepstack");
    const int64_t D = qvl_model_config(m)->text.hidden_size;
    our_case o;
    run_our_side(dir, c, &o);
    float *hf_vis = parity_read_exact(dir, parity_item(c, "vision_file")->valuestring,
                                      (size_t)((1 + n_ds) * K * D) * sizeof(float));
    qvl_image_features f;
    qvl_status st;
    char what[1024];

    /* Stage 2: the encoder on transformers' pixel values of the video alone. */
    const cJSON *pf = cJSON_GetObjectItem(c, "pixels_file");
    if (cJSON_IsString(pf)) {
        assert_int_equal(o.n_media, 1);
        const size_t count = (size_t)(o.rows * o.width);
        uint8_t *codes = parity_read_exact(dir, pf->valuestring, count);
        float *hf_px = malloc(count * sizeof *hf_px);
        for (size_t i = 0; i < count; i++) hf_px[i] = ((float)codes[i] - 127.5f) / 127.5f;
        free(codes);
        st = qvl_model_encode_images(m, hf_px, 1, o.grids, &f, &err);
        free(hf_px);
        if (parity_unsupported(&list, backend, "video", st, &err)) {
            free(hf_vis);
            free(o.pixels);
            free(o.ids);
            qvl_model_close(m);
            return false;
        }
        if (st != QVL_OK) fail_msg("%s %s on %s: %s", dir, name, backend, err.msg);
        snprintf(what, sizeof what, "%s %s on %s", dir, name, backend);
        parity_compare_features(what, &f, hf_vis, K, D, n_ds, VISION_RTOL);
        qvl_image_features_free(&f);
    }

    /* Stage 3: end to end from our pixels, all media in one encode. */
    st = qvl_model_encode_images(m, o.pixels, o.n_media, o.grids, &f, &err);
    if (st != QVL_OK) fail_msg("%s %s on %s: %s", dir, name, backend, err.msg);
    assert_int_equal(f.n_tokens, K);
    const int64_t n_prompt = o.n_ids, vocab = parity_num(c, "vocab");
    const int64_t rows = parity_num(c, "logits_rows");
    int64_t n_greedy;
    int32_t *expect = parity_json_ids(parity_item(c, "greedy_ids"), &n_greedy);
    float *hf = parity_read_exact(dir, parity_item(c, "logits_file")->valuestring,
                           (size_t)(rows * vocab) * sizeof(float));
    int32_t *pos = malloc((size_t)(3 * n_prompt) * sizeof *pos);
    if (qvl_model_positions_media(m, o.ids, n_prompt, o.grids, o.is_video, o.n_media, pos, &err))
        fail_msg("%s %s: %s", dir, name, err.msg);
    float *logits = malloc((size_t)(n_prompt * vocab) * sizeof *logits);
    int32_t *got = calloc((size_t)n_greedy, sizeof *got);
    int64_t n_generated = 0;
    st = parity_greedy(m, o.ids, n_prompt, pos, &f, vocab, n_greedy, logits, got, &n_generated,
                       &err);
    bool skip_backend = parity_unsupported(&list, backend, "video", st, &err);
    if (st != QVL_OK && !skip_backend) fail_msg("%s %s on %s: %s", dir, name, backend, err.msg);
    if (!skip_backend) {
        assert_int_equal(n_generated, n_greedy);
        snprintf(what, sizeof what, "%s %s on %s, %s KV: last %lld rows of logits", dir, name,
                 backend, parity_kv_is_f32() ? "f32" : "f16", (long long)rows);
        parity_compare_block(what, logits + (n_prompt - rows) * vocab, hf, (size_t)(rows * vocab),
                      parity_kv_is_f32() ? LOGIT_RTOL : LOGIT_RTOL_KV_F16);
        for (int64_t i = 0; i < n_greedy; i++)
            if (got[i] != expect[i])
                fail_msg("%s %s on %s: greedy token %lld is %d, transformers gave %d", dir, name,
                         backend, (long long)i, got[i], expect[i]);
    }
    free(got);
    free(logits);
    free(pos);
    free(hf);
    free(expect);
    free(hf_vis);
    qvl_image_features_free(&f);
    free(o.pixels);
    free(o.ids);
    qvl_model_close(m);
    return !skip_backend;
}

/* A file case needs FFmpeg; a build without it leaves those cases out (test_video_decode
 * checks the line that says so). */
static bool case_runs(const cJSON *c) {
    return !cJSON_IsString(cJSON_GetObjectItem(c, "video_file")) || qvl_video_decoder_available();
}

static cJSON *load_fixture(const char *dir, char **text) {
    char path[600];
    snprintf(path, sizeof path, "%s/fixture_videos.json", dir);
    *text = parity_read_file(path, NULL);
    if (!*text) fail_msg("%s: missing (scripts/make_video_fixtures.py makes it)", path);
    cJSON *fx = cJSON_Parse(*text);
    assert_non_null(fx);
    return fx;
}

static void test_prompt_and_pixels(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char dir[512], *text = NULL;
        snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[i]);
        cJSON *fx = load_fixture(dir, &text);
        const cJSON *c;
        cJSON_ArrayForEach(c, parity_item(fx, "cases")) {
            if (case_runs(c)) check_prompt_and_pixels(dir, c);
        }
        cJSON_Delete(fx);
        free(text);
    }
}

static void test_model_parity(void **state) {
    (void)state;
    size_t seen = 0;
    parity_backends_get(&list);
    for (size_t b = 0; b < list.n; b++) {
        if (!parity_backend_loads(&list, b)) continue;
        for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
            char dir[512], *text = NULL;
            snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[i]);
            cJSON *fx = load_fixture(dir, &text);
            const cJSON *c;
            cJSON_ArrayForEach(c, parity_item(fx, "cases")) {
                if (case_runs(c) && !check_model(dir, list.names[b], c)) break;
            }
            cJSON_Delete(fx);
            free(text);
            seen++;
        }
    }
    if (!seen) fail_msg("no backend ran the video cases");
}

/* The model-layer pieces on made-up input: defaults, rounding of the timestamp text, and the
 * errors a caller can meet. */
static void test_video_api(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_video_config vc;
    assert_int_equal(qvl_video_config_load(FIXTURES "/no-such-dir/video_preprocessor_config.json",
                                           NULL, &vc, &err), QVL_E_NOT_FOUND);
    assert_int_equal(vc.pc.min_pixels, 131072);
    assert_int_equal(vc.pc.max_pixels, 786432);
    assert_int_equal(vc.min_frames, 4);
    assert_int_equal(vc.max_frames, 768);
    assert_true(vc.fps == 2.0 && vc.do_sample_frames && !vc.cap_pixels_per_frame);

    /* 100 frames at 30 fps: int(100 / 30 * 2) = 6 kept over [0, 99]. */
    int64_t idx[100], n = 0;
    assert_int_equal(qvl_video_sample_frames(100, 30.0, &vc, idx, &n, &err), QVL_OK);
    const int64_t want[6] = {0, 20, 40, 59, 79, 99};
    assert_int_equal(n, 6);
    for (int i = 0; i < 6; i++) assert_int_equal(idx[i], want[i]);
    assert_int_equal(qvl_video_sample_frames(0, 30.0, &vc, idx, &n, &err), QVL_E_INVALID);
    assert_int_equal(qvl_video_sample_frames(5, 0.0, &vc, idx, &n, &err), QVL_E_INVALID);

    /* One decimal, ties to even on the exact binary value: 0.25 -> 0.2, 0.75 -> 0.8,
     * 0.35 (just below in binary) -> 0.3. */
    const double secs[3] = {0.25, 0.75, 0.35};
    char *text = NULL;
    assert_int_equal(qvl_video_prompt_text(secs, 3, &text, &err), QVL_OK);
    assert_string_equal(text, "<0.2 seconds><|vision_start|><|video_pad|><|vision_end|>"
                              "<0.8 seconds><|vision_start|><|video_pad|><|vision_end|>"
                              "<0.3 seconds><|vision_start|><|video_pad|><|vision_end|>");
    char *full = NULL;
    const char *texts[2] = {text, text};
    assert_int_equal(qvl_video_expand_text("a<|video_pad|>b", texts, 2, &full, &err),
                     QVL_E_INVALID);
    assert_null(full);
    free(text);

    /* A frame smaller than the factor is scaled up first; one frame is not a video. */
    qvl_image_grid g;
    assert_int_equal(qvl_video_plan_grid(4, 20, 10, &vc, &g, &err), QVL_OK);
    assert_true(g.t == 2 && g.h % 2 == 0 && g.w >= 2 * g.h);
    assert_int_equal(qvl_video_plan_grid(1, 64, 64, &vc, &g, &err), QVL_E_INVALID);

    /* Positions: a video pad run where a picture belongs is refused, and a video's groups must
     * all be there. */
    const qvl_image_grid grids[1] = {{2, 2, 2}};
    const bool video[1] = {true};
    int32_t pos[3 * 5];
    const int32_t one_group[3] = {7, 91, 8};
    assert_int_equal(qvl_mrope_positions_media(one_group, 3, 90, 91, grids, video, 1, 2, 0, pos,
                                               NULL, &err), QVL_E_INVALID);
    const int32_t two_groups[5] = {91, 7, 8, 91, 9};
    int64_t next = 0;
    assert_int_equal(qvl_mrope_positions_media(two_groups, 5, 90, 91, grids, video, 1, 2, 0, pos,
                                               &next, &err), QVL_OK);
    assert_int_equal(pos[3], 3); /* the second group starts where the text left off */
    assert_int_equal(next, 5);
    const bool image[1] = {false};
    const qvl_image_grid still[1] = {{1, 2, 2}};
    assert_int_equal(qvl_mrope_positions_media(two_groups, 2, 90, 91, still, image, 1, 2, 0, pos,
                                               NULL, &err), QVL_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_video_api),
        cmocka_unit_test(test_prompt_and_pixels),
        cmocka_unit_test(test_model_parity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
