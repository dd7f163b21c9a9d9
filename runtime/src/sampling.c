/* Logits processors and the multinomial draw; see qvl/sampling.h for the order and semantics. */
#include "qvl/sampling.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Largest top_k served by a heap scan (see kth_largest). */
#define HEAP_MAX_K 256

typedef struct cand {
    float logit;
    int32_t id;
} cand;

/* The penalties' history is kept as counts per id over the window, with the ids whose count
 * is not zero listed (at[id] is an id's place in that list), so a penalised row costs the
 * number of distinct ids in the window, not the window's length. A bounded window keeps its
 * tokens in a ring, generated ones stored as -1 - id, to take them out again when they leave. */
struct qvl_sampler {
    qvl_sampling_params p;
    int32_t n_vocab;
    int32_t n_valid;
    int32_t *count;     /* [n_vocab] times in the window, prompt and generated */
    int32_t *count_gen; /* [n_vocab] times generated in the window */
    int32_t *at;        /* [n_vocab] place in ids[] while count > 0 */
    int32_t *ids;       /* the distinct ids in the window */
    size_t n_ids;
    size_t n_gen;       /* generated tokens in the window */
    int32_t *ring;      /* [penalty_window] the window, oldest at ring_head once full */
    size_t ring_len, ring_head;
    float *work;        /* [n_valid] penalised logits, by id */
    float *heap;        /* [heap_cap] for a small top-k */
    size_t heap_cap;
    cand *cands;        /* [n_valid] the candidates still in play */
    uint64_t rng[4];    /* xoshiro256** state */
};

/* ---- random numbers: splitmix64 seeds xoshiro256** --------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t st[4]) {
    uint64_t result = rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rand_unit(uint64_t st[4]) { return (double)(xoshiro_next(st) >> 11) * 0x1.0p-53; }

void qvl_sampler_set_seed(qvl_sampler *s, uint64_t seed) {
    if (!s) return;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

/* ---- life cycle ------------------------------------------------------------------------- */

void qvl_sampling_params_default(qvl_sampling_params *p) {
    if (!p) return;
    *p = (qvl_sampling_params){
        .temperature = 1.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .repetition_penalty = 1.0f,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .penalty_window = 0,
        .seed = 0,
        .n_valid = 0,
    };
}

