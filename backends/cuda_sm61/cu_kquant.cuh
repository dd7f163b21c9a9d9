/* The q4_k / q6_k pieces that the int8 (__dp4a) decode GEMVs share: k_gemv_k
 * (cu_matmul_int8.cu, activations quantised in global memory by cu_quantize.cu) and
 * k_gemv_fused_k (cu_gemv_fused_k.cu, activations quantised in shared memory). Layouts:
 * docs/QUANT.md.
 *
 * Activation rows are int8 blocks of 32 with da = max|x| / 127 per block and (for q4_k's mins)
 * sa = da * sum(q). A warp covers 4 neighbouring super-blocks per step, 8 lanes each ("part"
 * 0..7 of a super-block):
 * q4_k: part p reads the block's 16-byte header and 16 bytes of quants, bytes
 *   32c + 16h .. + 15 (c = p / 2, h = p % 2): the low nibbles are sub-block 2c, the high ones
 *   sub-block 2c + 1, 16 values each; the lanes with h = 0 add the mins' term of both.
 * q6_k: part p takes half hf = p / 4 and positions l0 = 8 (p % 4) .. l0 + 7 of all four
 *   quarters: 32 values, 8 in each 32-value activation block, one scale each.
 * Both keep a lane's share of a super-block in 8 words (cu_kraw), so a kernel whose columns
 * mix the two formats holds either in the same registers. */
#ifndef QVL_CU_KQUANT_CUH
#define QVL_CU_KQUANT_CUH

#include "cu_device.cuh"

#define CU_KQ_BLOCK 32 /* activation values per int8 block (one da, one sa) */

/* x (int8 quants in a word, each 0..63) minus 32 per byte, as signed int8: setting each byte's
 * top bit first keeps the subtraction from borrowing across bytes. */
