/* -c 0 (run_context.h). The cap is on the host's memory: the KV cache is the part of a run
 * that grows with the context, and half of what is free leaves the rest for the weights and
 * the activations. A GPU's memory is not known before a backend opens; a context too large
 * for it is refused there, in one line that names --ctx. */
#define _POSIX_C_SOURCE 200809L

#include "run_context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/qwen3vl_config.h"

/* One number from a cgroup v2 file ("max" or unreadable: -1). */
static double cgroup_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double v = -1;
    if (fscanf(f, "%lf", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* Bytes free for new allocations, or -1 when unknown: MemAvailable, lowered to what the
 * container's cgroup v2 limit leaves (MemAvailable counts the whole machine). */
static double memory_available(const char **source) {
    const char *env = getenv("QVL_MEMORY_AVAILABLE_MIB");
    if (env && *env) {
        char *end = NULL;
        double mib = strtod(env, &end);
        if (end && *end == '\0' && mib >= 0) {
            *source = "given by QVL_MEMORY_AVAILABLE_MIB";
            return mib * 1048576.0;
        }
    }
    *source = "available";
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    fclose(f);
    double avail = kib < 0 ? -1 : kib * 1024.0;
    const double limit = cgroup_number("/sys/fs/cgroup/memory.max");
    const double used = cgroup_number("/sys/fs/cgroup/memory.current");
    if (limit > 0 && used >= 0 && (avail < 0 || limit - used < avail)) {
        avail = limit > used ? limit - used : 0;
        *source = "left under the cgroup's memory.max";
    }
    return avail;
}

/* "512 B", "112.0 KiB", "15.2 GiB". */
static const char *size_str(double bytes, char *buf, size_t cap) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

/* Bytes of one cache element: q8_0 packs 32 values into 34 bytes. */
static double kv_elem_bytes(const char *kv_type) {
    if (!kv_type || strcmp(kv_type, "f16") == 0) return 2.0;
    if (strcmp(kv_type, "f32") == 0) return 4.0;
    if (strcmp(kv_type, "q8_0") == 0) return 34.0 / 32.0;
    return 2.0; /* an unknown name is refused at load, naming it */
}

qvl_status run_context_auto(const qvl_model_files *files, const char *kv_type, bool quiet,
                            int64_t *ctx, qvl_error *err) {
    qvl_qwen3vl_config cfg;
    qvl_status st = qvl_model_files_config(files, &cfg, err);
    if (st != QVL_OK) return st;
    const qvl_text_config *t = &cfg.text;
    const int64_t trained = t->max_position_embeddings;
    if (trained <= 0)
        return qvl_fail(err, QVL_E_INVALID, "-c 0: the model's config gives no "
                        "max_position_embeddings (give --ctx N)");
    const double per_token = 2.0 * (double)t->num_hidden_layers * (double)t->num_key_value_heads *
                             (double)t->head_dim * kv_elem_bytes(kv_type);
    const char *source = NULL;
    const double avail = memory_available(&source);
    int64_t n = trained;
    char why[200] = "", tok_s[32], avail_s[32];
    const char *kv = kv_type ? kv_type : "f16";
    size_str(per_token, tok_s, sizeof tok_s);
    size_str(avail, avail_s, sizeof avail_s);
    if (avail >= 0 && (double)n * per_token > avail / 2) {
        n = (int64_t)(avail / 2 / per_token) / 256 * 256;
        snprintf(why, sizeof why, ", capped by memory: a %s KV cache of %s a token in half of "
                 "the %s %s", kv, tok_s, avail_s, source);
    }
    if (n > RUN_CTX_MAX) {
        n = RUN_CTX_MAX;
        snprintf(why, sizeof why, ", capped by qvl's largest --ctx %lld", (long long)RUN_CTX_MAX);
    }
    if (n <= 0)
        return qvl_fail(err, QVL_E_NOMEM, "-c 0: half of the %s %s holds no context of 256 "
                        "tokens (a %s KV cache takes %s a token): give --ctx N", avail_s, source,
                        kv, tok_s);
    if (!quiet)
        fprintf(stderr, "context: %lld tokens (model's trained context %lld%s)\n", (long long)n,
                (long long)trained, why);
    *ctx = n;
    return QVL_OK;
}
