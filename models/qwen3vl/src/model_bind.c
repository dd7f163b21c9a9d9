/* Weights and the KV cache onto the model's backends, and graphs split over them. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "qvl/checked.h"
#include "qvl/log.h"
#include "qvl/weight_convert.h"

static int cmp_bound(const void *a, const void *b) {
    const bound_weight *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->target > y->target) - (x->target < y->target);
}

const bound_weight *model_find_bound(const qvl_model *m, const char *name, int32_t target) {
    bound_weight key = {.name = name, .target = target};
    return bsearch(&key, m->bound, m->n_bound, sizeof key, cmp_bound);
}

static bool is_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* Put one stored tensor on target ti as `want`: in place when that backend reads host memory,
 * the dtype already fits, the data is aligned and no_mmap is off; otherwise converted (on
 * several threads) and uploaded once. A host-memory backend gets the conversion written
 * straight into its buffer. Returns the RMS error of a quantisation in *rel_rms (else 0). */
static qvl_status bind_weight(qvl_model *m, int32_t ti, const qvl_st_tensor *t, qvl_dtype want,
                              bound_weight *out, double *rel_rms, qvl_error *err) {
    const model_target *tg = &m->tg[ti];
    const qvl_backend_iface *be = tg->lb->iface;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (!qvl_mul_i64(n, t->shape[i], &n))
            return qvl_fail(err, QVL_E_LIMIT, "%s: element count overflows", t->name);
    size_t want_bytes;
    if (!qvl_dtype_row_bytes(want, n, &want_bytes))
        return qvl_fail(err, QVL_E_LIMIT, "%s: size overflows", t->name);
    out->name = t->name;
    out->target = ti;
    out->dtype = want;
    *rel_rms = 0;
    if (t->dtype == want && be->buffer_wrap_host && !m->no_mmap &&
        is_aligned(t->data, want == QVL_F32 ? 4 : 2)) {
        return be->buffer_wrap_host(tg->lb->be, (void *)t->data, t->nbytes, &out->buf, err);
    }
    qvl_status st = be->buffer_alloc(tg->lb->be, want_bytes ? want_bytes : 1, &out->buf, err);
    if (st != QVL_OK) return qvl_error_prefix(err, "%s on %s", t->name, tg->lb->name);
    void *host = tg->host_memory ? out->buf.data : malloc(want_bytes ? want_bytes : 1);
    if (!host) {
        be->buffer_free(tg->lb->be, &out->buf);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory converting to %s", t->name,
                        qvl_dtype_name(want));
    }
    bool quantised = qvl_dtype_is_quant(want) && t->dtype != want;
    if (t->dtype == want) memcpy(host, t->data, t->nbytes);
    else st = qvl_convert_elements_measured(t->dtype, t->data, want, host, n, m->convert_threads,
                                            quantised ? rel_rms : NULL, err);
    if (st == QVL_OK && !tg->host_memory)
        st = be->upload(tg->lb->be, out->buf.data, host, want_bytes, err);
    if (!tg->host_memory) free(host);
    if (st != QVL_OK) {
        be->buffer_free(tg->lb->be, &out->buf);
        return qvl_error_prefix(err, "%s", t->name);
    }
    return QVL_OK;
}

/* Room for one more binding (the array grows when a graph needs a weight on a new target). */
static qvl_status reserve_bound(qvl_model *m, qvl_error *err) {
    if (m->n_bound < m->cap_bound) return QVL_OK;
    size_t cap = m->cap_bound ? 2 * m->cap_bound : 64;
    bound_weight *v = realloc(m->bound, cap * sizeof *v);
    if (!v) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    m->bound = v;
    m->cap_bound = cap;
    return QVL_OK;
}

/* Weight `name` on target ti for a graph that reads it there while the load placed it
 * elsewhere only (a prompt or an image size whose nodes fell back differently from the probe
 * graphs): bound now, once, and kept. */
