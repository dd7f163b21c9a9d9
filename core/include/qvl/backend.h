/* The backend ABI: what a compute backend plugin implements. The helpers a plugin may call
 * (and that qvl calls to ask a backend about a node) are in backend_helpers.h.
 *
 * A backend is a shared object (libqvl-<name>.so) that exports ONE symbol,
 *
 *     const qvl_backend_iface *qvl_backend_entry(void);
 *
 * returning a pointer to a static, constant table. qvl loads it with dlopen (see registry.h),
 * reads `abi` first and refuses the table unless it equals QVL_BACKEND_ABI (no other field is
 * read before that), calls init() with the options written in plugins.yaml, and from then on
 * runs graphs by calling one kernel per node.
 *
 * Memory: the backend owns its memory. qvl asks for buffers (buffer_alloc) and addresses
 * inside them are plain `void *` "backend addresses": host pointers for CPU backends, device
 * addresses for GPUs. qvl does pointer arithmetic on them (base + byte offset) but never
 * dereferences them unless describe() says host_memory is true; data moves through
 * upload/download. A backend whose buffers are host memory may offer buffer_wrap_host so that
 * weights mapped from a file are used in place, without a copy.
 *
 * Which nodes a backend runs: core owns the one contract of every op (qvl_node_check in
 * backend_helpers.h: presence, dtypes, shapes, strides, params, output descriptor). A backend
 * only declares what it accepts within that contract:
 *   - ops[op].kernel: NULL means the op is not supported at all;
 *   - ops[op].dtypes[slot]: the dtypes its kernel reads in that input slot (0 = the base
 *     dtypes, QVL_DTYPES_BASE, where the contract allows them);
 *   - accepts(): optional, for limits a table cannot say (a maximum head size, an option
 *     from plugins.yaml).
 * A node is supported when all three say yes (qvl_backend_check). The fusion pass asks before
 * it rewrites primitive ops into a fused op, so a backend with primitive kernels only still
 * runs every model graph. Ops are only ever appended to the op list, so a plugin built when
 * there were fewer ops reports n_ops smaller than QVL_OP_COUNT and the missing ones count as
 * unsupported. Kernels may run asynchronously (GPU streams); synchronize() waits for them.
 *
 * Lifetime: the registry loads a plugin with dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE).
 * Unloading calls release() once per init(), then dlclose(), which never unmaps the library:
 * its code and data stay mapped until the process exits. So threads a backend's libraries
 * keep after release() (an OpenMP runtime's, a BLAS pool's) and their exit-time destructors
 * never run in unmapped pages. A backend that starts threads of its own should still join
 * them in release() (nothing of an instance may run after release() returns), and may not
 * assume its library is reloaded fresh: init() after release() in one process sees the
 * static state the last release() left. One process may also hold several instances of one
 * backend at once (a model's targets, qvl-graph's cross-check).
 *
 * Fallback: a node the backend refuses (ops[], dtypes or accepts()) runs on the next backend
 * of plugins.yaml that accepts it, unless the backend's entry says `fallback: false`
 * (split.h). Fusion asks the backend that will run the fused node.
 *
 * docs/writing-a-backend.md walks through writing one; backends/reference is the oracle. */
#ifndef QVL_BACKEND_H
#define QVL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/ops.h"
#include "qvl/status.h"
#include "qvl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below changes layout or meaning. */
#define QVL_BACKEND_ABI 4u /* 4: NORM_LINEAR gains params.act, and qvl_act is renumbered (NONE = 0) */
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

/* A set of dtypes as a bit mask: QVL_DTYPE_BIT(QVL_F32) | QVL_DTYPE_BIT(QVL_F16). */
#define QVL_DTYPE_BIT(t) (1u << (unsigned)(t))
/* "f32 data only": for slots the contract fixes to i32 (ids, positions, `at`) the i32 bit
 * keeps them accepted. A backend with f32 kernels only puts this in every slot it reads. */
#define QVL_DTYPES_F32_ONLY (QVL_DTYPE_BIT(QVL_F32) | QVL_DTYPE_BIT(QVL_I32))
/* The dtypes of ABI 2's first op contract. A slot declared 0 accepts these (where the
 * contract allows them) and nothing else: a dtype added to qvl later is never claimed by a
 * backend that was written before it existed; a backend must name it to take it. */
#define QVL_DTYPES_BASE                                                                      \
    (QVL_DTYPE_BIT(QVL_F32) | QVL_DTYPE_BIT(QVL_F16) | QVL_DTYPE_BIT(QVL_BF16) |            \
     QVL_DTYPE_BIT(QVL_Q8_0) | QVL_DTYPE_BIT(QVL_I32))

