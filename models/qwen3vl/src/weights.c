/* Opening a Qwen3-VL checkpoint: the tensor list comes from the config, and a tied model's
 * stored lm_head.weight is ignored as transformers ignores it.
 *
 * Half-precision labels are checked against config.json's dtype (docs/hostile-input.md, "Weights
 * whose label disagrees with the config"): F16 and BF16 are both 16 bits, so a header edited from
 * one to the other without converting the data loads and runs as garbage. A matrix labelled with
 * the other half type than the config names is sampled, and refused only when its bits read
 * under the label are implausible for trained weights and plausible under the config's type. A
 * deliberately converted file (f16 values, properly converted, with a config still saying
 * bfloat16) passes; quantised tensors (q8_0, q4_k, q6_k) are never looked at. */
#include "qvl/weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/dtype.h"

/* Sampled elements: SAMPLE_RUNS contiguous runs of SAMPLE_RUN elements spread over the tensor
 * (a few pages of the mapping, not the whole tensor). */
#define SAMPLE_RUNS 4
#define SAMPLE_RUN 256
#define SAMPLE_MAX (SAMPLE_RUNS * SAMPLE_RUN)
/* Fewer nonzero samples than this decide nothing. */
#define SAMPLE_MIN 64

static size_t sample_bits(const qvl_st_tensor *t, uint16_t *out) {
    const size_t n = t->nbytes / 2;
    const uint8_t *p = t->data;
    size_t k = 0;
    for (int r = 0; r < SAMPLE_RUNS; r++) {
        size_t at = n <= SAMPLE_MAX ? (size_t)r * SAMPLE_RUN : (n - SAMPLE_RUN) / (SAMPLE_RUNS - 1) * r;
        for (size_t i = 0; i < SAMPLE_RUN && at + i < n; i++) {
            uint16_t v;
            memcpy(&v, p + 2 * (at + i), 2);
            if (v & 0x7FFF) out[k++] = v; /* zeros say nothing about the type */
        }
        if (n <= SAMPLE_MAX && (size_t)(r + 1) * SAMPLE_RUN >= n) break;
    }
    return k;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median magnitude of the samples read as `as` (f16 or bf16); NaN or inf count as huge. */
static float median_magnitude(const uint16_t *bits, size_t k, qvl_dtype as) {
    float *m = malloc(k * sizeof *m);
    if (!m) return NAN;
    for (size_t i = 0; i < k; i++) {
        const uint16_t a = bits[i] & 0x7FFF;
        float f;
        qvl_to_f32(as, &a, &f, 1);
        m[i] = isfinite(f) ? f : INFINITY;
    }
    qsort(m, k, sizeof *m, cmp_float);
    const float med = m[k / 2];
    free(m);
    return med;
}

/* BF16 bits read as F16: the F16 exponent field is the top five bits of the BF16 exponent, so
 * weights spanning a few binades collapse into one or two F16 exponents (real F16 weights of any
 * scale spread over several: about 57% in the best two adjacent ones for a Gaussian, 75% for a
 * uniform spread), and read as BF16 they are ordinary weights. */
static bool bf16_labelled_f16(const uint16_t *bits, size_t k) {
    size_t hist[32] = {0}, best = 0;
    for (size_t i = 0; i < k; i++) hist[(bits[i] >> 10) & 31]++;
    for (int e = 0; e < 31; e++)
        if (hist[e] + hist[e + 1] > best) best = hist[e] + hist[e + 1];
    const float med = median_magnitude(bits, k, QVL_BF16);
    return best * 10 >= k * 9 && med >= 0x1p-20f && med <= 16.0f;
}

/* F16 bits read as BF16: the BF16 exponent is the F16 exponent and the top three mantissa bits,
 * so ordinary F16 weights (|w| below about 2) read as magnitudes under 2^-24, which no trained
 * matrix has as its median; read as F16 they are normal numbers. */
static bool f16_labelled_bf16(const uint16_t *bits, size_t k) {
    const float as_bf16 = median_magnitude(bits, k, QVL_BF16);
    const float as_f16 = median_magnitude(bits, k, QVL_F16);
    return as_bf16 < 0x1p-24f && as_f16 >= 0x1p-14f && as_f16 <= 16.0f;
}

static qvl_status check_half_labels(const char *model_dir, const qvl_qwen3vl_config *cfg,
                                    const qvl_weights *w, qvl_error *err) {
    qvl_dtype suspect;
    if (strcmp(cfg->text.dtype, "bfloat16") == 0) suspect = QVL_F16;
    else if (strcmp(cfg->text.dtype, "float16") == 0) suspect = QVL_BF16;
    else return QVL_OK;
    uint16_t bits[SAMPLE_MAX];
    for (size_t i = 0; i < qvl_weights_count(w); i++) {
        const qvl_st_tensor *t = qvl_weights_at(w, i);
        if (!t || t->dtype != suspect || t->ndim < 2) continue;
        const size_t k = sample_bits(t, bits);
        if (k < SAMPLE_MIN) continue;
        const bool wrong = suspect == QVL_F16 ? bf16_labelled_f16(bits, k) : f16_labelled_bf16(bits, k);
        if (wrong)
            return qvl_fail(err, QVL_E_INVALID,
                            "%s: %s is labelled %s but holds %s bit patterns (config.json's dtype "
                            "is %s): the header was changed without converting the data; convert "
                            "the values or restore the label",
                            model_dir, t->name, suspect == QVL_F16 ? "F16" : "BF16",
                            suspect == QVL_F16 ? "bfloat16" : "float16", cfg->text.dtype);
    }
    return QVL_OK;
}

qvl_status qvl_weights_open(const char *model_dir, const qvl_qwen3vl_config *cfg,
                            qvl_weights **out, qvl_error *err) {
    if (!model_dir || !cfg || !out)
        return qvl_fail(err, QVL_E_INVALID, "weights: missing argument");
    *out = NULL;
    qvl_tensor_spec *specs = NULL;
    size_t n = 0;
    qvl_status s = qvl_qwen3vl_tensor_specs(cfg, &specs, &n, err);
    if (s != QVL_OK) return s;
    static const char *const tied_extra[] = {"lm_head.weight"};
    s = qvl_weights_open_specs(model_dir, specs, n, tied_extra,
                               cfg->tie_word_embeddings ? 1 : 0, out, err);
    free(specs);
    if (s == QVL_OK) {
        s = check_half_labels(model_dir, cfg, *out, err);
        if (s != QVL_OK) {
            qvl_weights_close(*out);
            *out = NULL;
        }
    }
    return s;
}
