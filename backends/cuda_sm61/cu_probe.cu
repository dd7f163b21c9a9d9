/* The init-time probe: one tiny kernel, so that a build without code for the device (e.g. a
 * CUDA 13 build, which has no Pascal code, on a Pascal GPU) fails init with a clear reason. */
#include <cuda_runtime_api.h>

#include "cu_device.cuh"

__global__ void k_probe(int *flag) {
    *flag = 61;
}

extern "C" int cu_probe_kernel(cudaStream_t s) {
    int *flag = NULL, host = 0;
    cudaError_t e = cudaMalloc(&flag, sizeof *flag);
    if (e != cudaSuccess) return (int)e;
    k_probe<<<1, 1, 0, s>>>(flag);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpyAsync(&host, flag, sizeof host, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    cudaFree(flag);
    if (e == cudaSuccess && host != 61) e = cudaErrorLaunchFailure;
    return (int)e;
}
