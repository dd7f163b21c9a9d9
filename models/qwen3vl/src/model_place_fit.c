/* Whether the model fits its primary backend, from the counts of model_place_count.c: the
 * layers -ngl auto puts there, and the one-line refusal of a run that asks for everything
 * there when it does not fit, with what would (each suggestion counted, not guessed). */
#include <stdio.h>
#include <string.h>

#include "model_internal.h"
#include "qvl/log.h"

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

bool model_fits(const qvl_model *m, const place_counts *pc, int64_t n, bool vision_here,
                uint64_t free_bytes) {
    qvl_model_fit f;
    model_need(m, pc, n, vision_here, &f);
    return f.need_bytes <= free_bytes;
}

int64_t model_fit_layers(const qvl_model *m, const place_counts *pc, bool vision_here,
                         uint64_t free_bytes) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    int64_t best = -1;
    for (int64_t n = 0; n <= L && model_fits(m, pc, n, vision_here, free_bytes); n++) best = n;
    return best;
}

/* "-ngl auto (12 layers on the GPU)", with the vision tower's move when auto would make it. */
static void auto_suggestion(const qvl_model *m, const place_counts *pc, bool vision_here,
                            uint64_t free_bytes, char *buf, size_t size) {
    int64_t n = model_fit_layers(m, pc, vision_here, free_bytes);
    const char *where = "";
    if (n < 0 && vision_here) {
        n = model_fit_layers(m, pc, false, free_bytes);
        where = ", the vision tower on the CPU";
    }
    if (n < 0)
        snprintf(buf, size, "not even the output head fits: run on the CPU (--backend cpu_avx2)");
    else
        snprintf(buf, size, "-ngl auto (%lld layer%s on the GPU%s)", (long long)n,
                 n == 1 ? "" : "s", where);
}

qvl_status model_refuse(qvl_model *m, const qvl_model_options *opts, const place_counts *pc,
                        bool vision_here, uint64_t free_bytes, qvl_error *err) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    qvl_model_fit f;
    model_need(m, pc, L, vision_here, &f);
    char ngl[160], q8[96] = "";
    auto_suggestion(m, pc, vision_here, free_bytes, ngl, sizeof ngl);
    /* A q8_0 cache (half of f16's bytes and a little more) where the head size allows it:
     * counted again, since the attention graph changes with it too. */
    if (m->kv_dtype != QVL_Q8_0 && m->cfg.text.head_dim % QVL_Q8_0_BLOCK == 0) {
        place_counts q;
        qvl_error ignore = {0};
        if (model_count(m, opts, QVL_Q8_0, &q, &ignore) == QVL_OK) {
            qvl_model_fit fq;
            model_need(m, &q, L, vision_here, &fq);
            if (model_fits(m, &q, L, vision_here, free_bytes))
                snprintf(q8, sizeof q8, "--kv-type q8_0 would fit (KV %.1f), or ",
                         mib(fq.kv_bytes));
            model_counts_free(&q);
        }
    }
    return qvl_fail(err, QVL_E_NOMEM,
                    "the model needs %.1f MiB on %s (weights %.1f, KV %.1f at %s, vision %.1f, "
                    "activations %.1f, scratch %.1f, margin %.1f), %.1f MiB are free: %s%s",
                    mib(f.need_bytes), m->tg[0].lb->name, mib(f.weights_bytes), mib(f.kv_bytes),
                    qvl_dtype_name(f.kv_dtype), mib(f.vision_bytes), mib(f.activation_bytes),
                    mib(f.scratch_bytes), mib(f.margin_bytes), mib(free_bytes), q8, ngl);
}

void model_log_fit(const qvl_model *m) {
    const qvl_model_fit *f = &m->fit;
    QVL_LOG_I("on %s: %.1f of %.1f MiB free (weights %.1f, KV %.1f at %s, vision %.1f for a "
              "picture of %lld tokens, activations %.1f for a batch of %lld, scratch %.1f, "
              "margin %.1f; %lld layers)",
              m->tg[0].lb->name, mib(f->need_bytes), mib(f->free_bytes), mib(f->weights_bytes),
              mib(f->kv_bytes), qvl_dtype_name(f->kv_dtype), mib(f->vision_bytes),
              (long long)f->image_tokens, mib(f->activation_bytes), (long long)f->batch,
              mib(f->scratch_bytes), mib(f->margin_bytes), (long long)f->gpu_layers);
}

void qvl_model_fit_get(const qvl_model *m, qvl_model_fit *out) { *out = m->fit; }