static const bound_weight *bind_late(qvl_model *m, const char *name, int32_t ti, qvl_error *err) {
    const qvl_st_tensor *t = qvl_weights_get(m->weights, name);
    if (!t) {
        qvl_fail(err, QVL_E_NOT_FOUND, "weight %s is not in the model", name);
        return NULL;
    }
    double rel_rms;
    if (reserve_bound(m, err) != QVL_OK ||
        bind_weight(m, ti, t, model_bind_dtype(m, t), &m->bound[m->n_bound], &rel_rms, err) !=
            QVL_OK)
        return NULL;
    m->n_bound++;
    qsort(m->bound, m->n_bound, sizeof *m->bound, cmp_bound);
    QVL_LOG_I("%s bound on %s too (a node reading it fell back there)", name,
              m->tg[ti].lb->name);
    return model_find_bound(m, name, ti);
}

qvl_status model_bind_all_weights(qvl_model *m, qvl_error *err) {
    size_t n = qvl_weights_count(m->weights), n_convert = 0, converted = 0;
    for (size_t i = 0; m->on_convert && i < n; i++) {
        const qvl_st_tensor *t = qvl_weights_at(m->weights, i);
        n_convert += model_bind_dtype(m, t) != t->dtype;
    }
    for (size_t i = 0; i < n; i++) {
        const qvl_st_tensor *t = qvl_weights_at(m->weights, i);
        const qvl_dtype want = model_bind_dtype(m, t);
        /* where the probe graphs read it, else where its group runs */
        const uint32_t targets = m->weight_targets && m->weight_targets[i]
                                     ? m->weight_targets[i]
                                     : model_weight_targets(m, t->name);
        bool copied = false, in_place = false;
        for (int32_t ti = 0; ti < (int32_t)m->n_tg; ti++) {
            if (!(targets & (1u << ti))) continue;
            qvl_status rs = reserve_bound(m, err);
            if (rs != QVL_OK) return rs;
            bound_weight *b = &m->bound[m->n_bound];
            double rel_rms;
            qvl_status st = bind_weight(m, ti, t, want, b, &rel_rms, err);
            if (st != QVL_OK) return st;
            m->n_bound++;
            if (rel_rms > 0 && !copied)
                QVL_LOG_I("%s: %s -> %s, RMS error %.3g of the source's RMS", t->name,
                          qvl_dtype_name(t->dtype), qvl_dtype_name(want), rel_rms);
            copied |= b->buf.data != t->data;
            in_place |= b->buf.data == t->data;
        }
        /* the copies are what runs from now on */
        if (copied && !in_place) qvl_release_mapped_pages(t->data, t->nbytes);
        if (m->on_convert && want != t->dtype) m->on_convert(++converted, n_convert, m->convert_user);
    }
    qsort(m->bound, m->n_bound, sizeof *m->bound, cmp_bound);
    return QVL_OK;
}

/* One layer's K (or V) cache in bytes, for --ctx; the pool of kv_slots of them must fit too. */
static qvl_status kv_layer_bytes(qvl_model *m, qvl_error *err) {
    const qvl_text_config *t = &m->cfg.text;
    size_t row, layer;
    int64_t row_elems;
    if (!qvl_mul_i64(t->num_key_value_heads, t->head_dim, &row_elems) ||
        !qvl_dtype_row_bytes(m->kv_dtype, row_elems, &row) ||
        !qvl_mul_size(row, (size_t)m->ctx, &layer) ||
        layer > SIZE_MAX / 2 / (size_t)t->num_hidden_layers / (size_t)m->kv_slots)
        return qvl_fail(err, QVL_E_LIMIT, "KV cache for --ctx %lld overflows", (long long)m->ctx);
    m->kv_layer_bytes = layer;
    return QVL_OK;
}

