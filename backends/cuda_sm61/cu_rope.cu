/* ROPE, all three modes (see qvl_rope_params): one thread per (token, head, pair), rotating
 * the rotate-half pair (k, k + D/2). NORM_ROPE: a block per (token, head) normalises the head
 * (RMS, as cu_norm.cu), then rotates it as ROPE does. Frequencies come from the host as the
 * reference computes them (freq = 1 / theta^e in f32); angles are computed in f32 as the
 * reference does: angle = (float)pos * freq, then cosf/sinf. */
#include <string.h>

#include "cu_device.cuh"

/* Pair k (values a, b) rotated by (c, sn) into o[k] and o[k + D/2]. */
__device__ __forceinline__ void cu_rotate(float a, float b, float c, float sn, int64_t D,
                                          int64_t k, float *o) {
    o[k] = a * c - b * sn;
    o[k + D / 2] = b * c + a * sn;
}

/* Each pair's frequency and the row of pos that holds its position, for up to
 * CU_ROPE_MAX_PAIRS pairs: filled on the host (powf there is the reference's own, so the
 * values are the reference's, and no thread spends its time on a power: the device's double
 * pow, which matched the host's, runs at 1/32 of the f32 rate on a GeForce Pascal). */
#define CU_ROPE_MAX_PAIRS (CU_NORM_ROPE_MAX_D / 2)
struct cu_rope_table {
    float freq[CU_ROPE_MAX_PAIRS];
    unsigned char prow[CU_ROPE_MAX_PAIRS];
};

/* As the reference rope kernel pairs frequencies and position rows. */
static void cu_fill_rope_table(int mode, float theta, const int32_t *sections, int64_t D,
                               cu_rope_table *t) {
    for (int64_t k = 0; k < D / 2; k++) {
        int row = 0;
        if (mode == QVL_ROPE_VISION_2D) {
            int64_t Q = D / 4;
            t->freq[k] = 1.0f / powf(theta, (float)(k % Q) / (float)Q);
            row = k < Q ? 0 : 1;
        } else {
            t->freq[k] = 1.0f / powf(theta, (float)(2 * k) / (float)D);
            if (mode == QVL_ROPE_MROPE_INTERLEAVED && k % 3 == 1 && k < 3 * (int64_t)sections[1])
                row = 1;
            else if (mode == QVL_ROPE_MROPE_INTERLEAVED && k % 3 == 2 &&
                     k < 3 * (int64_t)sections[2])
                row = 2;
        }
        t->prow[k] = (unsigned char)row;
    }
}

/* ROPE: a thread per (token t, head h, pair k); x [N, H, D] with N * H * D / 2 < 2^31 (the
 * launcher checks), so the index splits with 32-bit divisions. The table goes to shared
 * memory first: the lanes of a warp read different pairs, and parameter space serves a warp
 * one address at a time. */
__global__ void k_rope(cu_rope_table tab, cu_view x, cu_view pos, int n, int H, int half,
                       float *out) {
    __shared__ float freq[CU_ROPE_MAX_PAIRS];
    __shared__ unsigned char prow[CU_ROPE_MAX_PAIRS];
    for (int k = threadIdx.x; k < half; k += blockDim.x) {
        freq[k] = tab.freq[k];
        prow[k] = tab.prow[k];
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int k = i % half, h = (i / half) % H, t = i / (half * H);
        int64_t base = t * x.stride[0] + h * x.stride[1];
        float a = cu_view_load(x, base + k * x.stride[2]);
        float b = cu_view_load(x, base + (k + half) * x.stride[2]);
        int32_t p = ((const int32_t *)pos.data)[prow[k] * pos.stride[0] + t * pos.stride[1]];
        float angle = (float)p * freq[k];
        cu_rotate(a, b, cosf(angle), sinf(angle), 2 * half, k, out + ((int64_t)t * H + h) * 2 * half);
    }
}