__device__ __forceinline__ int cu_minus32(uint32_t x) {
    return (int)(((x | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
}

/* (float)i for |i| < 2^22, exactly, with an integer add and a float subtract: both full-rate
 * instructions, where the int-to-float conversion runs at a quarter of the FMA rate (Pascal and
 * later). Every int sum here is within 32 * 127 * 127 < 2^22 in magnitude. */
__device__ __forceinline__ float cu_i2f_small(int i) {
    return __int_as_float(i + 0x4B400000) - 12582912.0f; /* 0x4B400000 is 1.5 * 2^23 */
}

__device__ __forceinline__ uint32_t cu_ld16(const unsigned char *p) {
    return *(const uint16_t *)p;
}

/* Two 16-bit loads as one word (q8_0 and q6_k blocks are only 2-byte aligned). */
__device__ __forceinline__ uint32_t cu_ld32_2(const unsigned char *p) {
    return cu_ld16(p) | (cu_ld16(p + 2) << 16);
}

/* q4_k sub-block j's 6-bit scale and min from the 12 scale bytes held in words y (bytes 4-7 of
 * the block), z (8-11), w (12-15), without indexing an array at run time. */
__device__ __forceinline__ void cu_q4k_sc_m(uint32_t y, uint32_t z, uint32_t w, int j, int &sc,
                                            int &m) {
    int t = 8 * (j % 4);
    uint32_t by = (y >> t) & 0xffu, bz = (z >> t) & 0xffu, bw = (w >> t) & 0xffu;
    if (j < 4) {
        sc = (int)(by & 63u);
        m = (int)(bz & 63u);
    } else {
        sc = (int)((bw & 0xFu) | ((by >> 6) << 4));
        m = (int)((bw >> 4) | ((bz >> 6) << 4));
    }
}

/* A lane's share of one super-block as loaded.
 * q4_k: a = the 16-byte header (d, dmin, 12 scale bytes), b = its 16 bytes of quants.
 * q6_k: a = low-nibble words (quarters 0/2: 2 words, quarters 1/3: 2 words),
 *       b = (2 words of high bit pairs, 4 scales as bytes, d as f16 bits). */
struct cu_kraw {
    uint4 a, b;
};

template <int DT>
struct cu_kq; /* per format: bytes per super-block, the lane's load and dot product */

template <>
struct cu_kq<QVL_Q4_K> {
    static const int BB = 144;
    static __device__ __forceinline__ void load(const unsigned char *blk, int part, cu_kraw &r) {
        r.a = __ldg((const uint4 *)blk);
        r.b = __ldg((const uint4 *)(blk + 16 + 16 * part));
    }
    /* The lane's share of a super-block as integers and factors: lo / hi = the quants of
     * sub-blocks 2c and 2c + 1 (c = part / 2), dsc = d * their scales, dm = dmin * their mins
     * (0 for h = 1: the h = 0 lane adds the mins' term of both). */
    struct w_t {
        int lo[4], hi[4];
        float dsc0, dsc1, dm0, dm1;
    };
    static __device__ __forceinline__ void unpack_into(const cu_kraw &r, int part, w_t &w) {
        int c = part / 2, h = part % 2;
        int sc0, m0, sc1, m1;
        cu_q4k_sc_m(r.a.y, r.a.z, r.a.w, 2 * c, sc0, m0);
        cu_q4k_sc_m(r.a.y, r.a.z, r.a.w, 2 * c + 1, sc1, m1);
        float d = cu_f16_to_f32((uint16_t)(r.a.x & 0xffffu));
        float dmin = h == 0 ? cu_f16_to_f32((uint16_t)(r.a.x >> 16)) : 0.0f;
        w.dsc0 = d * (float)sc0, w.dsc1 = d * (float)sc1;
        w.dm0 = dmin * (float)m0, w.dm1 = dmin * (float)m1;
        uint32_t qw[4] = {r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
        for (int t = 0; t < 4; t++) {
            w.lo[t] = (int)(qw[t] & 0x0F0F0F0Fu);
            w.hi[t] = (int)((qw[t] >> 4) & 0x0F0F0F0Fu);
        }
    }
    static __device__ __forceinline__ w_t unpack(const cu_kraw &r, int part) {
        w_t w;
        unpack_into(r, part, w);
        return w;
    }
    /* One activation row's share: x0 = its 16 int8 values of sub-block 2c at the lane's
     * positions, x1 those of 2c + 1; da0/da1 and sa0/sa1 the two blocks' scales and sums. */
    static __device__ __forceinline__ float row(const w_t &w, int4 x0, int4 x1, float da0,
                                                float da1, float sa0, float sa1) {
        int s0 = __dp4a(w.lo[0], x0.x, __dp4a(w.lo[1], x0.y, __dp4a(w.lo[2], x0.z, __dp4a(w.lo[3], x0.w, 0))));
        int s1 = __dp4a(w.hi[0], x1.x, __dp4a(w.hi[1], x1.y, __dp4a(w.hi[2], x1.z, __dp4a(w.hi[3], x1.w, 0))));
        return da0 * (w.dsc0 * cu_i2f_small(s0)) + da1 * (w.dsc1 * cu_i2f_small(s1)) -
               (w.dm0 * sa0 + w.dm1 * sa1);
    }
    /* Activation offsets of the lane's share of super-block sb: values e .. e + 15 and
     * e + 32 .. e + 47, blocks b0 and b0 + 1. */
    static __device__ __forceinline__ int first_value(int sb, int part) {
        return sb * QVL_QK_K + 64 * (part / 2) + 16 * (part % 2);
    }
    static __device__ __forceinline__ int first_block(int sb, int part) {
        return sb * 8 + 2 * (part / 2);
    }
    /* Super-block sb against the rows m < M (MR at most): row m's quants at qa + m * lda,
     * its scales and sums at da / sa + m * ldb. The callers keep M * lda within an int (int
     * offsets need fewer registers than 64-bit row pointers: clang's sm_61 code spilled). */
    template <int MR>
    static __device__ __forceinline__ void dot(const cu_kraw &r, int part, int sb, int M,
                                               const int8_t *qa, int lda, const float *da,
                                               const float *sa, int ldb, float (&acc)[MR]) {
        int c = part / 2, h = part % 2;
        int sc0, m0, sc1, m1;
        cu_q4k_sc_m(r.a.y, r.a.z, r.a.w, 2 * c, sc0, m0);
        cu_q4k_sc_m(r.a.y, r.a.z, r.a.w, 2 * c + 1, sc1, m1);
        float d = cu_f16_to_f32((uint16_t)(r.a.x & 0xffffu));
        float dmin = h == 0 ? cu_f16_to_f32((uint16_t)(r.a.x >> 16)) : 0.0f;
        float dsc0 = d * (float)sc0, dsc1 = d * (float)sc1;
        float dm0 = dmin * (float)m0, dm1 = dmin * (float)m1;
        uint32_t qw[4] = {r.b.x, r.b.y, r.b.z, r.b.w};
        int lo[4], hi[4];
#pragma unroll
        for (int t = 0; t < 4; t++) {
            lo[t] = (int)(qw[t] & 0x0F0F0F0Fu);
            hi[t] = (int)((qw[t] >> 4) & 0x0F0F0F0Fu);
        }
        int e = sb * QVL_QK_K + 64 * c + 16 * h, b0 = sb * 8 + 2 * c;
#pragma unroll
        for (int m = 0; m < MR; m++) {
            if (m >= M) continue; /* (not break: clang then cannot unroll the callers' loops) */
            int4 x0 = *(const int4 *)(qa + (m * lda + e)), x1 = *(const int4 *)(qa + (m * lda + e + 32));
            int s0 = __dp4a(lo[0], x0.x, __dp4a(lo[1], x0.y, __dp4a(lo[2], x0.z, __dp4a(lo[3], x0.w, 0))));
            int s1 = __dp4a(hi[0], x1.x, __dp4a(hi[1], x1.y, __dp4a(hi[2], x1.z, __dp4a(hi[3], x1.w, 0))));
            const float *dr = da + m * ldb, *sr = sa + m * ldb;
            acc[m] += dr[b0] * (dsc0 * cu_i2f_small(s0)) + dr[b0 + 1] * (dsc1 * cu_i2f_small(s1)) -
                      (dm0 * sr[b0] + dm1 * sr[b0 + 1]);
        }
    }
};

template <>
struct cu_kq<QVL_Q6_K> {
    static const int BB = 210;
    /* 2-byte loads: the 210-byte blocks are only 2-byte aligned */
    static __device__ __forceinline__ void load(const unsigned char *blk, int part, cu_kraw &r) {
        int hf = part / 4, l0 = (part % 4) * 8;
        const unsigned char *ql = blk + 64 * hf + l0, *qh = blk + 128 + 32 * hf + l0;
        r.a = make_uint4(cu_ld32_2(ql), cu_ld32_2(ql + 4), cu_ld32_2(ql + 32), cu_ld32_2(ql + 36));
        /* scales[8 hf + 2 r + (p % 4) / 2] for quarters r = 0..3: bytes of 4 16-bit words */
        const unsigned char *s = blk + 192 + 8 * hf;
        int shift = 8 * ((part % 4) / 2);
        uint32_t sc = ((cu_ld16(s) >> shift) & 0xffu) | (((cu_ld16(s + 2) >> shift) & 0xffu) << 8) |
                      (((cu_ld16(s + 4) >> shift) & 0xffu) << 16) |
                      (((cu_ld16(s + 6) >> shift) & 0xffu) << 24);
        r.b = make_uint4(cu_ld32_2(qh), cu_ld32_2(qh + 4), sc, cu_ld16(blk + 208));
    }
    /* The lane's share as integers and factors: q[qr] = quarter qr's 8 quants minus 32 (two
     * words), ds[qr] = d * its scale. */
    struct w_t {
        int q[4][2];
        float ds[4];
    };
    static __device__ __forceinline__ w_t unpack(const cu_kraw &r, int part) {
        (void)part;
        w_t w;
        float d = cu_f16_to_f32((uint16_t)r.b.w);
        uint32_t ql0[2] = {r.a.x, r.a.y}, ql1[2] = {r.a.z, r.a.w}, qh[2] = {r.b.x, r.b.y};
#pragma unroll
        for (int qr = 0; qr < 4; qr++) {
#pragma unroll
            for (int t = 0; t < 2; t++) {
                uint32_t l = qr % 2 == 0 ? ql0[t] : ql1[t];
                l = qr < 2 ? l & 0x0F0F0F0Fu : (l >> 4) & 0x0F0F0F0Fu;
                uint32_t hb = ((qh[t] >> (2 * qr)) & 0x03030303u) << 4;
                w.q[qr][t] = cu_minus32(l | hb);
            }
            w.ds[qr] = d * (float)(int8_t)((r.b.z >> (8 * qr)) & 0xffu);
        }
        return w;
    }
    /* One activation row's share: x[2 qr], x[2 qr + 1] = its 8 int8 values of quarter qr at
     * the lane's positions, dq[qr] that block's scale. */
    static __device__ __forceinline__ float row(const w_t &w, const int (&x)[8],
                                                const float (&dq)[4]) {
        float y = 0.0f;
#pragma unroll
        for (int qr = 0; qr < 4; qr++) {
            int s = __dp4a(w.q[qr][0], x[2 * qr], __dp4a(w.q[qr][1], x[2 * qr + 1], 0));
            y += dq[qr] * (w.ds[qr] * cu_i2f_small(s));
        }
        return y;
    }
    /* Activation offsets of the lane's share of super-block sb: values e + 32 qr .. + 7 for the
     * quarters qr, in blocks b0 + qr. */
    static __device__ __forceinline__ int first_value(int sb, int part) {
        return sb * QVL_QK_K + 128 * (part / 4) + (part % 4) * 8;
    }
    static __device__ __forceinline__ int first_block(int sb, int part) {
        return sb * 8 + 4 * (part / 4);
    }
    template <int MR>
    static __device__ __forceinline__ void dot(const cu_kraw &r, int part, int sb, int M,
                                               const int8_t *qa, int lda, const float *da,
                                               const float *sa, int ldb, float (&acc)[MR]) {
        (void)sa;
        const w_t w = unpack(r, part);
        int e = first_value(sb, part), b0 = first_block(sb, part);
#pragma unroll
        for (int m = 0; m < MR; m++) {
            if (m >= M) continue;
            const float *dr = da + m * ldb;
            int x[8];
            float dq[4];
#pragma unroll
            for (int qr = 0; qr < 4; qr++) {
                int2 v = *(const int2 *)(qa + (m * lda + e + 32 * qr));
                x[2 * qr] = v.x, x[2 * qr + 1] = v.y;
                dq[qr] = dr[b0 + qr];
            }
            acc[m] += row(w, x, dq);
        }
    }
};

#endif