/* What a backend runs for one op. */
typedef struct qvl_op_impl {
    qvl_kernel_fn kernel;         /* NULL: the op is not supported */
    uint32_t dtypes[QVL_MAX_SRC]; /* per input slot; 0 = QVL_DTYPES_BASE */
} qvl_op_impl;

/* A generic function pointer, for extensions found by name (cast to the extension's type). */
typedef void (*qvl_proc_fn)(void);

typedef struct qvl_backend_iface {
    uint32_t abi;            /* QVL_BACKEND_ABI the plugin was built against: read first */
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

    /* The op table, indexed by qvl_op; ops >= n_ops are unsupported. VIEW never reaches a
     * kernel (qvl computes view addresses itself). */
    uint32_t n_ops;
    const qvl_op_impl *ops;

    /* Optional (NULL: no limits beyond ops[]): this backend's own limits. Asked only about
     * nodes that the contract and ops[] accept; tensors' data may be NULL when asked. Returns
     * QVL_OK, or QVL_E_UNSUPPORTED with the reason in err (err may be NULL). */
    qvl_status (*accepts)(qvl_backend *be, const qvl_node *node, qvl_error *err);

    /* Optional (NULL if not offered): the hook that receives the whole fused graph, as the
     * executor's node list in execution order, e.g. to capture it into a CUDA graph or to
     * launch independent neighbours together. Every node in it is supported. Returning
     * QVL_E_UNSUPPORTED makes qvl run node by node. */
    qvl_status (*run_graph)(qvl_backend *be, const qvl_node *const *nodes, size_t n_nodes,
                            qvl_error *err);

    /* Optional (NULL: no extensions): an extension function by name, or NULL when this
     * backend does not offer it. Known names are the QVL_EXT_* below. */
    qvl_proc_fn (*get_proc_address)(const char *name);
} qvl_backend_iface;

typedef const qvl_backend_iface *(*qvl_backend_entry_fn)(void);

/* Extension "qvl_backend_probe", for qvl-bench on devices qvl cannot probe from the host
 * (GPUs): the device's own ceilings, measured by the backend now. read_gbs: a streaming read
 * of a buffer of about `bytes` in device memory (1e9 bytes/s); fma_gflops: fp32 FMA loops on
 * registers over the whole device (an FMA counts 2). Host-memory backends need not offer it. */
#define QVL_EXT_PROBE "qvl_backend_probe"
typedef struct qvl_device_probe {
    double read_gbs;
    double fma_gflops;
    size_t bytes;  /* buffer the read probe streamed through */
    char kind[48]; /* which loops ran, e.g. "cuda fp32 fma, 128-bit loads" */
} qvl_device_probe;
typedef qvl_status (*qvl_backend_probe_fn)(qvl_backend *be, size_t bytes, qvl_device_probe *out,
                                           qvl_error *err);

/* Extension "qvl_backend_scratch", for placement (how much of a device a graph takes before it
 * runs): the device memory the backend's kernel for `node` would hold beside the graph's arena
 * (scratch, workspaces), asked with the node's tensors' data NULL as for accepts(). A backend
 * keeps such memory in slots of its own, each grown to the largest any node asked of it and
 * shared by every node after, so the function raises slot_bytes[i] to what the node needs of
 * slot i (i < QVL_SCRATCH_SLOTS) and leaves the rest alone: over a graph's nodes the array
 * ends with each slot's size, and their sum is what the graph grows. A backend without it
 * holds nothing beside its buffers. */
#define QVL_EXT_SCRATCH "qvl_backend_scratch"
#define QVL_SCRATCH_SLOTS 8
typedef void (*qvl_backend_scratch_fn)(qvl_backend *be, const qvl_node *node,
                                       size_t slot_bytes[QVL_SCRATCH_SLOTS]);

/* Extensions "qvl_backend_host_alloc" and "qvl_backend_host_free", offered together, for host
 * buffers that downloads fill often (a batched step's logits): host memory this instance's
 * download() writes and upload() reads directly, without a copy through memory of its own
 * (page-locked memory for a GPU's DMA). host_alloc returns NULL when it cannot (the caller
 * then uses malloc); host_free takes only what host_alloc of the same instance returned, and
 * every such block is freed before release(). Host-memory backends need not offer them. */
#define QVL_EXT_HOST_ALLOC "qvl_backend_host_alloc"
#define QVL_EXT_HOST_FREE "qvl_backend_host_free"
typedef void *(*qvl_backend_host_alloc_fn)(qvl_backend *be, size_t bytes);
typedef void (*qvl_backend_host_free_fn)(qvl_backend *be, void *ptr);

#ifdef __cplusplus
}
#endif
#endif
