/* RMS_NORM and LAYER_NORM: one block per row, block reductions built on warp shuffles
 * (cu_norm_row_stats, shared with the norm-and-quantise kernel of cu_quantize.cu). */
#include "cu_device.cuh"


__global__ void k_norm(int layer, float eps, cu_view x, cu_view gamma, cu_view beta, int64_t D,
                       float *out) {
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t base = cu_row_offset_unrolled(x, r), step = cu_inner_stride(x);
    float *o = out + r * D;
    float mean, inv;
    cu_norm_row_stats(layer, eps, x, base, step, D, scratch, &mean, &inv);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
        o[i] = cu_norm_value(layer, cu_view_load(x, base + i * step), mean, inv, gamma, beta, i);
}

extern "C" int cu_launch_norm(cu_stream s, int layer, float eps, cu_view x, cu_view gamma,
                              cu_view beta, float *out) {
    int64_t D = x.shape[x.ndim - 1], rows = 1;
    for (int d = 0; d < x.ndim - 1; d++) rows *= x.shape[d];
    if (rows > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    k_norm<<<(unsigned)rows, CU_NORM_THREADS, 0, s>>>(layer, eps, x, gamma, beta, D, out);
    return (int)cudaGetLastError();
}
