/* Device helpers every kernel file shares: loading any dtype as f32 through a view, storing
 * f16/bf16, offsets of flat indices and rows, warp and block reductions.
 *
 * Only what compute capability 6.1 offers is used: conversions through the PTX cvt
 * instructions (storage only, never fp16 arithmetic), bf16 by shifting, __shfl_xor_sync. */
#ifndef QVL_CU_DEVICE_CUH
#define QVL_CU_DEVICE_CUH

#include <math.h>
#include <stdint.h>

#include "cu_kernels.h"
#include "qvl/ops.h"

#define CU_THREADS 256 /* threads per block of the flat (one element per thread) kernels */
#define CU_WARP 32

/* Blocks for n elements at CU_THREADS each, capped: the kernels loop with a grid stride. */
static inline unsigned cu_blocks_for(int64_t n) {
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    if (b < 1) b = 1;
    if (b > 65535) b = 65535;
    return (unsigned)b;
}

/* The current device's SM count, or `unknown` where it cannot be read (launch planning only:
 * each caller picks the count its plan falls back on). */
static inline int cu_current_sm_count(int unknown) {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
        return unknown;
    return sms;
}

/* Blocks for a kernel whose blocks loop over `wanted` units of work with a grid stride: all of
 * them, but at most one wave (as many as the SMs hold at once at this block size and shared
 * memory; 16 SMs where the count is unknown). */
template <typename Kernel>
static unsigned cu_one_wave_blocks(Kernel k, unsigned threads, size_t smem, int64_t wanted,
                                   int sm_count) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, (int)threads, smem) !=
            cudaSuccess ||
        per_sm < 1)
        per_sm = 1;
    int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 16) * per_sm;
    int64_t blocks = wanted < cap ? wanted : cap;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

/* 1 where clang compiles the device code (the Pascal build, the sm_61 check), 0 under nvcc:
 * for the few places where the formulation that keeps clang's code from spilling costs nvcc's
 * code registers (both give the same results). */
#if defined(__clang__) && !defined(__NVCC__)
#define CU_CLANG_DEVICE 1
#else
#define CU_CLANG_DEVICE 0
#endif

/* a[i] for a run-time i in [0, N), read with constant indices only. Kernels take their
 * arguments by value, and indexing such an argument's array with a run-time value makes
 * clang copy the whole argument struct to local memory (nvcc indexes parameter space
 * directly); N - 1 selects cost less than that copy. i outside [0, N) gives a[0]. */
template <int N, typename T>
__device__ __forceinline__ T cu_pick(const T (&a)[N], int i) {
    T r = a[0];
#pragma unroll
    for (int j = 1; j < N; j++)
        if (i == j) r = a[j];
    return r;
}

/* Innermost stride of v (elements), read without run-time indexing (cu_pick). */
__device__ __forceinline__ int64_t cu_inner_stride(const cu_view &v) {
    return cu_pick(v.stride, v.ndim - 1);
}