/* A new cache holds zeros, not whatever the allocator left: the unfused attention chain of a
 * kept decode graph reads every row, and a masked row adds exactly nothing only when its
 * values are finite (ops.h, MASK_CAUSAL_AT). Rows written later are finite values too, so a
 * pool slot a freed sequence leaves behind is fit for the next one as it is. */
static qvl_status zero_fill(const model_target *tg, qvl_buffer *buf, qvl_error *err) {
    if (tg->host_memory) {
        memset(buf->data, 0, buf->size);
        return QVL_OK;
    }
    enum { CHUNK = 1 << 20 };
    void *zeros = calloc(1, CHUNK);
    if (!zeros) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = QVL_OK;
    for (size_t off = 0; st == QVL_OK && off < buf->size; off += CHUNK) {
        size_t n = buf->size - off < CHUNK ? buf->size - off : CHUNK;
        st = tg->lb->iface->upload(tg->lb->be, (char *)buf->data + off, zeros, n, err);
    }
    free(zeros);
    return st;
}

static int32_t kv_target(const qvl_model *m, int64_t l) {
    return m->kv_home ? m->kv_home[l] : m->text_place[qvl_text_group_layer(l)];
}

/* `copies` caches of every layer, on each layer's target, into bufs[target]; addr[2l] and
 * [2l+1] get layer l's K and V, each `copies` caches side by side. */
static qvl_status alloc_caches(qvl_model *m, size_t copies, qvl_buffer *bufs, void **addr,
                               qvl_error *err) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    const size_t layer = m->kv_layer_bytes * copies;
    for (int32_t ti = 0; ti < (int32_t)m->n_tg; ti++) {
        model_target *tg = &m->tg[ti];
        size_t n_here = 0;
        for (int64_t l = 0; l < L; l++) n_here += kv_target(m, l) == ti;
        if (n_here == 0) continue;
        const size_t total = 2 * n_here * layer;
        qvl_status st = tg->lb->iface->buffer_alloc(tg->lb->be, total, &bufs[ti], err);
        if (st != QVL_OK)
            return qvl_error_prefix(err, "KV cache of %.1f MiB (%s, %zu layers, %zu sequences) "
                                    "for --ctx %lld on %s", total / 1048576.0,
                                    qvl_dtype_name(m->kv_dtype), n_here, copies,
                                    (long long)m->ctx, tg->lb->name);
        tg->kv_bytes += bufs[ti].size;
        if ((st = zero_fill(tg, &bufs[ti], err)) != QVL_OK) return st;
        size_t k = 0;
        for (int64_t l = 0; l < L; l++) {
            if (kv_target(m, l) != ti) continue;
            for (int kv = 0; kv < 2; kv++, k++) addr[2 * l + kv] = (char *)bufs[ti].data + k * layer;
        }
        char seqs[48] = "";
        if (copies > 1) snprintf(seqs, sizeof seqs, " (a pool of %zu sequences)", copies);
        QVL_LOG_I("KV cache on %s: %s, %lld tokens x %zu layers, %zu bytes (%.1f MiB)%s",
                  tg->lb->name, qvl_dtype_name(m->kv_dtype), (long long)m->ctx, n_here, total,
                  total / 1048576.0, seqs);
    }
    return QVL_OK;
}

static void free_caches(qvl_model *m, qvl_buffer *bufs) {
    for (size_t i = 0; i < m->n_tg; i++)
        if (bufs[i].data || bufs[i].handle) {
            m->tg[i].kv_bytes -= bufs[i].size;
            m->tg[i].lb->iface->buffer_free(m->tg[i].lb->be, &bufs[i]);
        }
}

