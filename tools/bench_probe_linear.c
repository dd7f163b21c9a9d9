/* qvl-avx2-linear-bench: the cpu_avx2 MATMUL kernel alone, next to the roofline probes measured
 * in the same run, so kernel work can be judged without a whole model (and with less noise).
 *
 *   qvl-avx2-linear-bench BACKEND_SO [-t THREADS] [-r REPS] [-c] [--vision] [DTYPE:M:K:N ...]
 *
 * For each shape (default: the Qwen3-VL-2B text projections at M = 128 and M = 1; --vision: the
 * 2B vision tower's four products at a 448x448 picture's 784 patches, bf16 and q8_0) it runs the
 * MATMUL node REPS times on the backend loaded from BACKEND_SO and prints the median time,
 * GFLOP/s (2 M K N per product) as a share of the FMA probe, and GB/s of weights read as a
 * share of the read-bandwidth probe. Weights are random; the a rows are random f32. With
 * M <= 8 (a decode step of up to 8 sequences) the weights come from memory (copies that
 * together exceed the last-level cache are cycled through), unless -c (one copy,
 * cache-resident: the kernel's compute rate). */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_probe.h"
#include "qvl/backend_helpers.h"
#include "qvl/dtype.h"
#include "test_backend.h"

static size_t weight_bytes(qvl_dtype dt, int64_t n) {
    return (size_t)(n / (int64_t)qvl_dtype_block_elems(dt)) * qvl_dtype_block_bytes(dt);
}

static void set2d(qvl_tensor *t, qvl_dtype dt, int64_t r, int64_t c, void *data) {
    memset(t, 0, sizeof *t);
    t->desc.dtype = dt;
    t->desc.ndim = 2;
    t->desc.shape[0] = r;
    t->desc.shape[1] = c;
    t->desc.stride[0] = c;
    t->desc.stride[1] = 1;
    for (int i = 2; i < QVL_MAX_DIMS; i++) t->desc.shape[i] = t->desc.stride[i] = 1;
    t->data = data;
}

static qvl_dtype parse_dtype(const char *s) {
    if (!strcmp(s, "f32")) return QVL_F32;
    if (!strcmp(s, "f16")) return QVL_F16;
    if (!strcmp(s, "bf16")) return QVL_BF16;
    if (!strcmp(s, "q8_0")) return QVL_Q8_0;
    if (!strcmp(s, "q4_k")) return QVL_Q4_K;
    if (!strcmp(s, "q6_k")) return QVL_Q6_K;
    return QVL_DTYPE_COUNT;
}

