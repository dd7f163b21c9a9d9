/* Building cases: random numbers, host storages, tensors and views into them, and reading
 * elements back through a descriptor. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

/* ---- random numbers ---- */

void conf_rng_seed(conf_rng *r, uint64_t seed) {
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (r->s == 0) r->s = 1;
    for (int i = 0; i < 4; i++) conf_rng_next(r);
}

uint64_t conf_rng_next(conf_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

float conf_frand(conf_rng *r, float lo, float hi) {
    double u = (double)(conf_rng_next(r) >> 11) / 9007199254740992.0;
    float v = lo + (hi - lo) * (float)u;
    return v < hi ? v : lo; /* rounding can reach hi */
}

int64_t conf_irand(conf_rng *r, int64_t lo, int64_t hi) {
    return lo + (int64_t)(conf_rng_next(r) % (uint64_t)(hi - lo + 1));
}

int64_t conf_size(conf_rng *r, int64_t hi) {
    int64_t v;
    switch (conf_irand(r, 0, 7)) {
    case 0: v = 1; break;
    case 1: v = 8 * conf_irand(r, 1, 4) + 1; break;  /* just over an AVX2 f32 vector */
    case 2: v = 16 * conf_irand(r, 1, 4) + 1; break; /* just over a 16-wide panel */
    case 3: v = 32 * conf_irand(r, 1, 3) + 1; break; /* just over a warp / a q8_0 block */
    default: v = conf_irand(r, 1, hi); break;
    }
    return v < hi ? v : hi;
}

/* ---- cases ---- */

void conf_case_init(conf_case *c, qvl_op op, conf_rng *rng) {
    memset(c, 0, sizeof *c);
    c->op = op;
    for (int i = 0; i < QVL_MAX_SRC; i++) c->src[i] = -1;
    c->dst = -1;
    c->check = -1;
    c->rng = rng;
    snprintf(c->what, sizeof c->what, "%s", qvl_op_name(op));
}

void conf_case_free(conf_case *c) {
    for (int i = 0; i < c->n_st; i++) free(c->st[i].host);
    c->n_st = 0;
    c->n_t = 0;
}

void conf_describe(conf_case *c, const char *fmt, ...) {
    size_t len = strlen(c->what);
    if (len + 1 >= sizeof c->what) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->what + len, sizeof c->what - len, fmt, ap);
    va_end(ap);
}

static void die(const char *what) {
    fprintf(stderr, "qvl-backend-ops: %s\n", what);
    exit(2);
}

/* Whole blocks for a block dtype (a q8_0 tensor of odd size still gets its last block). */
static size_t storage_bytes(qvl_dtype dt, int64_t n) {
    int64_t block = (int64_t)qvl_dtype_block_elems(dt);
    return (size_t)((n + block - 1) / block) * qvl_dtype_block_bytes(dt);
}

static bool is_kquant(qvl_dtype dt) { return dt == QVL_Q4_K || dt == QVL_Q6_K; }

/* Where a storage starts in its buffer: 0 or a few elements in, so that kernels meet
 * addresses that are element-aligned but not vector-aligned (weights mapped from safetensors
 * are only 2-byte aligned). */
static size_t random_pad(conf_rng *r, qvl_dtype dt) {
    if (dt == QVL_Q8_0) return (size_t)(conf_irand(r, 0, 1) * 2); /* blocks hold an f16 */
    if (is_kquant(dt)) return (size_t)(conf_irand(r, 0, 3) * 2);  /* f16 fields; 144 = 9 * 16 */
    return (size_t)conf_irand(r, 0, 3) * qvl_dtype_block_bytes(dt);
}

static int new_storage(conf_case *c, qvl_dtype dt, size_t bytes) {
    if (c->n_st >= CONF_MAX_STORAGES) die("too many storages in one case");
    conf_storage *s = &c->st[c->n_st];
    s->bytes = bytes;
    s->host = calloc(1, bytes ? bytes : 1);
    if (!s->host) die("out of memory");
    s->pad = random_pad(c->rng, dt);
    return c->n_st++;
}

static int new_tensor(conf_case *c, qvl_dtype dt, int ndim, const int64_t *shape,
                      const int64_t *stride, int storage, size_t byte_off) {
    if (c->n_t >= CONF_MAX_TENSORS) die("too many tensors in one case");
    conf_tensor *t = &c->t[c->n_t];
    t->desc.dtype = dt;
    t->desc.ndim = ndim;
    for (int i = 0; i < QVL_MAX_DIMS; i++) {
        t->desc.shape[i] = i < ndim ? shape[i] : 1;
        t->desc.stride[i] = i < ndim ? stride[i] : 1;
    }
    t->storage = storage;
    t->byte_off = byte_off;
    return c->n_t++;
}