/* The pool, at the first sequence (after placement has given every layer its target). */
static qvl_status alloc_pool(qvl_model *m, qvl_error *err) {
    const size_t L = (size_t)m->cfg.text.num_hidden_layers;
    if (!(m->pool_addr = calloc(2 * L, sizeof *m->pool_addr)) ||
        !(m->slot_used = calloc((size_t)m->kv_slots, sizeof *m->slot_used)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    return alloc_caches(m, (size_t)m->kv_slots, m->kv_pool, m->pool_addr, err);
}

void model_free_pool(qvl_model *m) {
    free_caches(m, m->kv_pool);
    free(m->pool_addr);
    free(m->slot_used);
    m->pool_addr = NULL;
    m->slot_used = NULL;
}

qvl_status model_alloc_kv(qvl_model *m, qvl_seq *s, qvl_error *err) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    qvl_status st = m->kv_layer_bytes ? QVL_OK : kv_layer_bytes(m, err);
    if (st == QVL_OK && !m->pool_addr) st = alloc_pool(m, err);
    if (st != QVL_OK) return st;
    if (!(s->kv_addr = calloc((size_t)(2 * L), sizeof *s->kv_addr)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int i = 0; i < m->kv_slots; i++) {
        if (m->slot_used[i]) continue;
        m->slot_used[i] = true;
        s->pool_slot = i;
        for (int64_t a = 0; a < 2 * L; a++)
            s->kv_addr[a] = (char *)m->pool_addr[a] + (size_t)i * m->kv_layer_bytes;
        return QVL_OK;
    }
    return alloc_caches(m, 1, s->kv, s->kv_addr, err);
}

void model_free_kv(qvl_model *m, qvl_seq *s) {
    if (s->pool_slot >= 0) m->slot_used[s->pool_slot] = false;
    s->pool_slot = -1;
    free_caches(m, s->kv);
    free(s->kv_addr);
    s->kv_addr = NULL;
}

/* "kv.<l>.k" (the current sequence's), "s<i>.kv.<l>.v" (sequence i of a batched step) or
 * "pool.kv.<l>.k" (layer l's pool: every pooled sequence's). */
static bool is_cache_input(const char *name) {
    return strncmp(name, "kv.", 3) == 0 || strncmp(name, "pool.kv.", 8) == 0 ||
           (name[0] == 's' && strstr(name, ".kv.") != NULL);
}

/* The address of a cache input in its sequence's KV cache. */
static qvl_status cache_address(const qvl_model *m, const char *name, int32_t target,
                                void **addr, qvl_error *err) {
    const qvl_seq *q = m->seq;
    const char *rest = name;
    void *const *addrs = NULL;
    if (strncmp(name, "pool.", 5) == 0) {
        addrs = m->pool_addr;
        rest = name + 5;
    } else if (name[0] == 's') {
        long long i;
        int used = 0;
        if (sscanf(name, "s%lld.%n", &i, &used) != 1 || used == 0 || i < 0 ||
            (size_t)i >= m->n_batch_seqs)
            return qvl_fail(err, QVL_E_INVALID, "graph input %s names no sequence of the batch",
                            name);
        q = m->batch_seqs[i];
        rest = name + used;
    }
    long long l;
    char which;
    int used = 0;
    if (sscanf(rest, "kv.%lld.%c%n", &l, &which, &used) != 2 || rest[used] != '\0' || l < 0 ||
        l >= m->cfg.text.num_hidden_layers || (which != 'k' && which != 'v'))
        return qvl_fail(err, QVL_E_INVALID, "graph input %s is not a cache layer", name);
    const int32_t home = m->kv_home[l];
    if (home != target)
        return qvl_fail(err, QVL_E_INVALID, "cache of layer %lld is read on %s, it lives on %s", l,
                        m->tg[target].lb->name, m->tg[home].lb->name);
    *addr = (addrs ? addrs : q->kv_addr)[2 * l + (which == 'v')];
    return QVL_OK;
}

/* Binds the weights of one part's graph on its target, and the KV inputs it reads. */
static qvl_status bind_part(qvl_model *m, qvl_split_part p, qvl_error *err) {
    qvl_graph *g = p.graph;
    for (size_t t = 0; t < qvl_graph_n_tensors(g); t++) {
        qvl_tid id = (qvl_tid)t;
        qvl_tensor_kind kind = qvl_graph_kind(g, id);
        const char *name = qvl_graph_tensor_name(g, id);
        void *addr = NULL;
        if (kind == QVL_TENSOR_WEIGHT) {
            const bound_weight *w = model_find_bound(m, name, p.target);
            if (!w && !(w = bind_late(m, name, p.target, err))) return err->status;
            if (w->dtype != qvl_graph_desc(g, id)->dtype)
                return qvl_fail(err, QVL_E_DTYPE, "weight %s is %s, the graph reads %s", name,
                                qvl_dtype_name(w->dtype),
                                qvl_dtype_name(qvl_graph_desc(g, id)->dtype));
            addr = w->buf.data;
        } else if (kind == QVL_TENSOR_INPUT && name && is_cache_input(name)) {
            qvl_status st = cache_address(m, name, p.target, &addr, err);
            if (st != QVL_OK) return st;
        } else {
            continue;
        }
        qvl_status st = qvl_exec_bind(p.exec, id, addr, err);
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}

qvl_status model_bind_split(qvl_model *m, qvl_split *sp, qvl_error *err) {
    for (size_t i = 0; i < qvl_split_n_parts(sp); i++) {
        qvl_status st = bind_part(m, qvl_split_part_at(sp, i), err);
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}

qvl_status model_split(qvl_model *m, const qvl_graph *g, bool text, qvl_split **out,
                       qvl_error *err) {
    qvl_split_target targets[MODEL_MAX_TARGETS];
    int32_t order[MODEL_MAX_TARGETS], vision_place[1];
    qvl_split_options so;
    model_split_setup(m, text, targets, order, vision_place, &so);
    qvl_status st = qvl_split_create(g, targets, m->n_tg, &so, NULL, out, err);
    if (st == QVL_OK) st = model_bind_split(m, *out, err);
    if (st != QVL_OK) {
        qvl_split_free(*out);
        *out = NULL;
        return st;
    }
    return QVL_OK;
}

void model_log_split(const qvl_model *m, const qvl_split *sp, const char *what) {
    if (m->n_tg < 2) return;
    char line[512];
    size_t used = 0;
    line[0] = '\0';
    for (size_t ti = 0; ti < m->n_tg; ti++) {
        size_t nodes = 0;
        for (size_t i = 0; i < qvl_split_n_parts(sp); i++) {
            qvl_split_part p = qvl_split_part_at(sp, i);
            if (p.target == (int32_t)ti) nodes += p.n_nodes;
        }
        if (!nodes) continue;
        int w = snprintf(line + used, sizeof line - used, "%s%zu nodes on %s", used ? ", " : "",
                         nodes, m->tg[ti].lb->name);
        if (w < 0 || (size_t)w >= sizeof line - used) break;
        used += (size_t)w;
    }
    QVL_LOG_I("%s: %s; %zu parts, %zu bytes cross between backends per run", what, line,
              qvl_split_n_parts(sp), qvl_split_copy_bytes(sp));
}

void model_note_arenas(qvl_model *m, const qvl_split *sp) {
    for (size_t i = 0; i < qvl_split_n_parts(sp); i++) {
        qvl_split_part p = qvl_split_part_at(sp, i);
        size_t a = qvl_exec_arena_bytes(p.exec);
        if (a > m->tg[p.target].activation_bytes) m->tg[p.target].activation_bytes = a;
    }
}

void model_free_bindings(qvl_model *m) {
    for (size_t i = 0; i < m->n_bound; i++) {
        model_target *tg = &m->tg[m->bound[i].target];
        tg->lb->iface->buffer_free(tg->lb->be, &m->bound[i].buf);
    }
    free(m->bound);
    m->bound = NULL;
    m->n_bound = m->cap_bound = 0;
}
