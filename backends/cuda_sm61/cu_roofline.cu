/* The device's ceilings for qvl-bench (the extension QVL_EXT_PROBE, backend.h): a
 * streaming read with 128-bit loads over a buffer far larger than L2, and fp32 FMA chains held
 * in registers, each timed with events, best of a few passes. Only sm_61 features. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "qvl/backend.h"
#include "qvl/status.h"

#define FMA_CHAINS 8
#define FMA_ITERS 4096
#define PASSES 3

/* XOR of everything read; written only if it hits a value it never will in practice, so the
 * loads cannot be dropped and nothing is written per thread. */
__global__ void k_read(const uint4 *p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

/* FMA_CHAINS independent chains per thread hide the FMA latency. */
__global__ void k_fma(float *out, float a, float b) {
    float x[FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; c++) x[c] = (float)(threadIdx.x + c);
    for (int i = 0; i < FMA_ITERS; i++) {
#pragma unroll
        for (int c = 0; c < FMA_CHAINS; c++) x[c] = fmaf(x[c], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; c++) s += x[c];
    if (s == 1234.5f) out[blockIdx.x] = s; /* keeps the loop; never true for these inputs */
}

static qvl_status cuda_fail(qvl_error *err, const char *what, cudaError_t e) {
    return qvl_fail(err, QVL_E_BACKEND, "cuda_sm61 probe: %s: %s", what, cudaGetErrorString(e));
}

/* Best time of PASSES launches of the kernel `launch` on stream s, in seconds. */
template <typename F>
static cudaError_t best_time(cudaStream_t s, F launch, double *best) {
    cudaEvent_t t0, t1;
    cudaError_t e = cudaEventCreate(&t0);
    if (e != cudaSuccess) return e;
    if ((e = cudaEventCreate(&t1)) != cudaSuccess) {
        cudaEventDestroy(t0);
        return e;
    }
    *best = 1e30;
    launch(); /* warm-up */
    for (int p = 0; p < PASSES && e == cudaSuccess; p++) {
        e = cudaEventRecord(t0, s);
        launch();
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaEventRecord(t1, s);
        if (e == cudaSuccess) e = cudaEventSynchronize(t1);
        float ms = 0;
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, t0, t1);
        if (e == cudaSuccess && ms * 1e-3 < *best) *best = ms * 1e-3;
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return e;
}

extern "C" qvl_status cu_probe(qvl_backend *be, size_t bytes,
                                                    qvl_device_probe *out, qvl_error *err) {
    (void)be; /* the device is the one the backend's init made current on this thread */
    memset(out, 0, sizeof *out);
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return cuda_fail(err, "device query", e);
    size_t free_b = 0, total_b = 0;
    if ((e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
        return cuda_fail(err, "cudaMemGetInfo", e);
    if (bytes > free_b / 2) bytes = free_b / 2; /* leave room for the model */
    bytes &= ~(size_t)15;
    if (bytes < (size_t)64 << 20)
        return qvl_fail(err, QVL_E_NOMEM, "cuda_sm61 probe: only %zu MiB free", free_b >> 20);

    cudaStream_t s;
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_fail(err, "stream", e);
    uint4 *buf = NULL;
    unsigned *sink = NULL;
    float *fout = NULL;
    const int threads = 256, fma_blocks = sms * 8;
    e = cudaMalloc((void **)&buf, bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sink, sizeof *sink);
    if (e == cudaSuccess) e = cudaMalloc((void **)&fout, (size_t)fma_blocks * sizeof *fout);
    if (e == cudaSuccess) e = cudaMemsetAsync(buf, 1, bytes, s); /* real pages, not zero-mapped */
    const size_t n = bytes / sizeof(uint4);
    double t_read = 0, t_fma = 0;
    if (e == cudaSuccess)
        e = best_time(s, [&] { k_read<<<sms * 8, threads, 0, s>>>(buf, n, sink); }, &t_read);
    if (e == cudaSuccess)
        e = best_time(s, [&] { k_fma<<<fma_blocks, threads, 0, s>>>(fout, 0.999f, 0.001f); },
                      &t_fma);
    cudaFree(buf);
    cudaFree(sink);
    cudaFree(fout);
    cudaStreamDestroy(s);
    if (e != cudaSuccess) return cuda_fail(err, "probe kernels", e);
    out->bytes = bytes;
    out->read_gbs = (double)bytes / t_read * 1e-9;
    out->fma_gflops = 2.0 * FMA_CHAINS * FMA_ITERS * (double)fma_blocks * threads / t_fma * 1e-9;
    snprintf(out->kind, sizeof out->kind, "cuda fp32 fma, %d SMs", sms);
    return QVL_OK;
}