static int new_contiguous(conf_case *c, qvl_dtype dt, int ndim, const int64_t *shape) {
    qvl_tensor_desc d;
    if (!qvl_desc_init(&d, dt, ndim, shape)) die("bad shape in a case");
    int s = new_storage(c, dt, storage_bytes(dt, conf_nelem(&d)));
    return new_tensor(c, dt, ndim, d.shape, d.stride, s, 0);
}

/* Values in [lo, hi) for a q4_k / q6_k tensor, 16 at a time (a q6_k sub-block; two make a
 * q4_k one) around a random centre with a random amplitude of (hi - lo) / 2^0..6, some groups
 * zero: with uniform data every sub-block gets a similar scale and min, so a kernel that read
 * a neighbouring sub-block's would be off by little and could pass the matmul tolerance. */
static void kquant_values(conf_rng *r, float *v, int64_t n, float lo, float hi) {
    for (int64_t g = 0; g < n; g += 16) {
        bool zero = conf_irand(r, 0, 15) == 0;
        float half = (hi - lo) * 0.5f / (float)(1 << conf_irand(r, 0, 6));
        float mid = conf_frand(r, lo + half, hi - half);
        for (int64_t i = g; i < g + 16 && i < n; i++)
            v[i] = zero ? 0.0f : conf_frand(r, mid - half, mid + half);
    }
}

int conf_rand(conf_case *c, qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    int t = new_contiguous(c, dt, ndim, shape);
    conf_storage *s = &c->st[c->t[t].storage];
    int64_t n = conf_nelem(&c->t[t].desc);
    if (dt == QVL_I32) {
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)s->host)[i] = (int32_t)conf_irand(c->rng, (int64_t)lo, (int64_t)hi);
        return t;
    }
    int64_t block = (int64_t)qvl_dtype_block_elems(dt), nf = (n + block - 1) / block * block;
    float *v = malloc((size_t)nf * sizeof *v);
    if (!v) die("out of memory");
    if (is_kquant(dt)) {
        kquant_values(c->rng, v, nf, lo, hi);
    } else {
        for (int64_t i = 0; i < nf; i++) v[i] = conf_frand(c->rng, lo, hi);
    }
    /* The project's quantisers. The q4_k / q6_k scale search costs ~0.4 us per value, so
     * tensors over 16K values (64 super-blocks) take its round-to-nearest mode:
     * same layout, same kind of blocks, 40x faster. */
    bool search = nf <= 16384;
    if (dt == QVL_Q4_K) qvl_quantize_row_q4_k(v, (qvl_block_q4_k *)(void *)s->host, nf, search);
    else if (dt == QVL_Q6_K) qvl_quantize_row_q6_k(v, (qvl_block_q6_k *)(void *)s->host, nf, search);
    else qvl_from_f32(dt, v, s->host, nf);
    free(v);
    return t;
}

int conf_i32(conf_case *c, int64_t n, const int32_t *values) {
    int t = new_contiguous(c, QVL_I32, 1, &n);
    memcpy(c->st[c->t[t].storage].host, values, (size_t)n * sizeof(int32_t));
    return t;
}

int conf_out(conf_case *c, qvl_dtype dt, int ndim, const int64_t *shape) {
    int t = new_contiguous(c, dt, ndim, shape);
    conf_storage *s = &c->st[c->t[t].storage];
    memset(s->host, 0xff, s->bytes);
    c->dst = t;
    c->check = t;
    return t;
}

int conf_view(conf_case *c, int base, int ndim, const int64_t *shape, const int64_t *stride,
              int64_t offset) {
    const conf_tensor *b = &c->t[base];
    qvl_dtype dt = b->desc.dtype;
    if (offset % (int64_t)qvl_dtype_block_elems(dt) != 0) die("view offset inside a block");
    return new_tensor(c, dt, ndim, shape, stride, b->storage,
                      b->byte_off + qvl_dtype_offset_bytes(dt, offset));
}

