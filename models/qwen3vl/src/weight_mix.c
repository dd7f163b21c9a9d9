/* The dtype of each weight under a mixture (--weights q4_k_m), after llama.cpp's Q4_K_M recipe
 * (docs/QUANT.md): q4_k for the matrices; q6_k for the output projection (the tied embedding
 * when tied) and for the V projection and MLP down projection of the layers that recipe gives
 * more bits (the first and last eighth, and every third layer in between); the vision tower in
 * q8_0; a matrix whose rows are not whole 256-element super-blocks falls back to q8_0 (rows of
 * whole 32-blocks) or stays as stored. */
#include <stdio.h>
#include <string.h>

#include "qvl/weight_mix.h"

/* Layer i of n gets q6_k for attn V and MLP down. */
static bool more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Layer number of a text-decoder tensor "model.language_model.layers.<i>.<rest>" whose rest is
 * `rest`, else -1. */
static int64_t text_layer(const char *name, const char *rest) {
    static const char prefix[] = "model.language_model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    long long i;
    int used = 0;
    if (sscanf(name + sizeof prefix - 1, "%lld%n", &i, &used) != 1 || used <= 0) return -1;
    const char *tail = name + sizeof prefix - 1 + used;
    return tail[0] == '.' && strcmp(tail + 1, rest) == 0 ? (int64_t)i : -1;
}

qvl_dtype qvl_qwen3vl_mix_dtype(const qvl_qwen3vl_config *cfg, const char *name, int ndim,
                                const int64_t *shape, qvl_dtype stored) {
    if (ndim < 2) return stored;
    int64_t row = 1;
    for (int k = 1; k < ndim; k++) row *= shape[k];
    qvl_dtype want = QVL_Q4_K;
    const int64_t n_layers = cfg->text.num_hidden_layers;
    int64_t l;
    if (strcmp(name, "lm_head.weight") == 0 ||
        (cfg->tie_word_embeddings &&
         strcmp(name, "model.language_model.embed_tokens.weight") == 0))
        want = QVL_Q6_K;
    else if ((l = text_layer(name, "self_attn.v_proj.weight")) >= 0 ||
             (l = text_layer(name, "mlp.down_proj.weight")) >= 0)
        want = more_bits(l, n_layers) ? QVL_Q6_K : QVL_Q4_K;
    else if (strncmp(name, "model.visual.", 13) == 0)
        want = QVL_Q8_0;
    if (row % (int64_t)qvl_dtype_block_elems(want) == 0) return want;
    return row % QVL_Q8_0_BLOCK == 0 ? QVL_Q8_0 : stored;
}

qvl_dtype qvl_qwen3vl_bind_dtype(const qvl_qwen3vl_config *cfg, const qvl_st_tensor *t,
                                 bool mix_q4_k_m, bool requested, qvl_dtype matrix_dtype,
                                 qvl_dtype vector_dtype) {
    if (t->ndim < 2) return vector_dtype;
    if (mix_q4_k_m) return qvl_qwen3vl_mix_dtype(cfg, t->name, t->ndim, t->shape, vector_dtype);
    return requested ? matrix_dtype : t->dtype;
}
