/* qvl-backend-ops: one conformance suite for every backend.
 *
 * A case is one node (op, params) over tensors that live in host "storages" (plain bytes). A
 * case is run on a backend by giving every storage its own buffer of that backend (upload),
 * pointing the node's tensors into those buffers at the same byte offsets, running the kernel,
 * synchronising and downloading the storage the output lives in. The oracle (normally the
 * reference) and the backend under test run the same case this way, and the two outputs are
 * compared with the tolerance of the op (conf_tolerance.c). One path for every backend:
 * host-memory backends go through their buffers too.
 *
 * Files: conf_case.c (building cases), conf_run.c (running one on a backend),
 * conf_tolerance.c (the tolerance table and the comparison), conf_gen_*.c (the cases of each
 * op), conf_errors.c (data-dependent errors), conf_main.c (the program). */
#ifndef QVL_CONF_H
#define QVL_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/ops.h"
#include "qvl/status.h"
#include "qvl/tensor.h"
#include "test_backend.h"

/* ---- random numbers (xorshift64*: the same sequence on every machine for a seed) ---- */

typedef struct conf_rng { uint64_t s; } conf_rng;

void conf_rng_seed(conf_rng *r, uint64_t seed);
uint64_t conf_rng_next(conf_rng *r);
/* Uniform in [lo, hi). */
float conf_frand(conf_rng *r, float lo, float hi);
/* Uniform in [lo, hi] (inclusive). */
int64_t conf_irand(conf_rng *r, int64_t lo, int64_t hi);
/* A size for a random case: mostly small odd ones, sometimes 1, sometimes just over a vector
 * width (8k+1, 16k+1, 32k+1), never above hi. */
int64_t conf_size(conf_rng *r, int64_t hi);

/* ---- cases ---- */

#define CONF_MAX_TENSORS 24
#define CONF_MAX_STORAGES 16

typedef struct conf_storage {
    unsigned char *host; /* the bytes every backend starts from */
    size_t bytes;
    size_t pad; /* where the storage starts in its buffer: varies alignment, element-aligned */
} conf_storage;

typedef struct conf_tensor {
    qvl_tensor_desc desc;
    int storage;
    size_t byte_off; /* of element 0 within the storage */
} conf_tensor;

typedef struct conf_case {
    qvl_op op;
    qvl_params params;
    int src[QVL_MAX_SRC]; /* tensor indices, -1 for an empty slot */
    int dst;
    int check; /* the tensor compared: dst, or the whole cache for STORE_ROWS(_AT) */
    conf_storage st[CONF_MAX_STORAGES];
    int n_st;
    conf_tensor t[CONF_MAX_TENSORS];
    int n_t;
    conf_rng *rng; /* for fills and paddings while the case is built */
    char what[256]; /* one line describing the case, for messages */
} conf_case;

/* A fresh case for op (every slot empty, no tensors). */
void conf_case_init(conf_case *c, qvl_op op, conf_rng *rng);
void conf_case_free(conf_case *c);
/* Appends printf-style text to c->what. */
void conf_describe(conf_case *c, const char *fmt, ...) QVL_PRINTF(2, 3);

/* A contiguous tensor with its own storage, filled with random values in [lo, hi) (q8_0:
 * random rows quantised; q4_k / q6_k: random rows whose 16-element groups vary in centre and
 * amplitude, quantised with the project's scale search, or its round-to-nearest mode above
 * 16K values; i32: integers in [lo, hi]). Returns the tensor index. */
int conf_rand(conf_case *c, qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi);
/* A contiguous i32 tensor holding values. */
int conf_i32(conf_case *c, int64_t n, const int32_t *values);
/* The output: contiguous, of dtype dt, its storage filled with NaN bytes (0xff) so that an
 * element a kernel forgets to write cannot match. */
int conf_out(conf_case *c, qvl_dtype dt, int ndim, const int64_t *shape);
/* A view into base's storage: own shape and strides (elements), element 0 at `offset`
 * elements past base's element 0 (a whole number of blocks for a block dtype). */
int conf_view(conf_case *c, int base, int ndim, const int64_t *shape, const int64_t *stride,
              int64_t offset);
/* Overwrites element i (row-major over t's shape) of tensor t in host storage (q8_0: NaN
 * only, which poisons the element's whole block). */
void conf_set(conf_case *c, int t, int64_t i, double v);

/* Element i (row-major over the shape) of a tensor read through its descriptor from storage
 * bytes `base` (the host copy or a download), as double. */
double conf_get(const conf_tensor *t, const unsigned char *base, int64_t i);
int64_t conf_nelem(const qvl_tensor_desc *d);

#define CONF_SHAPE(...) ((const int64_t[]){__VA_ARGS__})

/* ---- running ---- */

typedef enum conf_outcome {
    CONF_RAN,         /* the kernel returned QVL_OK; *out holds the check storage */
    CONF_UNSUPPORTED, /* the backend's supports() refused the node */
    CONF_FAILED       /* the kernel (or a buffer call) failed; err says why */
} conf_outcome;

