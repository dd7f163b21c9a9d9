/* RMS_NORM and LAYER_NORM: one block per row, block reductions built on warp shuffles.
 * Layer norm takes two passes over the row (mean, then the variance of the deviations) as
 * the reference does, so the variance does not lose digits to the mean. */
#include "cu_device.cuh"

#define CU_NORM_THREADS 256

__global__ void k_norm(int layer, float eps, cu_view x, cu_view gamma, cu_view beta, int64_t D,
                       float *out) {
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t base = cu_row_offset(x, r), step = x.stride[x.ndim - 1];
    float *o = out + r * D;

    float mean = 0.0f;
    if (layer) {
        float sum = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
            sum += cu_view_load(x, base + i * step);
        mean = cu_block_reduce(sum, false, scratch) / (float)D;
    }
    float sum_sq = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float v = cu_view_load(x, base + i * step) - mean;
        sum_sq += v * v;
    }
    float inv = 1.0f / sqrtf(cu_block_reduce(sum_sq, false, scratch) / (float)D + eps);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float v = cu_view_load(x, base + i * step);
        float g = cu_view_load(gamma, i * gamma.stride[0]);
        if (layer) {
            float y = (v - mean) * inv * g;
            o[i] = beta.data ? y + cu_view_load(beta, i * beta.stride[0]) : y;
        } else {
            o[i] = (v * inv) * g;
        }
    }
}

extern "C" int cu_launch_norm(cu_stream s, int layer, float eps, cu_view x, cu_view gamma,
                              cu_view beta, float *out) {
    int64_t D = x.shape[x.ndim - 1], rows = 1;
    for (int d = 0; d < x.ndim - 1; d++) rows *= x.shape[d];
    if (rows > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    k_norm<<<(unsigned)rows, CU_NORM_THREADS, 0, s>>>(layer, eps, x, gamma, beta, D, out);
    return (int)cudaGetLastError();
}
