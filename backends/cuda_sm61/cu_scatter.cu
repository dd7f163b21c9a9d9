/* SET_ROWS / ADD_ROWS: out = copy of x, then row idx[k] of out replaced by (or increased by)
 * src[k], for k in order. Indices were checked on the host. The copy runs element-wise; the
 * scatter gives each column d one thread that walks k in order, so repeated indices behave
 * exactly as in the reference (the last k wins for SET_ROWS, sums in k order for ADD_ROWS). */
#include "cu_device.cuh"

__global__ void k_copy_rows(cu_view x, int64_t n, float *out) {
    int64_t D = x.shape[1];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        out[e] = cu_view_load(x, (e / D) * x.stride[0] + (e % D) * x.stride[1]);
}

/* Indices are read here, on the device (the host never waits for them, so the node can sit in
 * a captured CUDA graph); one outside [0, N) leaves its row as x has it (ops.h). */
__global__ void k_scatter_rows(int add, cu_view idx, cu_view src, int64_t N, int64_t D,
                               float *out) {
    int64_t K = idx.shape[0];
    for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < D;
         d += (int64_t)gridDim.x * blockDim.x) {
        for (int64_t k = 0; k < K; k++) {
            int32_t r = ((const int32_t *)idx.data)[k * idx.stride[0]];
            if (r < 0 || r >= N) continue;
            float v = cu_view_load(src, k * src.stride[0] + d * src.stride[1]);
            float *o = out + (int64_t)r * D + d;
            *o = add ? *o + v : v;
        }
    }
}

extern "C" int cu_launch_scatter_rows(cu_stream s, int add, cu_view x, cu_view idx, cu_view src,
                                      float *out) {
    int64_t n = x.shape[0] * x.shape[1], D = x.shape[1];
    k_copy_rows<<<cu_blocks_for(n), CU_THREADS, 0, s>>>(x, n, out);
    int rc = (int)cudaGetLastError();
    if (rc != 0) return rc;
    k_scatter_rows<<<cu_blocks_for(D), CU_THREADS, 0, s>>>(add, idx, src, x.shape[0], D, out);
    return (int)cudaGetLastError();
}
