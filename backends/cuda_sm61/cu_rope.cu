/* ROPE, all three modes (see qvl_rope_params): one thread per (token, head, pair), rotating
 * the rotate-half pair (k, k + D/2). Frequencies and angles are computed in f32 as the
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

__global__ void k_rope(int mode, float theta, cu_sections sec, cu_view x, cu_view pos,
                       int64_t N, int64_t H, int64_t D, float *out) {
    int64_t half = D / 2, n = N * H * half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = i % half, h = (i / half) % H, t = i / (half * H);
        float freq;
        int row;
        cu_pair_frequency(mode, theta, sec, D, k, &freq, &row);
        int32_t p = ((const int32_t *)pos.data)[row * pos.stride[0] + t * pos.stride[1]];
        float angle = (float)p * freq;
        float c = cosf(angle), sn = sinf(angle);
        int64_t base = t * x.stride[0] + h * x.stride[1];
        float a = cu_view_load(x, base + k * x.stride[2]);
        float b = cu_view_load(x, base + (k + half) * x.stride[2]);
        float *o = out + (t * H + h) * D;
        o[k] = a * c - b * sn;
        o[k + half] = b * c + a * sn;
    }
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