/* NORM_ROPE: a block per (token, head), thread k owning the pairs k, k + CU_NR_THREADS, ...
 * (both elements of a pair, so a rotation needs nothing from another thread). A warp per head
 * walking its pairs and elements in turn made a decode step's launch (24 heads) a few warps
 * each running a long serial chain of loads and sincos: several times this kernel's time. */
#define CU_NR_THREADS 64
#define CU_NR_PAIRS (CU_NORM_ROPE_MAX_D / 2 / CU_NR_THREADS) /* most pairs a thread owns */

/* Up to two NORM_ROPE nodes in one launch (q and k of a decode step: one launch less): the
 * first blocks0 blocks serve job 0, the rest job 1, each with its table of pairs (as ROPE's). */
struct cu_nr_args {
    cu_norm_rope_job job[2];
    cu_rope_table tab[2];
    int n_jobs, has_extra;
    int64_t blocks0, blocks_nr, blocks_extra;
    cu_store_at_job extra; /* run by the blocks after the first blocks_nr */
};
static_assert(sizeof(cu_nr_args) <= 4096, "Pascal's kernel parameter limit");

__global__ void __launch_bounds__(CU_NR_THREADS) k_norm_rope(cu_nr_args a) {
    if (a.has_extra && blockIdx.x >= a.blocks_nr) {
        cu_store_rows_at_part(a.extra, (int64_t)blockIdx.x - a.blocks_nr, a.blocks_extra);
        return;
    }
    int j = a.n_jobs > 1 && blockIdx.x >= a.blocks0;
    const cu_norm_rope_job &p = a.job[j];
    const cu_view &x = p.x;
    int64_t H = x.shape[1], D = x.shape[2], half = D / 2;
    int64_t r = (int64_t)blockIdx.x - (j ? a.blocks0 : 0); /* head h of token t: r = t*H + h */
    int64_t t = r / H, h = r % H, base = t * x.stride[0] + h * x.stride[1];
    const int32_t *pos = (const int32_t *)p.pos.data;
    /* the loads of every owned pair first, then the angles' math while they are on their way */
    float xa[CU_NR_PAIRS], xb[CU_NR_PAIRS], ga[CU_NR_PAIRS], gb[CU_NR_PAIRS];
    int32_t at[CU_NR_PAIRS];
#pragma unroll
    for (int u = 0; u < CU_NR_PAIRS; u++) {
        int64_t k = threadIdx.x + u * CU_NR_THREADS;
        xa[u] = xb[u] = ga[u] = gb[u] = 0.0f;
        at[u] = 0;
        if (k < half) {
            xa[u] = cu_view_load(x, base + k * x.stride[2]);
            xb[u] = cu_view_load(x, base + (k + half) * x.stride[2]);
            ga[u] = cu_view_load(p.gamma, k * p.gamma.stride[0]);
            gb[u] = cu_view_load(p.gamma, (k + half) * p.gamma.stride[0]);
            at[u] = pos[a.tab[j].prow[k] * p.pos.stride[0] + t * p.pos.stride[1]];
        }
    }
    float cs[CU_NR_PAIRS], sn[CU_NR_PAIRS], ss = 0.0f;
#pragma unroll
    for (int u = 0; u < CU_NR_PAIRS; u++) {
        int64_t k = threadIdx.x + u * CU_NR_THREADS;
        cs[u] = sn[u] = 0.0f;
        if (k >= half) break; /* no sincos for pairs nobody owns (3 of 4 at D = 128) */
        float angle = (float)at[u] * a.tab[j].freq[k];
        cs[u] = cosf(angle);
        sn[u] = sinf(angle);
        ss += xa[u] * xa[u] + xb[u] * xb[u];
    }
    __shared__ float warp_ss[CU_NR_THREADS / CU_WARP];
    ss = cu_warp_sum(ss);
    if (threadIdx.x % CU_WARP == 0) warp_ss[threadIdx.x / CU_WARP] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < CU_NR_THREADS / CU_WARP; w++) total += warp_ss[w];
    float inv = 1.0f / sqrtf(total / (float)D + p.eps);
    /* With a store, the rotated head also goes to the cache as the store job would write it
     * from out: head h of token t to head h of the job's row for t (cu_store_row; nothing when
     * that is out of range). Never a q8_0 cache: a block's 32 values are not one warp's here
     * (cu_rope_store_group does not form for one). */
    int64_t to = p.store.dst ? cu_store_row(p.store, t, x.shape[0]) : -1;
    bool store = to >= 0;
    float *o = p.out + r * D;
    int64_t so = (to * H + h) * D;
