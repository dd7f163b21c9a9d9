/* Device helpers shared by every layer of the cuda_sm61 backend (see cu_device.h). */
#include "cu_device.h"

qvl_status cu_cuda_fail(qvl_error *err, cudaError_t e, const char *what) {
    return qvl_fail(err, QVL_E_BACKEND, "cuda_sm61: %s: %s", what, cudaGetErrorString(e));
}

qvl_status cu_scratch(qvl_backend *be, int slot, size_t bytes, void **out, qvl_error *err) {
    if (bytes > be->scratch_bytes[slot]) {
        /* The old scratch may still be read by queued kernels: wait before freeing it. */
        cudaError_t e = cudaStreamSynchronize(be->stream);
        if (e != cudaSuccess) return cu_cuda_fail(err, e, "synchronize before growing scratch");
        cudaFree(be->scratch[slot]);
        be->scratch[slot] = NULL;
        be->scratch_bytes[slot] = 0;
        be->scratch_gen++;
        if ((e = cudaMalloc(&be->scratch[slot], bytes)) != cudaSuccess) {
            be->scratch[slot] = NULL;
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
