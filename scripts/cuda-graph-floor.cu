// What a dependent kernel costs inside a replayed CUDA graph, apart from qvl: the floor the
// decode step's ~170 kernels each pay (figures in docs/BENCHMARKS.md).
//
//   nvcc -O3 -arch=sm_90 -o /tmp/graph-floor scripts/cuda-graph-floor.cu && /tmp/graph-floor
//
// A graph of 170 launches (one stream, each depending on the one before, as a decode step's
// kernels do) is captured once and replayed 20 times; the time per launch is the replay time
// over 170. Cases: an empty kernel of 1 block and of 396 blocks of 256 threads (the decode
// GEMV's grid on 132 SMs), and a streaming read of B bytes per launch by 396 blocks of 256
// threads with four 16-byte loads in flight per thread (the GEMV's pattern without the math),
// each launch reading its own part of a 9 GiB buffer, so nothing comes from L2. Only what
// compute capability 6.1 has is used.
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                      \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

__global__ void k_empty(int *sink) {
    if (sink && threadIdx.x == 1024) *sink = 0; // never true: keeps the kernel
}

// Reads n16 16-byte words from p, four loads in flight per thread.
__global__ void k_read(const uint4 *p, size_t n16, unsigned *sink) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = i + u * stride < n16 ? __ldg(&p[i + u * stride]) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) *sink = acc; // practically never: keeps the loads
}

// Mean microseconds per launch of a 170-launch graph built by launch(s, k).
template <typename F> static double per_launch(cudaStream_t s, F launch) {
    const int kLaunches = 170, kReplays = 20;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int k = 0; k < kLaunches; k++) launch(s, k);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiateWithFlags(&ge, g, 0);
    cudaGraphLaunch(ge, s); // warm up
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, s);
    for (int r = 0; r < kReplays; r++) cudaGraphLaunch(ge, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms * 1000.0 / (kLaunches * kReplays);
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t kBuf = (size_t)9 << 30; // 170 parts of up to 56 MB
    uint4 *buf;
    unsigned *sink;
    CHECK(cudaMalloc(&buf, kBuf));
    CHECK(cudaMalloc(&sink, 64));
    CHECK(cudaMemset(buf, 1, kBuf));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int grid = 3 * prop.multiProcessorCount;
    printf("%s, %d SMs; 170 dependent launches per graph, 20 replays\n", prop.name,
           prop.multiProcessorCount);
    printf("empty, 1 block:                 %6.2f us per launch\n",
           per_launch(s, [&](cudaStream_t st, int) { k_empty<<<1, 32, 0, st>>>(NULL); }));
    printf("empty, %d blocks x 256:         %6.2f us per launch\n", grid,
           per_launch(s, [&](cudaStream_t st, int) { k_empty<<<grid, 256, 0, st>>>(NULL); }));
    const double mbs[] = {0.5, 2, 4.5, 8.4, 13.4, 16.8, 25.2, 50.3};
    for (double mb : mbs) {
        size_t bytes = (size_t)(mb * 1e6) / 16 * 16, per = kBuf / 170 / 16 * 16;
        if (bytes > per) bytes = per;
        double us = per_launch(s, [&](cudaStream_t st, int k) {
            k_read<<<grid, 256, 0, st>>>(buf + k * (per / 16), bytes / 16, sink);
        });
        printf("read %5.1f MB, %d x 256:       %6.2f us per launch (%.0f GB/s)\n", bytes / 1e6,
               grid, us, bytes / us / 1e3);
    }
    CHECK(cudaGetLastError());
    return 0;
}