#pragma unroll
    for (int u = 0; u < CU_NR_PAIRS; u++) {
        int64_t k = threadIdx.x + u * CU_NR_THREADS;
        if (k >= half) break;
        float rot[2];
        cu_rotate((xa[u] * inv) * ga[u], (xb[u] * inv) * gb[u], cs[u], sn[u], 2, 0, rot);
        o[k] = rot[0];
        o[k + half] = rot[1];
        if (store) {
            cu_store(p.store.dst, p.store.dst_dtype, so + k, rot[0]);
            cu_store(p.store.dst, p.store.dst_dtype, so + k + half, rot[1]);
        }
    }
}

extern "C" int cu_launch_norm_rope(cu_stream s, const cu_norm_rope_job *jobs, int n_jobs,
                                   const cu_store_at_job *extra) {
    if (n_jobs < 1 || n_jobs > 2) return (int)cudaErrorInvalidConfiguration;
    cu_nr_args a;
    memset(&a, 0, sizeof a);
    a.n_jobs = n_jobs;
    int64_t blocks = 0;
    for (int j = 0; j < n_jobs; j++) {
        const cu_view &x = jobs[j].x;
        int64_t D = x.shape[2], nb = x.shape[0] * x.shape[1];
        if (D > CU_NORM_ROPE_MAX_D) return (int)cudaErrorInvalidConfiguration;
        a.job[j] = jobs[j];
        const cu_norm_rope_job &jb = jobs[j];
        cu_fill_rope_table(jb.mode, jb.theta, jb.sections, D, &a.tab[j]);
        if (j == 0) a.blocks0 = nb;
        blocks += nb;
    }
    if (blocks < 1) blocks = 1;
    a.blocks_nr = blocks;
    if (extra) {
        a.has_extra = 1;
        a.extra = *extra;
        a.blocks_extra = (cu_nelem(extra->src) + CU_NR_THREADS - 1) / CU_NR_THREADS;
        if (a.blocks_extra < 1) a.blocks_extra = 1;
        if (a.blocks_extra > 4096) a.blocks_extra = 4096; /* the loop strides over the rest */
        blocks += a.blocks_extra;
    }
    if (blocks > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    k_norm_rope<<<(unsigned)blocks, CU_NR_THREADS, 0, s>>>(a);
    return (int)cudaGetLastError();
}

extern "C" int cu_launch_rope(cu_stream s, int mode, float theta, const int32_t sections[4],
                              cu_view x, cu_view pos, float *out) {
    int64_t N = x.shape[0], H = x.shape[1], D = x.shape[2], n = N * H * (D / 2);
    if (D / 2 > CU_ROPE_MAX_PAIRS || N * H * D > 0x7fffffff) /* cu_accepts declines these */
        return (int)cudaErrorInvalidConfiguration;
    cu_rope_table tab;
    memset(&tab, 0, sizeof tab);
    cu_fill_rope_table(mode, theta, sections, D, &tab);
    k_rope<<<cu_blocks_for(n), CU_THREADS, 0, s>>>(tab, x, pos, (int)n, (int)H, (int)(D / 2), out);
    return (int)cudaGetLastError();
}
