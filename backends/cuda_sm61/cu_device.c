/* Device helpers shared by every layer of the cuda_sm61 backend (see cu_device.h). */
#include "cu_device.h"

qvl_status cu_cuda_fail(qvl_error *err, cudaError_t e, const char *what) {
    return qvl_fail(err, QVL_E_BACKEND, "cuda_sm61: %s: %s", what, cudaGetErrorString(e));
}

qvl_status cu_scratch(qvl_backend *be, int slot, size_t bytes, void **out, qvl_error *err) {
    if (bytes > be->scratch_bytes[slot]) {
        qvl_status s = cu_mem_reserve(be, bytes, be->scratch_bytes[slot], "scratch", err);
        if (s != QVL_OK) return s;
        /* The old scratch may still be read by queued kernels: wait before freeing it. */
        cudaError_t e = cudaStreamSynchronize(be->stream);
        if (e != cudaSuccess) return cu_cuda_fail(err, e, "synchronize before growing scratch");
        cudaFree(be->scratch[slot]);
        be->scratch[slot] = NULL;
        be->scratch_bytes[slot] = 0;
        be->scratch_gen++;
        if ((e = cudaMalloc(&be->scratch[slot], bytes)) != cudaSuccess) {
            be->scratch[slot] = NULL;
            cudaGetLastError(); /* an out-of-memory error is not sticky: clear it */
            return qvl_fail(err, QVL_E_NOMEM, "cuda_sm61: cannot allocate %zu bytes of scratch: %s",
                            bytes, cudaGetErrorString(e));
        }
        /* zeroed once: split attention keeps its counters at the start (cu_kernels.h) */
        if ((e = cudaMemsetAsync(be->scratch[slot], 0, bytes, be->stream)) != cudaSuccess)
            return cu_cuda_fail(err, e, "clear new scratch");
        be->scratch_bytes[slot] = bytes;
    }
    *out = be->scratch[slot];
    return QVL_OK;
}

size_t cu_mem_used(const qvl_backend *be) {
    size_t used = be->buffer_bytes;
    for (int i = 0; i < CU_N_SCRATCH; i++) used += be->scratch_bytes[i];
    return used;
}

qvl_status cu_mem_reserve(const qvl_backend *be, size_t bytes, size_t releasing, const char *what,
                          qvl_error *err) {
    if (!be->mem_limit) return QVL_OK;
    size_t used = cu_mem_used(be) - releasing + CU_UNCOUNTED_RESERVE;
    size_t free_b = used < be->mem_limit ? be->mem_limit - used : 0;
    if (bytes <= free_b) return QVL_OK;
    const double mib = 1024.0 * 1024.0;
    return qvl_fail(err, QVL_E_NOMEM,
                    "cuda_sm61: %s of %.1f MiB does not fit: %.1f MiB of the %.0f MiB device "
                    "budget is free (raise memory_limit_mib / --gpu-mem-mib)",
                    what, (double)bytes / mib, (double)free_b / mib, (double)be->mem_limit / mib);
}