/* One shape: returns 0, or -1 when memory or the kernel fails. */
static int run_shape(const qvl_test_backend *tb, qvl_dtype dt, int64_t M, int64_t K, int64_t N,
                     int reps, bool cached, const bench_probe *pr) {
    size_t wb = weight_bytes(dt, N * K);
    /* GEMV reads every weight once: cycle through copies that together exceed the last-level
     * cache, so that they come from memory as in decode (GEMM reuses them: one copy). */
    int copies = M <= 8 && !cached ? (int)((((size_t)768 << 20) + wb - 1) / wb) : 1;
    /* 64-byte aligned like the executor's tensors */
    float *a = aligned_alloc(64, (size_t)(M * K + 16) * sizeof *a / 64 * 64);
    float *o = aligned_alloc(64, (size_t)(M * N + 16) * sizeof *o / 64 * 64);
    float *tmp = malloc((size_t)K * sizeof *tmp);
    unsigned char *w = malloc(wb * (size_t)copies);
    double *t = malloc((size_t)reps * sizeof *t);
    int rc = -1;
    if (!a || !o || !w || !t || !tmp) goto done;
    uint32_t rng = 12345u;
    for (int64_t i = 0; i < M * K; i++) {
        rng = rng * 1664525u + 1013904223u;
        a[i] = (float)(rng >> 8) / (float)(1u << 24) - 0.5f;
    }
    for (int64_t j = 0; j < N; j++) {
        for (int64_t k = 0; k < K; k++) {
            rng = rng * 1664525u + 1013904223u;
            tmp[k] = ((float)(rng >> 8) / (float)(1u << 24) - 0.5f) * 0.05f;
        }
        qvl_from_f32(dt, tmp, w + weight_bytes(dt, j * K), K);
    }
    for (int c = 1; c < copies; c++) memcpy(w + (size_t)c * wb, w, wb);
    qvl_tensor ta, tw, to;
    set2d(&ta, QVL_F32, M, K, a);
    set2d(&tw, dt, N, K, w);
    set2d(&to, QVL_F32, M, N, o);
    qvl_node n;
    memset(&n, 0, sizeof n);
    n.op = QVL_OP_MATMUL;
    n.n_src = qvl_op_max_inputs(QVL_OP_MATMUL);
    n.src[0] = &ta;
    n.src[1] = &tw;
    n.dst = &to;
    n.name = "bench";
    qvl_kernel_fn fn = qvl_backend_kernel(tb->iface, QVL_OP_MATMUL);
    qvl_error err = {0};
    if (fn(tb->be, &n, &err) != QVL_OK) { /* warm-up: page in the weights */
        fprintf(stderr, "matmul failed: %s\n", err.msg);
        goto done;
    }
    for (int r = 0; r < reps; r++) {
        double sum = 0;
        for (int c = 0; c < copies; c++) {
            tw.data = w + (size_t)((r * copies + c) % copies) * wb;
            double t0 = bench_now_seconds();
            if (fn(tb->be, &n, &err) != QVL_OK) goto done;
            sum += bench_now_seconds() - t0;
        }
        t[r] = sum / copies;
    }
    bench_sort_times(t, reps);
    double med = t[reps / 2], gflops = 2.0 * (double)M * K * N / med * 1e-9;
    double gbs = (double)wb / med * 1e-9;
    printf("%-5s M=%-4lld K=%-5lld N=%-6lld  %9.3f ms (min %.3f max %.3f)  %7.1f GFLOP/s = %5.1f%% "
           "of FMA peak  %6.2f GB/s weights = %5.1f%% of read probe\n",
           qvl_dtype_name(dt), (long long)M, (long long)K, (long long)N, med * 1e3, t[0] * 1e3,
           t[reps - 1] * 1e3, gflops, 100.0 * gflops / pr->gflops, gbs, 100.0 * gbs / pr->gbs);
    fflush(stdout);
    rc = 0;
done:
    free(a);
    free(o);
    free(w);
    free(t);
    free(tmp);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s BACKEND_SO [-t THREADS] [-r REPS] [-c] [--vision] [DTYPE:M:K:N ...]\n",
                argv[0]);
        return 2;
    }
    const char *so = argv[1], *threads = "2";
    int reps = 5, first_shape = argc;
    bool cached = false, vision = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c")) cached = true;
        else if (!strcmp(argv[i], "--vision")) vision = true;
        else { first_shape = i; break; }
    }
    if (reps < 1) reps = 1;
    const char *keys[] = {"threads"}, *values[] = {threads};
    qvl_options opts = {1, keys, values};
    qvl_test_backend tb;
    if (qvl_test_backend_open(so, &opts, &tb) != 0) return 1;
    bench_probe pr;
    if (bench_probe_run((size_t)1 << 30, atoi(threads), 3, &pr) != 0) return 1;
    printf("probe (%s, %d threads): read %.2f GB/s, FMA %.1f GFLOP/s\n", pr.kind, pr.threads,
           pr.gbs, pr.gflops);
    static const char *defaults[] = {
        "bf16:128:2048:6144", "bf16:128:2048:2048", "bf16:128:6144:2048", "f16:128:2048:6144",
        "f32:128:2048:6144",  "bf16:1:2048:6144",   "bf16:1:6144:2048",   "q8_0:1:2048:6144",
        "q8_0:1:6144:2048",   "q8_0:128:2048:6144", "f16:1:2048:6144",
    };
    /* The vision tower's q/k/v, attention output, fc1 and fc2 (M = patches, K x N as stored):
     * 448x448 is 28 x 28 patches of 16 pixels; 1024x768's 3072 patches run the same kernels
     * with four times the row blocks. */
    static const char *vision_shapes[] = {
        "bf16:784:1024:3072", "bf16:784:1024:1024", "bf16:784:1024:4096", "bf16:784:4096:1024",
        "q8_0:784:1024:3072", "q8_0:784:1024:1024", "q8_0:784:1024:4096", "q8_0:784:4096:1024",
    };
    const char **set = vision ? vision_shapes : defaults;
    int n_set = vision ? (int)(sizeof vision_shapes / sizeof *vision_shapes)
                       : (int)(sizeof defaults / sizeof *defaults);
    int n_shapes = first_shape < argc ? argc - first_shape : n_set;
    int rc = 0;
    for (int s = 0; s < n_shapes && rc == 0; s++) {
        const char *spec = first_shape < argc ? argv[first_shape + s] : set[s];
        char dts[16];
        long long M, K, N;
        qvl_dtype dt;
        if (sscanf(spec, "%15[^:]:%lld:%lld:%lld", dts, &M, &K, &N) != 4 ||
            (dt = parse_dtype(dts)) == QVL_DTYPE_COUNT || M < 1 || K < 1 || N < 1 ||
            K % (long long)qvl_dtype_block_elems(dt)) {
            fprintf(stderr, "bad shape '%s' (DTYPE:M:K:N, dtype f32|f16|bf16|q8_0|q4_k|q6_k; K "
                            "whole blocks)\n", spec);
            rc = 2;
            break;
        }
        rc = run_shape(&tb, dt, M, K, N, reps, cached, &pr);
    }
    qvl_test_backend_close(&tb);
    return rc;
}
