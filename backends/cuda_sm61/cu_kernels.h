/* The launchers of the cuda_sm61 kernels: plain C declarations shared by the host glue (C)
 * and the kernel files (CUDA C++).
 *
 * Every launcher queues its kernel on `stream` and returns the launch's cudaError_t as an int
 * (0 = cudaSuccess); it never synchronizes. Tensors travel as cu_view, a by-value copy of the
 * descriptor plus the device address, so kernels read any strided view and every dtype the
 * reference reads, converting to f32 on load. Arithmetic is f32 throughout (Pascal: no fp16
 * math, no bf16, no tensor cores). */
#ifndef QVL_CU_KERNELS_H
#define QVL_CU_KERNELS_H

#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *cu_stream; /* cudaStream_t without including CUDA headers in C */

typedef struct cu_view {
    const void *data; /* device address of element 0 (NULL for an absent optional input) */
    int32_t dtype;    /* qvl_dtype */
    int32_t ndim;     /* 1..4 */
    int64_t shape[QVL_MAX_DIMS];
    int64_t stride[QVL_MAX_DIMS]; /* elements */
} cu_view;

/* A matrix operand of a matmul: rows x cols read through strides, batch b at b*batch_stride. */
typedef struct cu_mat {
    const void *data;
    int32_t dtype;
    int64_t rows, cols;
    int64_t row_stride, col_stride, batch_stride;
} cu_mat;

/* ---- cu_elementwise.cu ---- */
typedef enum cu_unary { CU_SCALE = 0, CU_SILU, CU_GELU_TANH, CU_GELU_ERF } cu_unary;
/* out (contiguous f32, shape of x) = f(x). */
int cu_launch_unary(cu_stream s, cu_unary op, float scale, cu_view x, float *out);
/* out = a + b or a * b; b is already aligned to a's 4 dims (stride 0 where it broadcasts). */
int cu_launch_binary(cu_stream s, int is_mul, cu_view a, cu_view b4, float *out);
/* Gated/plain activation of the MLP into contiguous h [rows, F]: silu(a)*up, gelu_tanh(a)
 * or gelu_erf(a) (act is qvl_act; up.data NULL when absent). */
int cu_launch_mlp_act(cu_stream s, int act, cu_view a, cu_view up, float *h);

/* ---- cu_norm.cu ---- */
/* One block per row of x (rows of the innermost dim): RMS or layer norm into out rows of D. */
int cu_launch_norm(cu_stream s, int layer, float eps, cu_view x, cu_view gamma, cu_view beta,
                   float *out);

/* ---- cu_rope.cu ---- */
int cu_launch_rope(cu_stream s, int mode, float theta, const int32_t sections[4], cu_view x,
                   cu_view pos, float *out);

/* STORE_ROWS_AT and STORE_SLOT_ROWS (launched by cu_copy.cu's cu_launch_store_rows_at, below):
 * src rows into dst, converting to dst_dtype. slot NULL (STORE_ROWS_AT): dst is [dst_rows, ...]
 * and the rows go from row at[0] on (device memory); nothing is written when at[0] is outside
 * [0, dst_rows - src rows]. slot set (STORE_SLOT_ROWS): dst is [n_slots, dst_rows, ...] and
 * source row r goes to row at[r] of slot slot[r] (both [src rows] on the device); a row out of
 * range writes nothing. */
typedef struct cu_store_at_job {
    cu_view src;
    void *dst;
    int32_t dst_dtype;
    int64_t dst_rows;
    const int32_t *at;
    const int32_t *slot;
    int64_t n_slots;
} cu_store_at_job;

/* NORM_ROPE: RMS norm of every head of x [N, H, D] (gamma [D]), then the rotation as
 * cu_launch_rope; D <= CU_NORM_ROPE_MAX_D (the heads sit in shared memory). One or two
 * independent jobs per launch. A job whose store.dst is set also writes its output rows as a
 * STORE_ROWS_AT from out would (store.src unused): the decode step's k rotation and K-cache
 * write in one. extra (NULL: none) is an independent STORE_ROWS_AT run by blocks of the same
 * launch (the V-cache write). */
#define CU_NORM_ROPE_MAX_D 512
typedef struct cu_norm_rope_job {
    cu_view x, pos, gamma;
    float *out;
    int32_t mode, sections[3];
    float theta, eps;
    cu_store_at_job store;
} cu_norm_rope_job;
int cu_launch_norm_rope(cu_stream s, const cu_norm_rope_job *jobs, int n_jobs,
                        const cu_store_at_job *extra);