static qvl_status check_params(const qvl_sampling_params *p, int32_t n_vocab, qvl_error *err) {
    if (n_vocab <= 0) return qvl_fail(err, QVL_E_INVALID, "sampler: vocabulary size %d must be positive", n_vocab);
    if (isnan(p->temperature))
        return qvl_fail(err, QVL_E_INVALID, "sampler: temperature is NaN");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return qvl_fail(err, QVL_E_INVALID, "sampler: top_p %g is outside [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return qvl_fail(err, QVL_E_INVALID, "sampler: min_p %g is outside [0, 1]", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f && isfinite(p->repetition_penalty)))
        return qvl_fail(err, QVL_E_INVALID, "sampler: repetition_penalty %g must be positive and finite",
                        (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return qvl_fail(err, QVL_E_INVALID, "sampler: presence_penalty %g must be finite",
                        (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return qvl_fail(err, QVL_E_INVALID, "sampler: frequency_penalty %g must be finite",
                        (double)p->frequency_penalty);
    if (p->penalty_window < 0)
        return qvl_fail(err, QVL_E_INVALID, "sampler: penalty_window %d must be >= 0 (0: the "
                        "whole history)", p->penalty_window);
    if (p->n_valid > n_vocab)
        return qvl_fail(err, QVL_E_INVALID, "sampler: n_valid %d exceeds the vocabulary size %d",
                        p->n_valid, n_vocab);
    return QVL_OK;
}

qvl_status qvl_sampler_create(const qvl_sampling_params *p, int32_t n_vocab, qvl_sampler **out,
                              qvl_error *err) {
    if (!p || !out) return qvl_fail(err, QVL_E_INVALID, "sampler: NULL parameters or output");
    *out = NULL;
    qvl_status st = check_params(p, n_vocab, err);
    if (st != QVL_OK) return st;
    qvl_sampler *s = calloc(1, sizeof *s);
    if (!s) return qvl_fail(err, QVL_E_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->n_valid = p->n_valid > 0 ? p->n_valid : n_vocab;
    size_t nv = (size_t)n_vocab;
    s->count = calloc(nv, sizeof *s->count);
    s->count_gen = calloc(nv, sizeof *s->count_gen);
    s->at = malloc(nv * sizeof *s->at);
    s->ids = malloc(nv * sizeof *s->ids);
    s->ring = malloc((p->penalty_window > 0 ? (size_t)p->penalty_window : 1) * sizeof *s->ring);
    s->work = malloc((size_t)s->n_valid * sizeof *s->work);
    /* A heap beats quickselect for small k; larger k use quickselect on the candidates. */
    s->heap_cap = p->top_k > 0 && p->top_k <= HEAP_MAX_K ? (size_t)p->top_k : 0;
    s->heap = malloc((s->heap_cap ? s->heap_cap : 1) * sizeof *s->heap);
    s->cands = malloc((size_t)s->n_valid * sizeof *s->cands);
    if (!s->count || !s->count_gen || !s->at || !s->ids || !s->ring || !s->work || !s->heap || !s->cands) {
        qvl_sampler_free(s);
        return qvl_fail(err, QVL_E_NOMEM, "sampler: out of memory for a vocabulary of %d", n_vocab);
    }
    qvl_sampler_set_seed(s, p->seed);
    *out = s;
    return QVL_OK;
}

void qvl_sampler_free(qvl_sampler *s) {
    if (!s) return;
    free(s->count);
    free(s->count_gen);
    free(s->at);
    free(s->ids);
    free(s->ring);
    free(s->work);
    free(s->heap);
    free(s->cands);
    free(s);
}

/* ---- history ---------------------------------------------------------------------------- */

/* Count one token in (delta 1) or out (delta -1) of the window; entry: id, or -1 - id when
 * generated. */
static void tally(qvl_sampler *s, int32_t entry, int delta) {
    const bool generated = entry < 0;
    const int32_t id = generated ? -1 - entry : entry;
    if (delta > 0 && s->count[id] == 0) {
        s->at[id] = (int32_t)s->n_ids;
        s->ids[s->n_ids++] = id;
    }
    s->count[id] += delta;
    if (generated) {
        s->count_gen[id] += delta;
        s->n_gen = (size_t)((int64_t)s->n_gen + delta);
    }
    if (delta < 0 && s->count[id] == 0) { /* swap-remove from the list */
        const int32_t last = s->ids[--s->n_ids];
        s->ids[s->at[id]] = last;
        s->at[last] = s->at[id];
    }
}

static qvl_status remember(qvl_sampler *s, int32_t id, bool generated, qvl_error *err) {
    if (id < 0 || id >= s->n_vocab)
        return qvl_fail(err, QVL_E_INVALID, "sampler: token id %d outside the vocabulary [0, %d)", id,
                        s->n_vocab);
    const int32_t entry = generated ? -1 - id : id;
    const size_t window = (size_t)s->p.penalty_window;
    if (window > 0) {
        if (s->ring_len == window) { /* the oldest leaves */
            tally(s, s->ring[s->ring_head], -1);
            s->ring[s->ring_head] = entry;
            s->ring_head = (s->ring_head + 1) % window;
        } else {
            s->ring[s->ring_len++] = entry;
        }
    }
    tally(s, entry, 1);
    return QVL_OK;
}

qvl_status qvl_sampler_accept_prompt(qvl_sampler *s, const int32_t *ids, size_t n, qvl_error *err) {
    if (!s || (n && !ids)) return qvl_fail(err, QVL_E_INVALID, "sampler: NULL sampler or ids");
    for (size_t i = 0; i < n; i++) {
        qvl_status st = remember(s, ids[i], false, err);
        if (st != QVL_OK) return qvl_error_prefix(err, "prompt token %zu", i);
    }
    return QVL_OK;
}

qvl_status qvl_sampler_accept_generated(qvl_sampler *s, int32_t id, qvl_error *err) {
    if (!s) return qvl_fail(err, QVL_E_INVALID, "sampler: NULL sampler");
    return remember(s, id, true, err);
}

void qvl_sampler_clear_history(qvl_sampler *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_ids; i++) s->count[s->ids[i]] = s->count_gen[s->ids[i]] = 0;
    s->n_ids = 0;
    s->n_gen = 0;
    s->ring_len = s->ring_head = 0;
}

/* ---- selection helpers ------------------------------------------------------------------ */

/* Higher logit first; equal logits by lower id, so results never depend on memory order. */
static bool before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_desc(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

static void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange c[0, n) so that c[0, k) holds the k first elements in `before` order (in no
 * particular order among themselves). Quickselect with a median-of-three pivot; `before` is a
 * strict total order (ids are distinct), so there are no equal keys to degrade it. */
static void select_first(cand *c, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the boundary k lies in [lo, hi) */
    while (hi - lo > 1 && k > lo && k < hi) {
        size_t mid = lo + (hi - lo) / 2;
        /* median of c[lo], c[mid], c[hi-1] into c[hi-1] as the pivot */
        if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (before(&c[hi - 1], &c[lo])) swap_cand(&c[hi - 1], &c[lo]);
        if (before(&c[mid], &c[hi - 1])) swap_cand(&c[mid], &c[hi - 1]);
        cand pivot = c[hi - 1];
        size_t store = lo;
        for (size_t i = lo; i + 1 < hi; i++)
            if (before(&c[i], &pivot)) swap_cand(&c[i], &c[store++]);
        swap_cand(&c[store], &c[hi - 1]);
        /* c[lo, store) before pivot, c[store] pivot, c[store+1, hi) after */
        if (store == k || store + 1 == k) return;
        if (store > k) hi = store;
        else lo = store + 1;
    }
}

/* Keep the candidates whose weight exp(logit) is at least min_weight (compared as logits:
 * no exp per token); preserves order. */
static size_t keep_at_least(cand *c, size_t n, double min_weight) {
    double min_logit = log(min_weight);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if ((double)c[i].logit >= min_logit) c[m++] = c[i];
    return m;
}

static double total_weight(const cand *c, size_t n) {
    double z = 0.0;
    for (size_t i = 0; i < n; i++) z += exp((double)c[i].logit);
    return z;
}

/* Top-p over c[0, n) whose largest logit is 0. Leaves the kept tokens first, sorted, and
 * returns their count. Sorts growing prefixes so a peaked distribution never sorts the whole
 * vocabulary. */
static size_t top_p_filter(cand *c, size_t n, double top_p) {
    double target = top_p * total_weight(c, n);
    size_t m = n < 64 ? n : 64;
    for (;;) {
        select_first(c, n, m);
        qsort(c, m, sizeof *c, cmp_desc);
        double before_mass = 0.0;
        for (size_t i = 0; i < m; i++) {
            if (i > 0 && !(before_mass < target)) return i; /* HF: keep while mass before < top_p */
            before_mass += exp((double)c[i].logit);
        }
        if (m == n) return n;
        m = n / 8 < m ? n : m * 8;
    }
}

/* The k-th largest finite value of w[0, n) (-inf when fewer than k are finite), with a
 * size-k min-heap in heap[]: one pass that mostly compares against the root, so a small top-k
 * costs about one read of the vocabulary. */
static float kth_largest(const float *w, size_t n, size_t k, float *heap) {
    size_t size = 0;
    for (size_t i = 0; i < n; i++) {
        float v = w[i];
        if (v == -INFINITY) continue;
        size_t at;
        if (size < k) { /* insert: sift up */
            at = size++;
            while (at > 0 && heap[(at - 1) / 2] > v) {
                heap[at] = heap[(at - 1) / 2];
                at = (at - 1) / 2;
            }
            heap[at] = v;
        } else if (v > heap[0]) { /* replace the root: sift down */
            at = 0;
            for (;;) {
                size_t child = 2 * at + 1;
                if (child >= k) break;
                if (child + 1 < k && heap[child + 1] < heap[child]) child++;
                if (heap[child] >= v) break;
                heap[at] = heap[child];
                at = child;
            }
            heap[at] = v;
        }
    }
    return size < k ? -INFINITY : heap[0];
}

/* ---- the processors --------------------------------------------------------------------- */

/* The lowest id holding the largest of v[0, n) (ties go to the lowest id, as torch.argmax),
 * and whether any entry is NaN or +inf, in one read of the row. A decode step
 * samples every busy slot's row of the whole vocabulary (608 KB, just copied from the device,
 * so read from memory), and this pass is most of a greedy token's cost: 16 independent lanes
 * keep running maxima, the index where each lane's maximum first appeared (a strict > keeps
 * the first), and counts of non-NaN entries (a NaN never compares, so it neither wins a lane
 * nor counts), which compilers turn into vector code; a +inf shows as the maximum. The id
 * means nothing when *bad. */
static size_t scan_argmax(const float *v, size_t n, bool *bad) {
    enum { LANES = 16 };
    float m[LANES];
    int32_t at[LANES], counted[LANES];
    for (int k = 0; k < LANES; k++) {
        m[k] = -INFINITY;
        at[k] = k;
        counted[k] = 0;
    }
    const size_t body = n - n % LANES; /* n <= INT32_MAX: a vocabulary's ids are int32 */
    for (size_t i = 0; i < body; i += LANES) {
        for (int k = 0; k < LANES; k++) { /* masks, not branches: this form vectorises */
            const float x = v[i + k];
            const int32_t more = -(int32_t)(x > m[k]);
            counted[k] += x == x;
            m[k] = x > m[k] ? x : m[k];
            at[k] = (at[k] & ~more) | (((int32_t)i + k) & more);
        }
    }
    float mx = m[0];
    size_t ordinary = 0;
    for (int k = 1; k < LANES; k++) mx = m[k] > mx ? m[k] : mx;
    /* The lowest index among the lanes holding mx. A lane never raised keeps its start k; lane
     * 0 then says 0, which is right when every entry so far is -inf. */
    size_t first = SIZE_MAX;
    for (int k = 0; k < LANES; k++) {
        ordinary += (size_t)counted[k];
        if (m[k] == mx && (size_t)at[k] < first) first = (size_t)at[k];
    }
    for (size_t i = body; i < n; i++) { /* the tail: later than every body index */
        ordinary += v[i] == v[i];
        if (v[i] > mx) {
            mx = v[i];
            first = i;
        }
    }
    *bad = ordinary != n || mx == INFINITY;
    return first;
}

/* The valid logits with the penalties applied: the row itself when no penalty changes
 * anything (no copy), else a penalised copy in s->work (indexed by id). *best gets the id of
 * the largest. */
static qvl_status load_logits(qvl_sampler *s, const float *logits, size_t n_logits,
                              const float **out, size_t *best, qvl_error *err) {
    if (!s || !logits) return qvl_fail(err, QVL_E_INVALID, "sampler: NULL sampler or logits");
    if (n_logits != (size_t)s->n_vocab)
        return qvl_fail(err, QVL_E_SHAPE, "sampler: logits row has %zu entries, the vocabulary %d",
                        n_logits, s->n_vocab);
    size_t n = (size_t)s->n_valid;
    bool bad;
    const size_t at = scan_argmax(logits, n, &bad);
    if (bad) {
        for (size_t i = 0; i < n; i++)
            if (isnan(logits[i]) || logits[i] == INFINITY)
                return qvl_fail(err, QVL_E_INVALID, "sampler: logit of token %zu is %s", i,
                                isnan(logits[i]) ? "NaN" : "+inf");
    }
    const float rp = s->p.repetition_penalty, pp = s->p.presence_penalty;
    const float fp = s->p.frequency_penalty;
    const bool penalised = (rp != 1.0f && s->n_ids > 0) || ((pp != 0.0f || fp != 0.0f) && s->n_gen > 0);
    if (!penalised) {
        *out = logits;
        *best = at;
        return QVL_OK;
    }
    float *w = s->work;
    memcpy(w, logits, n * sizeof *w);
    for (size_t j = 0; j < s->n_ids; j++) {
        const int32_t id = s->ids[j];
        if (id >= s->n_valid) continue;
        if (rp != 1.0f) w[id] = w[id] > 0.0f ? w[id] / rp : w[id] * rp;
        const int32_t times = s->count_gen[id];
        if (times > 0) w[id] -= pp + fp * (float)times;
    }
    *best = scan_argmax(w, n, &bad);
    *out = w;
    return QVL_OK;
}

/* Run every processor. Greedy: *greedy gets the token and *n_out 0. Otherwise the candidates
 * left in s->cands[0, *n_out) have logits relative to the best (<= 0). */
static qvl_status filter(qvl_sampler *s, const float *logits, size_t n_logits, size_t *n_out,
                         int32_t *greedy, qvl_error *err) {
    const float *w = NULL;
    size_t best = 0;
    qvl_status st = load_logits(s, logits, n_logits, &w, &best, err);
    if (st != QVL_OK) return st;
    size_t n_valid = (size_t)s->n_valid;
    float mx = w[best];
    if (mx == -INFINITY) return qvl_fail(err, QVL_E_INVALID, "sampler: every token is masked (all logits -inf)");
    if (!(s->p.temperature > 0.0f)) {
        *greedy = (int32_t)best;
        *n_out = 0;
        return QVL_OK;
    }
    /* Scaled logits are (w - mx) / t: shifting first means a tiny temperature cannot overflow
     * to +inf. Masked (-inf) tokens can never be drawn: only the others become candidates. */
    float t = s->p.temperature;
    cand *c = s->cands;
    size_t n = 0;
    size_t k = s->p.top_k > 0 ? (size_t)s->p.top_k : 0;
    if (k > 0 && k <= s->heap_cap) {
        /* scaling is monotonic, so the k-th raw logit gives the k-th scaled one */
        float kth = (kth_largest(w, n_valid, k, s->heap) - mx) / t;
        for (size_t i = 0; i < n_valid; i++) {
            float v = (w[i] - mx) / t;
            if (w[i] != -INFINITY && v >= kth) c[n++] = (cand){v, (int32_t)i}; /* >=: HF keeps ties */
        }
    } else {
        for (size_t i = 0; i < n_valid; i++)
            if (w[i] != -INFINITY) c[n++] = (cand){(w[i] - mx) / t, (int32_t)i};
        if (k > 0 && k < n) {
            select_first(c, n, k);
            float kth = c[0].logit; /* the smallest of the k kept */
            for (size_t i = 1; i < k; i++)
                if (c[i].logit < kth) kth = c[i].logit;
            for (size_t i = k; i < n; i++) /* ties with the k-th stay, as above */
                if (c[i].logit == kth) swap_cand(&c[i], &c[k++]);
            n = k;
        }
    }
    if (s->p.top_p < 1.0f) n = top_p_filter(c, n, s->p.top_p);
    if (s->p.min_p > 0.0f) n = keep_at_least(c, n, (double)s->p.min_p); /* best has weight 1 */
    *n_out = n;
    return QVL_OK;
}

qvl_status qvl_sampler_sample(qvl_sampler *s, const float *logits, size_t n_logits, int32_t *out,
                              qvl_error *err) {
    if (!out) return qvl_fail(err, QVL_E_INVALID, "sampler: NULL output");
    size_t n;
    int32_t greedy = -1;
    qvl_status st = filter(s, logits, n_logits, &n, &greedy, err);
    if (st != QVL_OK) return st;
    if (n == 0) {
        *out = greedy;
        return QVL_OK;
    }
    const cand *c = s->cands;
    double u = rand_unit(s->rng) * total_weight(c, n);
    double acc = 0.0;
    size_t last_positive = 0;
    for (size_t i = 0; i < n; i++) {
        double w = exp((double)c[i].logit);
        if (w > 0.0) last_positive = i;
        acc += w;
        if (u < acc) {
            *out = c[i].id;
            return QVL_OK;
        }
    }
    *out = c[last_positive].id; /* u landed on the rounding slack at the very end */
    return QVL_OK;
}

qvl_status qvl_sampler_distribution(qvl_sampler *s, const float *logits, size_t n_logits,
                                    float *probs, qvl_error *err) {
    if (!probs) return qvl_fail(err, QVL_E_INVALID, "sampler: NULL output");
    size_t n;
    int32_t greedy = -1;
    qvl_status st = filter(s, logits, n_logits, &n, &greedy, err);
    if (st != QVL_OK) return st;
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    if (n == 0) {
        probs[greedy] = 1.0f;
        return QVL_OK;
    }
    const cand *c = s->cands;
    double z = total_weight(c, n);
    for (size_t i = 0; i < n; i++) probs[c[i].id] = (float)(exp((double)c[i].logit) / z);
    return QVL_OK;
}

qvl_status qvl_sampler_logprobs(qvl_sampler *s, const float *logits, size_t n_logits,
                                float *logprobs, qvl_error *err) {
    if (!logprobs) return qvl_fail(err, QVL_E_INVALID, "sampler: NULL output");
    const float *w = NULL;
    size_t best = 0;
    qvl_status st = load_logits(s, logits, n_logits, &w, &best, err);
    if (st != QVL_OK) return st;
    const size_t n_valid = (size_t)s->n_valid;
    const float mx = w[best];
    if (mx == -INFINITY) return qvl_fail(err, QVL_E_INVALID, "sampler: every token is masked (all logits -inf)");
    const double t = s->p.temperature > 0.0f ? (double)s->p.temperature : 1.0;
    /* Shifted by the maximum, so the sum is >= 1 and its log finite. */
    double z = 0.0;
    for (size_t i = 0; i < n_valid; i++)
        if (w[i] != -INFINITY) z += exp(((double)w[i] - mx) / t);
    const double lz = log(z);
    for (size_t i = 0; i < n_valid; i++)
        logprobs[i] = w[i] == -INFINITY ? -INFINITY : (float)(((double)w[i] - mx) / t - lz);
    for (size_t i = n_valid; i < (size_t)s->n_vocab; i++) logprobs[i] = -INFINITY;
    return QVL_OK;
}
