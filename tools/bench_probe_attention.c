/* qvl-avx2-attention-bench: the cpu_avx2 ATTENTION kernel alone at the vision tower's shapes,
 * next to the FMA probe measured in the same run.
 *
 *   qvl-avx2-attention-bench BACKEND_SO [-t THREADS] [-r REPS] [S:H:D:G ...]
 *
 * For each shape (default: one 1024x768 picture of Qwen3-VL-2B, 3072:16:64:1) it runs an
 * ATTENTION node over S patches, H heads of D, in G equal segments (the per-image windows; the
 * last takes the remainder), with q, k and v the column blocks of one [S, 3 H D] buffer as the
 * vision graph lays them out, REPS times, and prints the median time and GFLOP/s (4 S^2 H D / G
 * for the two products) as a share of the FMA probe. Values are random in [-1, 1). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_probe.h"
#include "qvl/backend_helpers.h"
#include "test_backend.h"

static void set_desc(qvl_tensor *t, qvl_dtype dt, int ndim, const int64_t *shape,
                     const int64_t *stride, void *data) {
    memset(t, 0, sizeof *t);
    t->desc.dtype = dt;
    t->desc.ndim = ndim;
    for (int i = 0; i < QVL_MAX_DIMS; i++) {
        t->desc.shape[i] = i < ndim ? shape[i] : 1;
        t->desc.stride[i] = i < ndim ? stride[i] : 1;
    }
    t->data = data;
}

static int run_shape(const qvl_test_backend *tb, int64_t S, int64_t H, int64_t D, int64_t G,
                     int reps, const bench_probe *pr) {
    const int64_t C = H * D;
    float *qkv = aligned_alloc(64, (size_t)((S * 3 * C * 4 + 63) / 64 * 64));
    float *o = aligned_alloc(64, (size_t)((S * C * 4 + 63) / 64 * 64));
    int32_t *seg = malloc((size_t)(G + 1) * sizeof *seg);
    double *t = malloc((size_t)reps * sizeof *t);
    int rc = -1;
    if (!qkv || !o || !seg || !t) goto done;
    uint32_t rng = 12345u;
    for (int64_t i = 0; i < S * 3 * C; i++) {
        rng = rng * 1664525u + 1013904223u;
        qkv[i] = (float)(rng >> 8) / (float)(1u << 23) - 1.0f;
    }
    for (int64_t g = 0; g < G; g++) seg[g] = (int32_t)(g * (S / G));
    seg[G] = (int32_t)S;
    const int64_t hs[3] = {S, H, D}, hst[3] = {3 * C, D, 1}, os[3] = {S, H, D},
                  ost[3] = {C, D, 1}, ss[1] = {G + 1}, sst[1] = {1};
    qvl_tensor tq, tk, tv, ts, to;
    set_desc(&tq, QVL_F32, 3, hs, hst, qkv);
    set_desc(&tk, QVL_F32, 3, hs, hst, qkv + C);
    set_desc(&tv, QVL_F32, 3, hs, hst, qkv + 2 * C);
    set_desc(&ts, QVL_I32, 1, ss, sst, seg);
    set_desc(&to, QVL_F32, 3, os, ost, o);
    qvl_params p;
    memset(&p, 0, sizeof p);
    p.attention.scale = 1.0f / sqrtf((float)D);
    p.attention.mask = QVL_MASK_SEGMENTS;
    qvl_tensor *src[4] = {&tq, &tk, &tv, &ts};
    qvl_error err = {0};
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        double t0 = bench_now_seconds();
        if (qvl_test_run_node(tb, QVL_OP_ATTENTION, &p, src, 4, &to, &err) != QVL_OK) {
            fprintf(stderr, "attention failed: %s\n", err.msg);
            goto done;
        }
        if (r >= 0) t[r] = bench_now_seconds() - t0;
    }
    bench_sort_times(t, reps);
    double med = t[reps / 2];
    double gflops = 4.0 * (double)S * (double)S / (double)G * (double)C / med * 1e-9;
    printf("attention S=%lld H=%lld D=%lld segments %lld  %9.3f ms (min %.3f max %.3f)  %7.1f "
           "GFLOP/s = %5.1f%% of FMA peak\n",
           (long long)S, (long long)H, (long long)D, (long long)G, med * 1e3, t[0] * 1e3,
           t[reps - 1] * 1e3, gflops, 100.0 * gflops / pr->gflops);
    fflush(stdout);
    rc = 0;
done:
    free(qkv);
    free(o);
    free(seg);
    free(t);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s BACKEND_SO [-t THREADS] [-r REPS] [S:H:D:G ...]\n", argv[0]);
        return 2;
    }
    const char *so = argv[1], *threads = "2";
    int reps = 3, first_shape = argc;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else { first_shape = i; break; }
    }
    if (reps < 1) reps = 1;
    const char *keys[] = {"threads"}, *values[] = {threads};
    qvl_options opts = {1, keys, values};
    qvl_test_backend tb;
    if (qvl_test_backend_open(so, &opts, &tb) != 0) return 1;
    bench_probe pr;
    if (bench_probe_run((size_t)1 << 30, atoi(threads), 3, &pr) != 0) return 1;
    printf("probe (%s, %d threads): FMA %.1f GFLOP/s\n", pr.kind, pr.threads, pr.gflops);
    int n_shapes = first_shape < argc ? argc - first_shape : 1;
    int rc = 0;
    for (int s = 0; s < n_shapes && rc == 0; s++) {
        const char *spec = first_shape < argc ? argv[first_shape + s] : "3072:16:64:1";
        long long S, H, D, G;
        if (sscanf(spec, "%lld:%lld:%lld:%lld", &S, &H, &D, &G) != 4 || S < 1 || H < 1 ||
            D < 1 || G < 1 || G > S || S * 3 * H * D > ((long long)1 << 31)) {
            fprintf(stderr, "bad shape '%s' (S:H:D:G, 1 <= G <= S, S*3*H*D <= 2^31)\n", spec);
            rc = 2;
            break;
        }
        rc = run_shape(&tb, S, H, D, G, reps, &pr);
    }
    qvl_test_backend_close(&tb);
    return rc;
}
