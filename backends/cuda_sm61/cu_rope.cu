/* ROPE, all three modes (see qvl_rope_params): one thread per (token, head, pair), rotating
 * the rotate-half pair (k, k + D/2). NORM_ROPE: a warp per (token, head) normalises the head
 * into shared memory (RMS, as cu_norm.cu), then rotates it as ROPE does. Frequencies and angles are computed in f32 as the
 * reference does: freq = 1 / theta^e, angle = (float)pos * freq, then cosf/sinf. */
#include "cu_device.cuh"

struct cu_sections {
    int32_t s[4];
};

/* theta^e rounded once to f32. The device powf may be off by an ulp or two, and at positions in
 * the thousands that ulp moves angles by 1e-4 rad; the double power rounded to f32 lands on the
 * same value as the host's powf, which the reference uses. */
__device__ __forceinline__ float cu_powf_rounded(float theta, float e) {
    return (float)pow((double)theta, (double)e);
}

__device__ __forceinline__ void cu_pair_frequency(int mode, float theta, const cu_sections &sec,
                                                  int64_t D, int64_t k, float *freq, int *row) {
    if (mode == QVL_ROPE_VISION_2D) {
        int64_t Q = D / 4;
        *freq = 1.0f / cu_powf_rounded(theta, (float)(k % Q) / (float)Q);
        *row = k < Q ? 0 : 1;
    } else {
        *freq = 1.0f / cu_powf_rounded(theta, (float)(2 * k) / (float)D);
        int owner = 0;
        if (mode == QVL_ROPE_MROPE_INTERLEAVED) {
            if (k % 3 == 1 && k < 3 * (int64_t)sec.s[1]) owner = 1;
            else if (k % 3 == 2 && k < 3 * (int64_t)sec.s[2]) owner = 2;
        }
        *row = owner;
    }
}

/* Pair k (values a, b) of a head of token t, rotated into o[k] and o[k + D/2]. */
__device__ __forceinline__ void cu_rotate_pair(int mode, float theta, const cu_sections &sec,
                                               int64_t D, int64_t k, const cu_view &pos,
                                               int64_t t, float a, float b, float *o) {
    float freq;
    int prow;
    cu_pair_frequency(mode, theta, sec, D, k, &freq, &prow);
    int32_t p = ((const int32_t *)pos.data)[prow * pos.stride[0] + t * pos.stride[1]];
    float angle = (float)p * freq;
    float c = cosf(angle), sn = sinf(angle);
    o[k] = a * c - b * sn;
    o[k + D / 2] = b * c + a * sn;
}

__global__ void k_rope(int mode, float theta, cu_sections sec, cu_view x, cu_view pos,
                       int64_t N, int64_t H, int64_t D, float *out) {
    int64_t half = D / 2, n = N * H * half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = i % half, h = (i / half) % H, t = i / (half * H);
        int64_t base = t * x.stride[0] + h * x.stride[1];
        float a = cu_view_load(x, base + k * x.stride[2]);
        float b = cu_view_load(x, base + (k + half) * x.stride[2]);
        cu_rotate_pair(mode, theta, sec, D, k, pos, t, a, b, out + (t * H + h) * D);
    }
}

#define CU_NR_WARPS 4

__global__ void __launch_bounds__(CU_NR_WARPS *CU_WARP)
    k_norm_rope(int mode, float theta, cu_sections sec, float eps, cu_view x, cu_view pos,
                cu_view gamma, int64_t N, int64_t H, int64_t D, float *out) {
    extern __shared__ float heads[]; /* [CU_NR_WARPS, D] */
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int64_t r = (int64_t)blockIdx.x * CU_NR_WARPS + warp; /* head h of token t: r = t*H + h */
    if (r >= N * H) return; /* warp-uniform, and no block-wide barrier follows */
    int64_t t = r / H, h = r % H;
    float *row = heads + warp * D;
    int64_t base = t * x.stride[0] + h * x.stride[1];
    float ss = 0.0f;
    for (int64_t k = lane; k < D; k += CU_WARP) {
        float v = cu_view_load(x, base + k * x.stride[2]);
        row[k] = v;
        ss += v * v;
    }
    float inv = 1.0f / sqrtf(cu_warp_sum(ss) / (float)D + eps);
    for (int64_t k = lane; k < D; k += CU_WARP)
        row[k] = (row[k] * inv) * cu_view_load(gamma, k * gamma.stride[0]);
    __syncwarp();
    for (int64_t k = lane; k < D / 2; k += CU_WARP)
        cu_rotate_pair(mode, theta, sec, D, k, pos, t, row[k], row[k + D / 2], out + r * D);
}

extern "C" int cu_launch_norm_rope(cu_stream s, int mode, float theta, const int32_t sections[3],
                                   float eps, cu_view x, cu_view pos, cu_view gamma,
                                   float *out) {
    cu_sections sec = {{sections[0], sections[1], sections[2], 0}};
    int64_t N = x.shape[0], H = x.shape[1], D = x.shape[2];
    if (D > CU_NORM_ROPE_MAX_D) return (int)cudaErrorInvalidConfiguration;
    int64_t blocks = (N * H + CU_NR_WARPS - 1) / CU_NR_WARPS;
    if (blocks > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    if (blocks < 1) blocks = 1;
    size_t smem = (size_t)(CU_NR_WARPS * D) * sizeof(float);
    k_norm_rope<<<(unsigned)blocks, CU_NR_WARPS * CU_WARP, smem, s>>>(mode, theta, sec, eps, x, pos,
                                                                    gamma, N, H, D, out);
    return (int)cudaGetLastError();
}

extern "C" int cu_launch_rope(cu_stream s, int mode, float theta, const int32_t sections[4],
                              cu_view x, cu_view pos, float *out) {
    cu_sections sec;
    for (int i = 0; i < 4; i++) sec.s[i] = sections[i];
    int64_t N = x.shape[0], H = x.shape[1], D = x.shape[2];
    k_rope<<<cu_blocks_for(N * H * (D / 2)), CU_THREADS, 0, s>>>(mode, theta, sec, x, pos, N, H,
                                                                 D, out);
    return (int)cudaGetLastError();
}