int64_t conf_nelem(const qvl_tensor_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

/* Element offset (from element 0) of flat index i, row-major over the shape. */
static int64_t elem_offset(const qvl_tensor_desc *d, int64_t i) {
    int64_t off = 0;
    for (int k = d->ndim - 1; k >= 0; k--) {
        off += (i % d->shape[k]) * d->stride[k];
        i /= d->shape[k];
    }
    return off;
}

double conf_get(const conf_tensor *t, const unsigned char *base, int64_t i) {
    int64_t off = elem_offset(&t->desc, i);
    const unsigned char *p = base + t->byte_off;
    switch (t->desc.dtype) {
    case QVL_F32: {
        float v;
        memcpy(&v, p + (size_t)off * 4, 4);
        return v;
    }
    case QVL_F16:
    case QVL_BF16: {
        uint16_t h;
        memcpy(&h, p + (size_t)off * 2, 2);
        return t->desc.dtype == QVL_F16 ? qvl_f16_to_f32(h) : qvl_bf16_to_f32(h);
    }
    case QVL_I32: {
        int32_t v;
        memcpy(&v, p + (size_t)off * 4, 4);
        return v;
    }
    case QVL_Q8_0: {
        qvl_block_q8_0 b;
        memcpy(&b, p + (size_t)(off / 32) * sizeof b, sizeof b);
        return (double)qvl_f16_to_f32(b.d) * b.qs[off % 32];
    }
    case QVL_Q4_K: {
        qvl_block_q4_k b;
        memcpy(&b, p + (size_t)(off / QVL_QK_K) * sizeof b, sizeof b);
        return qvl_q4_k_elem(&b, (int)(off % QVL_QK_K));
    }
    case QVL_Q6_K: {
        qvl_block_q6_k b;
        memcpy(&b, p + (size_t)(off / QVL_QK_K) * sizeof b, sizeof b);
        return qvl_q6_k_elem(&b, (int)(off % QVL_QK_K));
    }
    default: return NAN;
    }
}

void conf_set(conf_case *c, int t, int64_t i, double v) {
    const conf_tensor *ct = &c->t[t];
    int64_t off = elem_offset(&ct->desc, i);
    unsigned char *p = c->st[ct->storage].host + ct->byte_off;
    switch (ct->desc.dtype) {
    case QVL_F32: {
        float f = (float)v;
        memcpy(p + (size_t)off * 4, &f, 4);
        break;
    }
    case QVL_F16:
    case QVL_BF16: {
        uint16_t h = ct->desc.dtype == QVL_F16 ? qvl_f32_to_f16((float)v) : qvl_f32_to_bf16((float)v);
        memcpy(p + (size_t)off * 2, &h, 2);
        break;
    }
    case QVL_I32: {
        int32_t x = (int32_t)v;
        memcpy(p + (size_t)off * 4, &x, 4);
        break;
    }
    case QVL_Q8_0:
        /* Only NaN: the element's block gets a NaN scale, so all 32 of its values read NaN
         * (cache rows not written yet; a row of a q8_0 cache is whole blocks). */
        if (v == v) die("conf_set: a q8_0 element can only be poisoned with NaN");
        {
            uint16_t nan16 = 0x7e00;
            memcpy(p + (size_t)(off / QVL_Q8_0_BLOCK) * sizeof(qvl_block_q8_0), &nan16, 2);
        }
        break;
    default: die("conf_set: dtype not settable");
    }
}

/* ---- helpers shared by the generators ---- */

qvl_dtype conf_weight_dtype(conf_rng *r, bool q8_allowed) {
    static const qvl_dtype all[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};
    return all[conf_irand(r, 0, q8_allowed ? 3 : 2)];
}

qvl_dtype conf_kquant_dtype(conf_rng *r) {
    return conf_irand(r, 0, 1) ? QVL_Q6_K : QVL_Q4_K;
}

qvl_dtype conf_small_dtype(conf_rng *r) {
    return conf_weight_dtype(r, false);
}

int conf_input(conf_case *c, int ndim, const int64_t *shape, float lo, float hi) {
    int kind = (int)conf_irand(c->rng, 0, 3);
    if (kind <= 1) return conf_rand(c, QVL_F32, ndim, shape, lo, hi);
    if (kind == 2) {
        /* rows padded: the innermost dim is a slice of wider rows, at an offset */
        int64_t pad = conf_irand(c->rng, 1, 5), off = conf_irand(c->rng, 0, pad);
        int64_t wide[QVL_MAX_DIMS], stride[QVL_MAX_DIMS], s = 1;
        for (int i = 0; i < ndim; i++) wide[i] = shape[i];
        wide[ndim - 1] += pad;
        for (int i = ndim - 1; i >= 0; i--) {
            stride[i] = s;
            s *= wide[i];
        }
        int b = conf_rand(c, QVL_F32, ndim, wide, lo, hi);
        conf_describe(c, " (input rows padded by %lld)", (long long)pad);
        return conf_view(c, b, ndim, shape, stride, off);
    }
    if (ndim < 2) return conf_rand(c, QVL_F32, ndim, shape, lo, hi);
    /* permuted: stored with the last two dims swapped, read transposed */
    int64_t swapped[QVL_MAX_DIMS], stride[QVL_MAX_DIMS], s = 1;
    for (int i = 0; i < ndim; i++) swapped[i] = shape[i];
    swapped[ndim - 1] = shape[ndim - 2];
    swapped[ndim - 2] = shape[ndim - 1];
    int64_t sst[QVL_MAX_DIMS];
    for (int i = ndim - 1; i >= 0; i--) {
        sst[i] = s;
        s *= swapped[i];
    }
    for (int i = 0; i < ndim; i++) stride[i] = sst[i];
    stride[ndim - 1] = sst[ndim - 2];
    stride[ndim - 2] = sst[ndim - 1];
    int b = conf_rand(c, QVL_F32, ndim, swapped, lo, hi);
    conf_describe(c, " (input transposed)");
    return conf_view(c, b, ndim, shape, stride, 0);
}