/* ---- cu_softmax.cu ---- */
int cu_launch_softmax(cu_stream s, cu_view x, float *out);
int cu_launch_argmax(cu_stream s, cu_view x, int32_t *out);
/* Copy s to out with -inf where hidden: causal (seg == NULL; n_past read from device memory
 * at[0] when at is not NULL) or different segments (seg: device bounds [n_bounds], already
 * validated on the host). */
int cu_launch_mask(cu_stream s, cu_view x, int64_t n_past, const int32_t *at, const int32_t *seg,
                   int64_t seg_stride, int64_t n_bounds, float *out);

/* ---- cu_attention.cu ---- */
/* mask: qvl_mask_kind; seg as for cu_launch_mask; at (device, CAUSAL_AT) holds n_past. Needs
 * D <= CU_ATTN_MAX_D. splits (from cu_attention_splits) > 1 needs part: device scratch of
 * cu_attention_part_floats floats whose first CU_ATTN_COUNTERS words are zero before the first
 * launch (per-row counters the kernel leaves at zero again; the rest holds partials). Splits
 * are only used for fewer than CU_ATTN_COUNTERS (query, head) rows. */
#define CU_ATTN_MAX_D 512
#define CU_ATTN_MAX_SPLITS 64
#define CU_ATTN_COUNTERS 128
int cu_attention_splits(int64_t N, int64_t Hq, int64_t Hkv, int64_t L);
static inline int64_t cu_attention_part_floats(int64_t N, int64_t Hq, int64_t D, int splits) {
    return splits > 1 ? CU_ATTN_COUNTERS + N * Hq * splits * (D + 2) : 0;
}
int cu_launch_attention(cu_stream s, cu_view q, cu_view k, cu_view v, float scale, int mask,
                        int64_t n_past, const int32_t *at, const int32_t *seg,
                        int64_t seg_stride, int64_t n_bounds, int splits, float *part,
                        float *out);
/* ATTENTION_SLOTS: k and v [L, Hkv, D] are slot 0 of pools of n_slots slots, slot_elems
 * elements apart; query i reads slot slot[i], keys [0, at[i]] (slot and at: [N] device i32,
 * unit stride; a row out of range gets zeros). splits and part as for cu_launch_attention. */
int cu_launch_attention_slots(cu_stream s, cu_view q, cu_view k, cu_view v, float scale,
                              const int32_t *slot, const int32_t *at, int64_t n_slots,
                              int64_t slot_elems, int splits, float *part, float *out);


/* ---- cu_matmul.cu ---- */
/* out[b][m][col0 + n] (row length ldo) = act(a_b[m] . w_{b / per_w}[n] + bias[n])
 * (+ res[b*M+m][n]) for b < batches, m < M, n < w.rows. a rows come from view a (row b*M + m
 * of its [..., K] rows); bias / res have NULL data when absent; res is read through its view
 * like a (rows of N); act is a qvl_act (NONE, GELU_TANH or GELU_ERF). */
int cu_launch_matmul(cu_stream s, cu_view a, int64_t batches, int64_t M, cu_mat w,
                     int64_t per_w, cu_view bias, cu_view res, float *out, int64_t ldo,
                     int64_t col0, void *q8_scratch, int q8_ready, int act);
/* NORM_LINEAR's projections ws[0..n) (biases[i]: NULL data when absent) into consecutive column
 * ranges of out from col0, as one launch: when their int8 rows are already in q8_scratch (the
 * norm quantised them) and they are q4_k / q6_k of one K, for 2-8 rows; or when they share an
 * f16 / bf16 dtype and K, for the rows the register GEMV takes (a: the f32 rows). Returns -1
 * with nothing queued where neither applies (QVL_CUDA_GEMV_GROUP=0 among them): run them one
 * by one then. */
int cu_launch_matmul_group(cu_stream s, cu_view a, int64_t M, const cu_mat *ws,
                           const cu_view *biases, int n, float *out, int64_t ldo, int64_t col0,
                           void *q8_scratch, int act);
/* Does cu_launch_matmul run these weights on the int8 kernels of cu_matmul_int8.cu (q4_k /
 * q6_k GEMVs, the q8_0 / q4_k / q6_k GEMM)? Two such matmuls of the same activation rows
 * (same rows, same K) quantise them the same way into the same scratch bytes, so the second
 * may pass q8_ready = 1 (the quantisation is skipped; NORM_LINEAR's projections). */
int cu_matmul_int8_takes(cu_mat w, int64_t batches, int64_t M);
/* Fills a matmul's q8_scratch with int8 activation rows for a later cu_launch_matmul of `rows`
 * rows with q8_ready = 1 (only where cu_matmul_int8_takes holds for every such matmul), straight
 * from their source instead of from an f32 copy (cu_quantize.cu): the RMS / layer norm of x
 * (NORM_LINEAR; beta.data NULL for RMS norm), or the MLP's activation of a (qvl_act, not
 * QVL_ACT_NONE; up.data NULL when absent). The rows are the innermost dim, a multiple of 32. */
