/* Element-wise kernels: SCALE and the activations, ADD/MUL with broadcasting, and the MLP's
 * activation step (silu(a) * up, gelu_tanh, gelu_erf), in rounds of CU_EW_UNROLL elements per
 * thread (cu_ew_rounds). The output is contiguous, so its offset is the flat index. */
#include "cu_device.cuh"

__global__ void k_unary(int op, float scale, cu_view x, int64_t n, float *out) {
    const int kind = cu_flat_kind(x, n);
    cu_ew_rounds<1>(
        n, [&](int64_t i, float *v) { v[0] = cu_view_load(x, cu_flat_at(x, i, kind)); },
        [&](int64_t i, const float *in) {
            float v = in[0];
            switch (op) {
            case CU_SCALE: v = v * scale; break;
            case CU_SILU: v = cu_silu(v); break;
            case CU_GELU_TANH: v = cu_gelu_tanh(v); break;
            default: v = cu_gelu_erf(v); break;
            }
            out[i] = v;
        });
}

extern "C" int cu_launch_unary(cu_stream s, cu_unary op, float scale, cu_view x, float *out) {
    int64_t n = cu_nelem(x);
    k_unary<<<cu_ew_blocks(n), CU_THREADS, 0, s>>>((int)op, scale, x, n, out);
    return (int)cudaGetLastError();
}

/* a and b4 are both 4-D here (b4 with stride 0 on broadcast dims); a is walked as 4-D too. */
__global__ void k_binary(int is_mul, cu_view a, cu_view b4, int64_t n, float *out) {
    const int ka = cu_flat_kind(a, n), kb = cu_flat_kind(b4, n);
    cu_ew_rounds<2>(
        n,
        [&](int64_t i, float *v) {
            v[0] = cu_view_load(a, cu_flat_at(a, i, ka));
            v[1] = cu_view_load(b4, cu_flat_at(b4, i, kb));
        },
        [&](int64_t i, const float *in) { out[i] = is_mul ? in[0] * in[1] : in[0] + in[1]; });
}

extern "C" int cu_launch_binary(cu_stream s, int is_mul, cu_view a, cu_view b4, float *out) {
    int64_t n = cu_nelem(a);
    k_binary<<<cu_ew_blocks(n), CU_THREADS, 0, s>>>(is_mul, a, b4, n, out);
    return (int)cudaGetLastError();
}

/* h is contiguous [rows, F]; a and up are read through their own views (same shape). */
__global__ void k_mlp_act(int act, cu_view a, cu_view up, int64_t n, float *h) {
    const int ka = cu_flat_kind(a, n), ku = up.data ? cu_flat_kind(up, n) : CU_FLAT_DENSE;
    cu_ew_rounds<2>(
        n,
        [&](int64_t i, float *v) {
            v[0] = cu_view_load(a, cu_flat_at(a, i, ka));
            v[1] = up.data ? cu_view_load(up, cu_flat_at(up, i, ku)) : 0.0f;
        },
        [&](int64_t i, const float *in) {
            float x = in[0];
            h[i] = up.data                    ? cu_silu(x) * in[1]
                   : act == QVL_ACT_GELU_TANH ? cu_gelu_tanh(x)
                                              : cu_gelu_erf(x);
        });
}

extern "C" int cu_launch_mlp_act(cu_stream s, int act, cu_view a, cu_view up, float *h) {
    int64_t n = cu_nelem(a);
    k_mlp_act<<<cu_ew_blocks(n), CU_THREADS, 0, s>>>(act, a, up, n, h);
    return (int)cudaGetLastError();
}