__device__ __forceinline__ float cu_f16_to_f32(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

/* Round to nearest even; Inf on overflow; NaN stays NaN. */
__device__ __forceinline__ uint16_t cu_f32_to_f16(float f) {
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float cu_bf16_to_f32(uint16_t b) {
    return __uint_as_float((uint32_t)b << 16);
}

/* The same rounding as qvl_f32_to_bf16 (nearest even, NaN kept quiet). */
__device__ __forceinline__ uint16_t cu_f32_to_bf16(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* Element at element offset off of storage of dtype dt, as f32, in two steps: cu_load_raw
 * loads its bits, cu_raw_to_f32 converts them. Loops that load several elements issue every
 * raw load before converting any: a conversion right after its load waits for the data, and
 * inside a dtype branch the compiler then cannot put the next load in flight first, so such a
 * loop makes one memory round trip per element (decode attention over an f16 cache ran slower
 * than over an f32 one, with half the bytes). q8_0 blocks are 34 bytes and so not 2-byte
 * aligned in general: the scale is read byte by byte. Raw q8_0: the scale's f16 bits, the
 * quant in bits 16-23. */
__device__ __forceinline__ uint32_t cu_load_raw(const void *data, int32_t dt, int64_t off) {
    switch (dt) {
    case QVL_F32:
    case QVL_I32: return ((const uint32_t *)data)[off];
    case QVL_F16:
    case QVL_BF16: return ((const uint16_t *)data)[off];
    case QVL_Q8_0: {
        const unsigned char *b =
            (const unsigned char *)data + (off / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
        return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2 + off % QVL_Q8_0_BLOCK] << 16);
    }
    default: return 0u; /* the host checks reject other dtypes */
    }
}

__device__ __forceinline__ float cu_raw_to_f32(int32_t dt, uint32_t r) {
    switch (dt) {
    case QVL_F32: return __uint_as_float(r);
    case QVL_F16: return cu_f16_to_f32((uint16_t)r);
    case QVL_BF16: return cu_bf16_to_f32((uint16_t)r);
    case QVL_Q8_0: return cu_f16_to_f32((uint16_t)(r & 0xffffu)) * (float)(int8_t)(r >> 16);
    case QVL_I32: return (float)(int32_t)r;
    default: return 0.0f;
    }
}

__device__ __forceinline__ float cu_load(const void *data, int32_t dt, int64_t off) {
    return cu_raw_to_f32(dt, cu_load_raw(data, dt, off));
}

/* Byte i of unaligned storage (q4_k / q6_k blocks sit at any 2-byte boundary in a view). */
__device__ __forceinline__ uint32_t cu_byte(const unsigned char *p, int i) { return p[i]; }

/* Element i (0..255) of a q4_k super-block at b: d*sc_j*q - dmin*m_j, each product exact in
 * f32 (docs/QUANT.md), so this is the host's qvl_q4_k_elem bit for bit. */
__device__ __forceinline__ float cu_q4k_elem(const unsigned char *b, int i) {
    int j = i / 32;
    const unsigned char *s = b + 4;
    uint32_t sc, m;
    if (j < 4) {
        sc = cu_byte(s, j) & 63;
        m = cu_byte(s, j + 4) & 63;
    } else {
        sc = (cu_byte(s, j + 4) & 0xF) | ((cu_byte(s, j - 4) >> 6) << 4);
        m = (cu_byte(s, j + 4) >> 4) | ((cu_byte(s, j) >> 6) << 4);
    }
    uint32_t byte = cu_byte(b, 16 + i / 64 * 32 + i % 32);
    uint32_t q = i % 64 < 32 ? byte & 0xF : byte >> 4;
    float d = cu_f16_to_f32((uint16_t)(cu_byte(b, 0) | (cu_byte(b, 1) << 8)));
    float dmin = cu_f16_to_f32((uint16_t)(cu_byte(b, 2) | (cu_byte(b, 3) << 8)));
    return d * (float)sc * (float)q - dmin * (float)m;
}

/* Element i of a q6_k super-block at b: d * sc[i/16] * (q - 32), exact in f32. */
__device__ __forceinline__ float cu_q6k_elem(const unsigned char *b, int i) {
    int h = i / 128, r = (i % 128) / 32, l = i % 32;
    uint32_t lo = cu_byte(b, 64 * h + 32 * (r % 2) + l);
    lo = r >= 2 ? lo >> 4 : lo & 0xF;
    uint32_t hi = (cu_byte(b, 128 + 32 * h + l) >> (2 * r)) & 3;
    int q = (int)(lo | (hi << 4)) - 32;
    float d = cu_f16_to_f32((uint16_t)(cu_byte(b, 208) | (cu_byte(b, 209) << 8)));
    return d * (float)(int8_t)cu_byte(b, 192 + i / 16) * (float)q;
}

/* cu_load plus the 4-bit super-block formats: for weights and embedding tables only, so the
 * activation loads of every other kernel keep cu_load's smaller switch. */
__device__ __forceinline__ float cu_load_w(const void *data, int32_t dt, int64_t off) {
    if (dt == QVL_Q4_K || dt == QVL_Q6_K) {
        const unsigned char *b = (const unsigned char *)data +
                                 (off / QVL_QK_K) * (dt == QVL_Q4_K ? 144 : 210);
        int i = (int)(off % QVL_QK_K);
        return dt == QVL_Q4_K ? cu_q4k_elem(b, i) : cu_q6k_elem(b, i);
    }
    return cu_load(data, dt, off);
}

__device__ __forceinline__ void cu_store(void *data, int32_t dt, int64_t off, float v) {
    switch (dt) {
    case QVL_F32: ((float *)data)[off] = v; break;
    case QVL_F16: ((uint16_t *)data)[off] = cu_f32_to_f16(v); break;
    case QVL_BF16: ((uint16_t *)data)[off] = cu_f32_to_bf16(v); break;
    default: break;
    }
}

/* Element `elem` of a q8_0 cache gets v, quantised with its 31 block mates: the 32 lanes of
 * a warp call this together, lane l holding element elem with elem % 32 == l (the store
 * kernels' thread layout: warps aligned to blocks, rows whole blocks). The rounding is
 * qvl_quantize_row_q8_0's (dtype.c), step by step: amax ignoring NaN, d = amax / 127
 * saturated to the largest f16, rounded to f16 (nearest even), then q = round(v / d) against
 * that stored d (an IEEE division; ties away from zero), clamped to +-127, NaN to 0. */
__device__ __forceinline__ void cu_store_q8_0_warp(void *data, int64_t elem, float v) {
    float amax = fmaxf(fabsf(v), 0.0f); /* NaN -> 0, as the host's comparison never lets it win */
    for (int o = CU_WARP / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.0f;
    if (d > 65504.0f) d = 65504.0f;
    uint16_t h = cu_f32_to_f16(d);
    float dq = cu_f16_to_f32(h);
    float x = dq > 0.0f ? v / dq : 0.0f;
    int q = x != x ? 0 : x >= 127.0f ? 127 : x <= -127.0f ? -127 : (int)roundf(x);
    unsigned char *b = (unsigned char *)data + (elem / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
    int lane = (int)(elem % QVL_Q8_0_BLOCK);
    if (lane == 0) { /* little-endian f16 scale; blocks are only 2-byte aligned */
        b[0] = (unsigned char)(h & 0xffu);
        b[1] = (unsigned char)(h >> 8);
    }
    b[2 + lane] = (unsigned char)(int8_t)q;
}

__device__ __forceinline__ float cu_view_load(const cu_view &v, int64_t off) {
    return cu_load(v.data, v.dtype, off);
}

__host__ __device__ __forceinline__ int64_t cu_nelem(const cu_view &v) {
    int64_t n = 1;
    for (int d = 0; d < v.ndim; d++) n *= v.shape[d];
    return n;
}

/* How a grid-stride loop over the n elements of v turns flat indices into offsets, decided
 * once per thread: a 64-bit division is a long subroutine on the GPU, so a dense row-major
 * view takes none and a view of fewer than 2^31 elements takes 32-bit ones. The loops over
 * dimensions are unrolled so that shape and stride are read at constant indices: a run-time
 * index makes nvcc copy the whole view to local memory in every thread (160 bytes a thread
 * for two views, which made plain element-wise kernels ten times slower than their memory
 * traffic). */
enum { CU_FLAT_DENSE = 0, CU_FLAT_32, CU_FLAT_64 };
__device__ __forceinline__ int cu_flat_kind(const cu_view &v, int64_t n) {
    int64_t expect = 1;
    bool dense = true;
#pragma unroll
    for (int d = QVL_MAX_DIMS - 1; d >= 0; d--) {
        if (d >= v.ndim) continue;
        if (v.shape[d] != 1 && v.stride[d] != expect) dense = false;
        expect *= v.shape[d];
    }
    if (dense) return CU_FLAT_DENSE;
    return n <= 0x7fffffff ? CU_FLAT_32 : CU_FLAT_64;
}

/* Element offset of flat (row-major) index i of v, by the kind cu_flat_kind gave for v (i < n
 * there, so under CU_FLAT_32 every dimension and index fits 31 bits). */
__device__ __forceinline__ int64_t cu_flat_at(const cu_view &v, int64_t i, int kind) {
    if (kind == CU_FLAT_DENSE) return i;
    int64_t off = 0;
    if (kind == CU_FLAT_32) {
        uint32_t r = (uint32_t)i;
#pragma unroll
        for (int d = QVL_MAX_DIMS - 1; d >= 0; d--) {
            if (d >= v.ndim) continue;
            uint32_t len = (uint32_t)v.shape[d];
            off += (int64_t)(r % len) * v.stride[d];
            r /= len;
        }
        return off;
    }
#pragma unroll
    for (int d = QVL_MAX_DIMS - 1; d >= 0; d--) {
        if (d >= v.ndim) continue;
        off += (i % v.shape[d]) * v.stride[d];
        i /= v.shape[d];
    }
    return off;
}

/* A grid-stride loop in rounds of CU_EW_UNROLL elements per thread, every load of a round
 * issued before the first result: with one element per thread too few bytes were in flight to
 * reach the memory's bandwidth (a third of it for the vision tower's 12.6 M-element GELU).
 * Elements i0 + u * stride (u < CU_EW_UNROLL) of n: load(i, in[u]) for those below n, then
 * store(i, in[u]) for each of them. Launch about n / CU_EW_UNROLL threads. */
#define CU_EW_UNROLL 4
template <int NIN, typename Load, typename Store>
__device__ __forceinline__ void cu_ew_rounds(int64_t n, Load load, Store store) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < n;
         i0 += CU_EW_UNROLL * stride) {
        float in[CU_EW_UNROLL][NIN];
#pragma unroll
        for (int u = 0; u < CU_EW_UNROLL; u++)
            if (i0 + u * stride < n) load(i0 + u * stride, in[u]);
#pragma unroll
        for (int u = 0; u < CU_EW_UNROLL; u++)
            if (i0 + u * stride < n) store(i0 + u * stride, in[u]);
    }
}

static inline unsigned cu_ew_blocks(int64_t n) {
    return cu_blocks_for((n + CU_EW_UNROLL - 1) / CU_EW_UNROLL);
}

/* Element offset of the first element of row r (rows = runs along the innermost dim). */
__device__ __forceinline__ int64_t cu_row_offset(const cu_view &v, int64_t r) {
    int64_t off = 0;
    for (int d = v.ndim - 2; d >= 0; d--) {
        off += (r % v.shape[d]) * v.stride[d];
        r /= v.shape[d];
    }
    return off;
}

/* cu_row_offset, indexing v's shape and strides with constants only (see cu_pick and
 * cu_flat_kind): with run-time indices clang's code spills and nvcc's copies the view to local
 * memory in every thread. (The decode GEMV of cu_matmul.cu keeps nvcc on the loop, where its
 * code does better.) */
__device__ __forceinline__ int64_t cu_row_offset_unrolled(const cu_view &v, int64_t r) {
    int64_t off = 0;
#pragma unroll
    for (int d = QVL_MAX_DIMS - 2; d >= 0; d--) {
        if (d > v.ndim - 2) continue;
        off += (r % v.shape[d]) * v.stride[d];
        r /= v.shape[d];
    }
    return off;
}

/* The row of dst (counting over all slots) that a store job's source row r of rows goes to,
 * or -1 when its place is out of range (see cu_store_at_job). */
__device__ __forceinline__ int64_t cu_store_row(const cu_store_at_job &p, int64_t r, int64_t rows) {
    if (p.slot) {
        int64_t sl = p.slot[r], a = p.at[r];
        return sl >= 0 && sl < p.n_slots && a >= 0 && a < p.dst_rows ? sl * p.dst_rows + a : -1;
    }
    int64_t first = p.at[0];
    return first >= 0 && first <= p.dst_rows - rows ? first + r : -1;
}

/* Block blk of nblk (grid-stride) of a store job; used by its own kernel and by launches that
 * carry one along (k_norm_rope). A q8_0 row is whole blocks (the contract), so a warp never
 * spans two rows there and skips or writes a block whole (cu_store_q8_0_warp). */
__device__ __forceinline__ void cu_store_rows_at_part(const cu_store_at_job &p, int64_t blk,
                                                      int64_t nblk) {
    int64_t n = cu_nelem(p.src), rows = p.src.shape[0], row_size = rows > 0 ? n / rows : 0;
    for (int64_t e = blk * blockDim.x + threadIdx.x; e < n; e += nblk * blockDim.x) {
        /* a decode step's row or a few: deciding the kind per thread costs more than it saves */
        float v = cu_view_load(p.src, cu_flat_at(p.src, e, CU_FLAT_64));
        int64_t o;
        if (p.slot) { /* a row's own place: its index (a 64-bit division) needed */
            int64_t r = e / row_size, to = cu_store_row(p, r, rows);
            if (to < 0) continue;
            o = to * row_size + (e - r * row_size);
        } else { /* rows from at[0] on, all or none (a prefill's thousands of rows too) */
            int64_t first = cu_store_row(p, 0, rows);
            if (first < 0) continue;
            o = first * row_size + e;
        }
        if (p.dst_dtype == QVL_Q8_0) cu_store_q8_0_warp(p.dst, o, v);
        else cu_store(p.dst, p.dst_dtype, o, v);
    }
}

/* float4 i (elements 4i .. 4i + 3) of a unit-stride f32, f16 or bf16 vector, in one 16- or
 * 8-byte load (the address aligned for it: the callers check on the host); of a q8_0 vector
 * (rows of whole blocks), in three 2-byte loads. As for cu_load, the load (cu_vec4_raw) and the
 * conversion (cu_vec4_cvt) are apart, so that loops issue all their loads first. Raw: f32 the
 * 4 words; f16/bf16 2 words of 2 halves; q8_0 x = the scale's bits, y = the 4 quants. */
template <int DT> /* the same for storage of a dtype known at compile time */
__device__ __forceinline__ uint4 cu_vec4_raw_as(const void *data, int64_t i) {
    if (DT == QVL_F32) return ((const uint4 *)data)[i];
    if (DT == QVL_Q8_0) { /* groups never straddle blocks; a block is 2-byte aligned */
        const uint16_t *b = (const uint16_t *)((const unsigned char *)data +
                                               (4 * i / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0));
        int pos = (int)(4 * i % QVL_Q8_0_BLOCK);
        return make_uint4(b[0], (uint32_t)b[1 + pos / 2] | ((uint32_t)b[2 + pos / 2] << 16), 0u, 0u);
    }
    uint2 h = ((const uint2 *)data)[i];
    return make_uint4(h.x, h.y, 0u, 0u);
}

__device__ __forceinline__ uint4 cu_vec4_raw(const cu_view &v, int64_t i) {
    if (v.dtype == QVL_F32) return cu_vec4_raw_as<QVL_F32>(v.data, i);
    if (v.dtype == QVL_Q8_0) return cu_vec4_raw_as<QVL_Q8_0>(v.data, i);
    return cu_vec4_raw_as<QVL_F16>(v.data, i);
}

__device__ __forceinline__ float4 cu_vec4_cvt(int32_t dt, uint4 r) {
    if (dt == QVL_F32)
        return make_float4(__uint_as_float(r.x), __uint_as_float(r.y), __uint_as_float(r.z),
                           __uint_as_float(r.w));
    if (dt == QVL_Q8_0) {
        float d = cu_f16_to_f32((uint16_t)r.x);
        return make_float4(d * (float)(int8_t)(r.y & 0xffu), d * (float)(int8_t)((r.y >> 8) & 0xffu),
                           d * (float)(int8_t)((r.y >> 16) & 0xffu), d * (float)(int8_t)(r.y >> 24));
    }
    uint16_t e[4] = {(uint16_t)(r.x & 0xffffu), (uint16_t)(r.x >> 16), (uint16_t)(r.y & 0xffffu),
                     (uint16_t)(r.y >> 16)};
    float f[4];
#pragma unroll
    for (int j = 0; j < 4; j++) f[j] = dt == QVL_F16 ? cu_f16_to_f32(e[j]) : cu_bf16_to_f32(e[j]);
    return make_float4(f[0], f[1], f[2], f[3]);
}

__device__ __forceinline__ float4 cu_vec4_load(const cu_view &v, int64_t i) {
    return cu_vec4_cvt(v.dtype, cu_vec4_raw(v, i));
}

__device__ __forceinline__ float cu_warp_sum(float x) {
    for (int o = CU_WARP / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ __forceinline__ float cu_warp_max(float x) {
    for (int o = CU_WARP / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Sum (or max) over the whole block; every thread gets the result. blockDim.x must be a
 * multiple of 32 and at most 1024; scratch holds 32 floats. */
__device__ __forceinline__ float cu_block_reduce(float x, bool is_max, float *scratch) {
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int n_warps = blockDim.x / CU_WARP;
    x = is_max ? cu_warp_max(x) : cu_warp_sum(x);
    __syncthreads(); /* scratch may still be read from a previous reduction */
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    float init = is_max ? -INFINITY : 0.0f;
    float y = lane < n_warps ? scratch[lane] : init;
    return is_max ? cu_warp_max(y) : cu_warp_sum(y);
}

/* The activations (cu_elementwise.cu, and the int8 quantiser that applies the MLP's). */
#define CU_SQRT_2_OVER_PI 0.79788456080286535588f
#define CU_SQRT_HALF 0.70710678118654752440f

__device__ __forceinline__ float cu_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float cu_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(CU_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float cu_gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * CU_SQRT_HALF));
}

/* Threads per row of the norm kernels: the fused norm-and-quantise kernel uses the same count,
 * so its sums, and the normalised values, are bit for bit those of k_norm. */
#define CU_NORM_THREADS 256

/* The statistics of RMS norm (layer = 0: mean 0) or layer norm over one row of D values at
 * x's offsets base + i * step, by the whole block (every thread gets them): the mean, then the
 * variance of the deviations (two passes, as the reference does, so the variance does not
 * lose digits to the mean). *inv = 1 / sqrt(var + eps). */
__device__ __forceinline__ void cu_norm_row_stats(int layer, float eps, const cu_view &x,
                                                  int64_t base, int64_t step, int64_t D,
                                                  float *scratch, float *mean, float *inv) {
    float mu = 0.0f;
    if (layer) {
        float sum = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) sum += cu_view_load(x, base + i * step);
        mu = cu_block_reduce(sum, false, scratch) / (float)D;
    }
    float sum_sq = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float v = cu_view_load(x, base + i * step) - mu;
        sum_sq += v * v;
    }
    *mean = mu;
    *inv = 1.0f / sqrtf(cu_block_reduce(sum_sq, false, scratch) / (float)D + eps);
}

/* Element i of a normalised row: (v - mean) * inv * gamma_i (+ beta_i) for layer norm,
 * (v * inv) * gamma_i for RMS norm. */
__device__ __forceinline__ float cu_norm_value(int layer, float v, float mean, float inv,
                                               const cu_view &gamma, const cu_view &beta,
                                               int64_t i) {
    float g = cu_view_load(gamma, i * gamma.stride[0]);
    if (!layer) return (v * inv) * g;
    float y = (v - mean) * inv * g;
    return beta.data ? y + cu_view_load(beta, i * beta.stride[0]) : y;
}

/* A 16-byte chunk of weights as f32: 4 f32 or 8 f16/bf16 values into wv. */
template <int DT>
__device__ __forceinline__ void cu_chunk_unpack(uint4 q, float *wv) {
    uint32_t words[4] = {q.x, q.y, q.z, q.w};
    if (DT == QVL_F32) {
        for (int t = 0; t < 4; t++) wv[t] = __uint_as_float(words[t]);
    } else {
        for (int t = 0; t < 4; t++) {
            uint16_t lo = (uint16_t)(words[t] & 0xffffu);
            uint16_t hi = (uint16_t)(words[t] >> 16);
            wv[2 * t] = DT == QVL_F16 ? cu_f16_to_f32(lo) : cu_bf16_to_f32(lo);
            wv[2 * t + 1] = DT == QVL_F16 ? cu_f16_to_f32(hi) : cu_bf16_to_f32(hi);
        }
    }
}

/* One 16-byte chunk c of a weight row (4 f32 or 8 f16/bf16 weights) against M activation rows:
 * acc[m] += rows[m][c*per .. c*per + per) . w, with rows 16-byte aligned. Shared by the GEMV
 * kernels (rows in global memory) and the fused decode kernels (rows in shared memory). */
template <int DT, int MR = CU_GEMV_MAX_ROWS>
__device__ __forceinline__ void cu_chunk_fma(uint4 q, const float *const *rows, int64_t M,
                                             int64_t c, float *acc) {
    const int per = DT == QVL_F32 ? 4 : 8;
    float wv[8];
    cu_chunk_unpack<DT>(q, wv);
#pragma unroll
    for (int m = 0; m < MR; m++) {
        if (m >= M) break;
        const float4 *xr = (const float4 *)(rows[m] + c * per);
        float4 x0 = xr[0];
        float y = acc[m];
        y += x0.x * wv[0] + x0.y * wv[1] + x0.z * wv[2] + x0.w * wv[3];
        if (DT != QVL_F32) {
            float4 x1 = xr[1];
            y += x1.x * wv[4] + x1.y * wv[5] + x1.z * wv[6] + x1.w * wv[7];
        }
        acc[m] = y;
    }
}

#endif