int cu_launch_norm_quantize(cu_stream s, int layer, float eps, cu_view x, cu_view gamma,
                            cu_view beta, int64_t rows, void *q8_scratch);
int cu_launch_act_quantize(cu_stream s, int act, cu_view a, cu_view up, int64_t rows,
                           void *q8_scratch);
/* Device scratch bytes cu_launch_matmul needs as q8_scratch for these shapes: for the int8
 * decode path (q8_0 weights, few rows: activations quantised to int8 blocks, __dp4a), or for
 * the partial sums of a prefill GEMM whose K is split across blocks (more rows; at most
 * 64 MiB); 0 when neither applies (q8_scratch may then be NULL: the f32 path, no split). */
int64_t cu_matmul_q8_scratch_bytes(cu_mat w, int64_t batches, int64_t M);

/* At most this many rows per batch run on the GEMV kernels (a warp per output column, each
 * weight row read once for all rows): a server's busy slots decoding together. The kernels are
 * instantiated for row counts up to 1, 4, 8 and 16 (the accumulators live in registers), so
 * a step pays the registers of the next count up, not those of 16 rows. */
#define CU_GEMV_MAX_ROWS 16
/* The fused kernels (cu_gemv_fused.cu) hold the rows in shared memory: 8 at most. */
#define CU_FUSED_MAX_ROWS 8

/* ---- cu_gemv_fused.cu ---- */
/* NORM_LINEAR / MLP_RESIDUAL / MATMUL for a few rows in one launch: the norm or activation
 * rows (or the input rows as they are) are built in shared memory by every block, then up
 * to n_proj GEMVs write the concatenated output out [M, ldo] (+ bias[p], + res when res.data
 * is not NULL). */
enum { CU_FUSED_NORM = 0, CU_FUSED_ACT = 1, CU_FUSED_COPY = 2 };
/* Bytes of activation rows a block holds (dynamic shared memory). A block may use 48 KiB of
 * shared memory in all without opting in, and the kernels' own static arrays count too. */
#define CU_FUSED_MAX_SMEM (47 * 1024)
/* Can these 2-D weights run fused over M rows after this prologue (layer: a layer norm, not
 * RMS)? All f32, f16, bf16 with 16-byte rows, or all q8_0, the rows fitting in shared memory;
 * or q4_k / q6_k, whose rows are taken in chunks of K except after an RMS norm, and never
 * after a layer norm. */
int cu_gemv_fused_fits(const cu_mat *w, int n_proj, int64_t M, int prologue, int layer);
/* prologue CU_FUSED_NORM: layer_or_act = layer (0 RMS, 1 layer norm), x = the rows,
 * aux = gamma, beta (data NULL when absent). CU_FUSED_ACT: layer_or_act = qvl_act, x = a,
 * aux = up (data NULL when absent). CU_FUSED_COPY: x = the rows (aux, beta unused).
 * sm_count sizes the grid. */
int cu_launch_gemv_fused(cu_stream s, int prologue, int layer_or_act, float eps, cu_view x,
                         cu_view aux, cu_view beta, cu_view res, int64_t M, const cu_mat *w,
                         const cu_view *bias, int n_proj, float *out, int64_t ldo,
                         int sm_count);

/* ---- cu_copy.cu ---- */
/* out [N, D] f32 = table rows ids[n] (ids validated on the host). */
int cu_launch_get_rows(cu_stream s, cu_view table, cu_view ids, float *out);
/* Contiguous copy of x in its own dtype (f32, f16, bf16, i32: element bytes; q8_0: blocks). */
int cu_launch_cont(cu_stream s, cu_view x, void *out);
/* dst (contiguous, dtype f32/f16/bf16) elements from first_elem on = src converted. */
int cu_launch_store_rows(cu_stream s, cu_view src, void *dst, int32_t dst_dtype,
                         int64_t first_elem);
/* STORE_ROWS_AT or STORE_SLOT_ROWS (cu_store_at_job above): one or two independent jobs per
 * launch. */
int cu_launch_store_rows_at(cu_stream s, const cu_store_at_job *jobs, int n_jobs);

/* ---- cu_scatter.cu ---- */
/* out [N, D] = x with src rows set into (add = 0) or added to (add = 1) rows idx[k], k in
 * order (indices validated on the host). */
int cu_launch_scatter_rows(cu_stream s, int add, cu_view x, cu_view idx, cu_view src,
                           float *out);

#ifdef __cplusplus
}
#endif
#endif
