/* The backend ABI: the contract between qvl and a compute backend.
 *
 * A backend is a shared object (libqvl-<name>.so) that exports ONE symbol,
 *
 *     const qvl_backend_iface *qvl_backend_entry(void);
 *
 * returning a pointer to a static, constant table. qvl loads it with dlopen (see registry.h),
 * refuses it when iface->abi != QVL_BACKEND_ABI, calls init() with the options written in
 * plugins.yaml, and from then on runs graphs by calling one kernel per node.
 *
 * Memory: the backend owns its memory. qvl asks for buffers (buffer_alloc) and addresses
 * inside them are plain `void *` "backend addresses": host pointers for CPU backends, device
 * addresses for GPUs. qvl does pointer arithmetic on them (base + byte offset) but never
 * dereferences them unless describe() says host_memory is true; data moves through
 * upload/download. A backend whose buffers are host memory may offer buffer_wrap_host so that
 * weights mapped from a file are used in place, without a copy.
 *
 * Kernels: kernels[op] runs op on one node (see ops.h for each op's exact semantics). NULL
 * means unsupported. Ops are only ever appended to the op list, so a plugin built when there
 * were fewer ops simply reports n_kernels smaller than QVL_OP_COUNT and qvl treats the
 * missing ones as unsupported. Kernels may run asynchronously (GPU streams); synchronize()
 * waits for all of them. A kernel returns QVL_OK or an error with a message in err.
 *
 * The reference backend (backends/reference) is the example to read. */
#ifndef QVL_BACKEND_H
#define QVL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/ops.h"
#include "qvl/status.h"
#include "qvl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below changes layout or meaning. */
#define QVL_BACKEND_ABI 1u
#define QVL_BACKEND_ENTRY_SYMBOL "qvl_backend_entry"

#if defined(__GNUC__)
#define QVL_EXPORT __attribute__((visibility("default")))
#else
#define QVL_EXPORT
#endif

/* A backend's private state; each backend defines struct qvl_backend for itself. */
typedef struct qvl_backend qvl_backend;

/* Options from plugins.yaml (`options: { threads: 4 }`), as strings. They are valid only
 * during init(): a backend copies what it keeps. */
typedef struct qvl_options {
    size_t n;
    const char *const *keys;
    const char *const *values;
} qvl_options;

/* Value for key, or NULL when absent (opts may be NULL). */
const char *qvl_options_get(const qvl_options *opts, const char *key);
/* Integer option: def when absent; QVL_E_INVALID (with a message) when not an integer. */
qvl_status qvl_options_get_int(const qvl_options *opts, const char *key, long def, long *out,
                               qvl_error *err);

typedef struct qvl_device_info {
    char name[128];        /* "Intel(R) Core(TM) i5-10210U", "NVIDIA H200" */
    uint64_t memory_total; /* bytes; 0 if unknown */
    uint64_t memory_free;  /* bytes; 0 if unknown */
    bool host_memory;      /* buffer addresses are host pointers qvl may read and write */
} qvl_device_info;

typedef struct qvl_buffer {
    void *data;   /* backend address of the first byte */
    size_t size;  /* bytes */
    void *handle; /* backend-private */
} qvl_buffer;

typedef qvl_status (*qvl_kernel_fn)(qvl_backend *be, const qvl_node *node, qvl_error *err);

typedef struct qvl_backend_iface {
    uint32_t abi;            /* QVL_BACKEND_ABI the plugin was built against */
    const char *name;        /* matches the name in plugins.yaml, e.g. "cpu_avx2" */
    const char *description; /* one line for humans */

    /* Create an instance. Fails (with a reason) when the hardware is absent or unsuitable:
     * the registry then moves on to the next backend by priority. */
    qvl_status (*init)(const qvl_options *opts, qvl_backend **out, qvl_error *err);
    void (*release)(qvl_backend *be);
    qvl_status (*describe)(qvl_backend *be, qvl_device_info *info);

    qvl_status (*buffer_alloc)(qvl_backend *be, size_t bytes, qvl_buffer *out, qvl_error *err);
    void (*buffer_free)(qvl_backend *be, qvl_buffer *buf);
    /* Optional (NULL if not offered): use host memory [ptr, ptr+bytes) in place as a buffer.
     * The memory outlives the buffer; buffer_free must not free it. */
    qvl_status (*buffer_wrap_host)(qvl_backend *be, void *ptr, size_t bytes, qvl_buffer *out,
                                   qvl_error *err);
    qvl_status (*upload)(qvl_backend *be, void *dst, const void *src_host, size_t bytes,
                         qvl_error *err);
    qvl_status (*download)(qvl_backend *be, void *dst_host, const void *src, size_t bytes,
                           qvl_error *err);
    qvl_status (*synchronize)(qvl_backend *be, qvl_error *err);

    /* Can this backend run this node (op, dtypes, shapes, strides)? Tensors' data may be NULL
     * when asked. A backend that answers true must then run the node correctly. */
    bool (*supports)(qvl_backend *be, const qvl_node *node);

    /* Optional (NULL if not offered): run a whole sequence of nodes at once, e.g. to capture
     * them into a CUDA graph. Returning QVL_E_UNSUPPORTED makes qvl run node by node. */
    qvl_status (*run_graph)(qvl_backend *be, const qvl_node *const *nodes, size_t n_nodes,
                            qvl_error *err);

    uint32_t n_kernels;           /* entries in kernels[]; ops >= n_kernels are unsupported */
    const qvl_kernel_fn *kernels; /* indexed by qvl_op; NULL = unsupported */
} qvl_backend_iface;

typedef const qvl_backend_iface *(*qvl_backend_entry_fn)(void);

/* Optional second symbol, for qvl-bench on devices qvl cannot probe from the host (GPUs): the
 * device's own ceilings, measured by the backend now. read_gbs: a streaming read of a buffer
 * of about `bytes` in device memory (1e9 bytes/s); fma_gflops: fp32 FMA loops on registers
 * over the whole device (an FMA counts 2). A separate symbol, so the vtable (and the ABI
 * version) do not change; host-memory backends need not export it. */
#define QVL_BACKEND_PROBE_SYMBOL "qvl_backend_probe"
typedef struct qvl_device_probe {
    double read_gbs;
    double fma_gflops;
    size_t bytes;  /* buffer the read probe streamed through */
    char kind[48]; /* which loops ran, e.g. "cuda fp32 fma, 128-bit loads" */
} qvl_device_probe;
typedef qvl_status (*qvl_backend_probe_fn)(qvl_backend *be, size_t bytes, qvl_device_probe *out,
                                           qvl_error *err);

/* The checks every backend needs before running a node, done once here: the inputs fit the op
 * (qvl_op_infer: presence, dtypes, shapes, params) and the output descriptor is the one the op
 * produces (contiguous, or the alias VIEW/STORE_ROWS describe). A backend adds only its own
 * limits (dtypes or layouts its kernels do not handle) on top. */
qvl_status qvl_node_check(const qvl_node *node, qvl_error *err);

/* The kernel for op, or NULL when the backend has none. */
static inline qvl_kernel_fn qvl_backend_kernel(const qvl_backend_iface *iface, qvl_op op) {
    if (!iface || (uint32_t)op >= iface->n_kernels || !iface->kernels) return NULL;
    return iface->kernels[op];
}

#ifdef __cplusplus
}
#endif
#endif