/* Runs c on tb. On CONF_RAN, *out is a malloc'd copy of the check tensor's storage after the
 * run (caller frees). *kernel_status is what the kernel returned (QVL_OK unless CONF_FAILED
 * came from the kernel itself). */
conf_outcome conf_run(const qvl_test_backend *tb, const conf_case *c, unsigned char **out,
                      qvl_status *kernel_status, qvl_error *err);
/* The same, but with obey_supports false the kernel runs even when supports() refuses the
 * node (*supported says what it answered): kernels must refuse malformed nodes themselves. */
conf_outcome conf_run_kernel(const qvl_test_backend *tb, const conf_case *c, bool obey_supports,
                             bool *supported, unsigned char **out, qvl_status *kernel_status,
                             qvl_error *err);
/* Is the case well-formed by the op contract (qvl_op_infer, and the output descriptor the op
 * produces)? A case that is not is a bug in the generator. */
bool conf_contract_ok(const conf_case *c, qvl_error *err);

/* ---- comparing ---- */

/* Compares the check tensor in two downloads (oracle `want`, backend `got`) within op's
 * tolerance. Returns true when they agree; else writes the worst element into msg.
 * *closeness is the largest |got - want| / tolerance over the elements (0 when identical). */
bool conf_compare(const conf_case *c, const unsigned char *want, const unsigned char *got,
                  char *msg, size_t msg_size, double *closeness);
/* The tolerance of an op as text, for --verbose. */
const char *conf_tolerance_text(qvl_op op);

/* ---- cases of every op ---- */

/* Builds case number i (0-based) of an op: small i are fixed edge cases (shapes that cross
 * the blocking of known kernels), the rest random. */
typedef void (*conf_gen_fn)(conf_case *c, int i);

typedef struct conf_op_cases {
    qvl_op op;
    conf_gen_fn gen;
    int n_cases; /* the op's budget */
} conf_op_cases;

void conf_gen_get_rows(conf_case *c, int i);
void conf_gen_matmul(conf_case *c, int i);
void conf_gen_add(conf_case *c, int i);
void conf_gen_mul(conf_case *c, int i);
void conf_gen_scale(conf_case *c, int i);
void conf_gen_rms_norm(conf_case *c, int i);
void conf_gen_layer_norm(conf_case *c, int i);
void conf_gen_rope(conf_case *c, int i);
void conf_gen_softmax(conf_case *c, int i);
void conf_gen_argmax(conf_case *c, int i);
void conf_gen_silu(conf_case *c, int i);
void conf_gen_gelu_tanh(conf_case *c, int i);
void conf_gen_gelu_erf(conf_case *c, int i);
void conf_gen_mask_causal(conf_case *c, int i);
void conf_gen_mask_segments(conf_case *c, int i);
void conf_gen_cont(conf_case *c, int i);
void conf_gen_store_rows(conf_case *c, int i);
void conf_gen_norm_linear(conf_case *c, int i);
void conf_gen_attention(conf_case *c, int i);
void conf_gen_mlp_residual(conf_case *c, int i);
void conf_gen_set_rows(conf_case *c, int i);
void conf_gen_add_rows(conf_case *c, int i);
void conf_gen_store_rows_at(conf_case *c, int i);
void conf_gen_store_slot_rows(conf_case *c, int i);
void conf_gen_attention_slots(conf_case *c, int i);
void conf_gen_mask_causal_at(conf_case *c, int i);
void conf_gen_norm_rope(conf_case *c, int i);

/* Shared by the generators: a random float weight dtype (q8_0 only when allowed). */
qvl_dtype conf_weight_dtype(conf_rng *r, bool q8_allowed);
/* q4_k or q6_k, at random (rows of whole 256-element super-blocks). */
qvl_dtype conf_kquant_dtype(conf_rng *r);
/* A random small-weight dtype (gamma, beta, bias): f32, f16 or bf16. */
qvl_dtype conf_small_dtype(conf_rng *r);
/* An f32 input of the given shape, sometimes a strided view (rows padded, an offset, or a
 * permuted copy) so kernels see non-contiguous inputs where the contract allows them. */
int conf_input(conf_case *c, int ndim, const int64_t *shape, float lo, float hi);

/* ---- tallies and data-dependent errors (conf_errors.c) ---- */

typedef struct conf_tally {
    int passed, failed, unsupported;
    double closeness; /* the largest |diff| / tolerance seen among the passed cases */
} conf_tally;

/* Runs the data-dependent error cases of every op (of `only` alone unless it is
 * QVL_OP_COUNT) on the oracle and on tb, adding to tally[op]. verbose lists each case. */
void conf_check_errors(const qvl_test_backend *oracle, const qvl_test_backend *tb, qvl_op only,
                       bool verbose, conf_tally *tally);

#endif
