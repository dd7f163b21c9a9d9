/* The weight table: opens a model directory's safetensors (single file or sharded through
 * model.safetensors.index.json) and checks the tensors against the caller's tensor list. */
#define _POSIX_C_SOURCE 200809L
#include "qvl/weight_table.h"

#include "qvl/file.h"
#include "qvl/json_bounds.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_MAX_BYTES ((long)100 << 20)
#define LIST_NAMES 3 /* names quoted per problem category before "and N more" */

/* A name with what it refers to; sorted by name for bsearch. idx is a file, spec or map
 * position depending on the array. */
typedef struct entry {
    const char *name;
    const qvl_st_tensor *t;
    size_t idx;
} entry;

struct qvl_weights {
    qvl_safetensors **files;
    size_t n_files;
    qvl_st_tensor *given;          /* qvl_weights_open_tensors: the caller's tensors */
    size_t n_given;
    void *owner;                   /* what keeps the given tensors' data alive */
    void (*owner_free)(void *);
    qvl_tensor_spec *specs;
    const qvl_st_tensor **tensors; /* per spec */
    entry *by_name;                /* spec names sorted, .idx = spec index */
    size_t n;
    size_t total_bytes;
};

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A shard name must stay inside the model directory. */
static bool plain_file_name(const char *s) {
    return *s && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && !strchr(s, '\\');
}

void qvl_weights_close(qvl_weights *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_files; i++) qvl_safetensors_close(w->files[i]);
    free(w->files);
    free(w->given);
    if (w->owner_free) w->owner_free(w->owner);
    free(w->specs);
    free(w->tensors);
    free(w->by_name);
    free(w);
}

/* The index is a regular file of bounded size (qvl_read_file refuses FIFOs and devices). */
static qvl_status read_text_file(const char *path, char **out, size_t *len, qvl_error *err) {
    return qvl_read_file(path, (size_t)INDEX_MAX_BYTES, QVL_E_IO, out, len, err);
}

/* Open the shards listed by the index and check each tensor sits where the index says. */
static qvl_status open_sharded(qvl_weights *w, const char *dir, const char *index_path,
                               qvl_error *err) {
    char *text = NULL;
    size_t len = 0;
    qvl_status s = read_text_file(index_path, &text, &len, err);
    if (s != QVL_OK) return s;
    /* A valid index is {"metadata": {...}, "weight_map": {"name": "file", ...}}: each value
     * takes at least 8 bytes ("a":"b",), nothing nests deep and no array is long; refused
     * before cJSON spends 60-100 bytes on each value of a "0,0,0,..." text. */
    static const qvl_json_limits limits = {.max_depth = 8, .values_per_1000_bytes = 125,
                                           .values_slack = 4096, .max_array = 1024,
                                           .max_members = QVL_ST_MAX_TENSORS};
    s = qvl_json_check(text, len, &limits, index_path, err);
    if (s != QVL_OK) {
        free(text);
        return s;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    entry *map_e = NULL;
    const char **shard_of = NULL;
    const char **shards = NULL;
    if (!root) return qvl_fail(err, QVL_E_PARSE, "%s: not valid JSON", index_path);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) {
        s = qvl_fail(err, QVL_E_PARSE, "%s: \"weight_map\" missing or not an object", index_path);
        goto done;
    }
    size_t n_map = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring || !e->string) {
            s = qvl_fail(err, QVL_E_PARSE, "%s: weight_map entry '%.200s' is not a string",
                         index_path, e->string ? e->string : "");
            goto done;
        }
        if (!plain_file_name(e->valuestring)) {
            s = qvl_fail(err, QVL_E_INVALID,
                         "%s: tensor '%.200s': shard '%.200s' is not a plain file name in the "
                         "model directory",
                         index_path, e->string, e->valuestring);
            goto done;
        }
        if (++n_map > QVL_ST_MAX_TENSORS) {
            s = qvl_fail(err, QVL_E_LIMIT, "%s: weight_map has more than %u entries", index_path,
                         QVL_ST_MAX_TENSORS);
            goto done;
        }
    }
    /* The map sorted by tensor name (entry.idx indexes shard_of) and the distinct shards. */
    map_e = malloc((n_map ? n_map : 1) * sizeof *map_e);
    shard_of = malloc((n_map ? n_map : 1) * sizeof *shard_of);
    shards = malloc((n_map ? n_map : 1) * sizeof *shards);
    if (!map_e || !shard_of || !shards) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    size_t k = 0;
    for (const cJSON *e = map->child; e; e = e->next, k++) {
        shard_of[k] = shards[k] = e->valuestring;
        map_e[k] = (entry){e->string, NULL, k};
    }
    qsort(map_e, n_map, sizeof *map_e, cmp_entry);
    for (size_t i = 1; i < n_map; i++)
        if (!strcmp(map_e[i - 1].name, map_e[i].name)) {
            s = qvl_fail(err, QVL_E_INVALID, "%s: tensor '%.200s': listed twice in weight_map",
                         index_path, map_e[i].name);
            goto done;
        }
    qsort(shards, n_map, sizeof *shards, cmp_str_ptr);
    size_t n_shards = 0;
    for (size_t i = 0; i < n_map; i++)
        if (!n_shards || strcmp(shards[n_shards - 1], shards[i])) shards[n_shards++] = shards[i];
    w->files = calloc(n_shards ? n_shards : 1, sizeof *w->files);
    if (!w->files) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    for (size_t i = 0; i < n_shards; i++) {
        char *path = qvl_path_join(dir, shards[i]);
        if (!path) {
            s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", index_path);
            goto done;
        }
        s = qvl_safetensors_open(path, &w->files[i], err);
        free(path);
        if (s != QVL_OK) goto done;
        w->n_files++;
    }
    /* Every shard tensor must be mapped to that shard ... */
    for (size_t i = 0; i < w->n_files; i++) {
        const qvl_safetensors *f = w->files[i];
        for (size_t j = 0; j < qvl_safetensors_count(f); j++) {
            const qvl_st_tensor *t = qvl_safetensors_at(f, j);
            entry key = {.name = t->name};
            const entry *e = bsearch(&key, map_e, n_map, sizeof *map_e, cmp_entry);
            if (!e) {
                s = qvl_fail(err, QVL_E_INVALID,
                             "%s: tensor '%.200s': held by %s but not listed in weight_map",
                             index_path, t->name, shards[i]);
                goto done;
            }
            if (strcmp(shard_of[e->idx], shards[i])) {
                s = qvl_fail(err, QVL_E_INVALID,
                             "%s: tensor '%.200s': held by %s but weight_map says %.200s",
                             index_path, t->name, shards[i], shard_of[e->idx]);
                goto done;
            }
        }
    }
    /* ... and every mapped tensor must be in its shard. */
    for (size_t i = 0; i < n_map; i++) {
        const char *want = shard_of[map_e[i].idx];
        const char **sh = bsearch(&want, shards, n_shards, sizeof *shards, cmp_str_ptr);
        if (!sh || !qvl_safetensors_find(w->files[sh - shards], map_e[i].name)) {
            s = qvl_fail(err, QVL_E_NOT_FOUND,
                         "%s: tensor '%.200s': mapped to %s, which does not hold it", index_path,
                         map_e[i].name, want);
            goto done;
        }
    }
done:
    free(map_e);
    free(shard_of);
    free(shards);
    cJSON_Delete(root);
    return s;
}

/* Appends "; <count> <what>: a, b, c and N more" to msg. */
static void append_list(char *msg, size_t cap, const char *what, const char **names, size_t n,
                        const char *const *details) {
    size_t len = strlen(msg);
    if (!n || len >= cap) return;
    len += (size_t)snprintf(msg + len, cap - len, "%s%zu %s: ", len ? "; " : "", n, what);
    for (size_t i = 0; i < n && i < LIST_NAMES && len < cap; i++)
        len += (size_t)snprintf(msg + len, cap - len, "%s%.120s%s", i ? ", " : "", names[i],
                                details ? details[i] : "");
    if (n > LIST_NAMES && len < cap)
        snprintf(msg + len, cap - len, " and %zu more", n - LIST_NAMES);
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

static bool same_shape(const qvl_tensor_spec *s, const qvl_st_tensor *t) {
    if (s->ndim != t->ndim) return false;
    for (int i = 0; i < s->ndim; i++)
        if (s->shape[i] != t->shape[i]) return false;
    return true;
}

#define DETAIL_CAP 160

/* Match the files' tensors against the specs; report every problem in one message. */
static bool is_ignored(const char *name, const char *const *ignored, size_t n_ignored) {
    for (size_t i = 0; i < n_ignored; i++)
        if (!strcmp(name, ignored[i])) return true;
    return false;
}

static qvl_status check_against_specs(qvl_weights *w, const char *where,
                                      const char *const *ignored, size_t n_ignored,
                                      qvl_error *err) {
    size_t n_all = 0;
    for (size_t i = 0; i < w->n_files; i++) n_all += qvl_safetensors_count(w->files[i]);
    n_all += w->n_given;
    entry *all = malloc((n_all ? n_all : 1) * sizeof *all);
    const char **missing = malloc((w->n ? w->n : 1) * sizeof *missing);
    const char **badshape = malloc((w->n ? w->n : 1) * sizeof *badshape);
    char(*details)[DETAIL_CAP] = calloc(LIST_NAMES, DETAIL_CAP);
    const char **extra = malloc((n_all ? n_all : 1) * sizeof *extra);
    qvl_status s = QVL_OK;
    if (!all || !missing || !badshape || !details || !extra) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", where);
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < w->n_files; i++)
        for (size_t j = 0; j < qvl_safetensors_count(w->files[i]); j++) {
            const qvl_st_tensor *t = qvl_safetensors_at(w->files[i], j);
            all[k++] = (entry){t->name, t, i};
        }
    for (size_t i = 0; i < w->n_given; i++) all[k++] = (entry){w->given[i].name, &w->given[i], 0};
    qsort(all, n_all, sizeof *all, cmp_entry);
    for (size_t i = 1; i < n_all; i++)
        if (!strcmp(all[i - 1].name, all[i].name) && w->n_given) {
            s = qvl_fail(err, QVL_E_INVALID, "%s: tensor '%.200s' is given twice", where,
                         all[i].name);
            goto done;
        } else if (!strcmp(all[i - 1].name, all[i].name)) {
            s = qvl_fail(err, QVL_E_INVALID, "%s: tensor '%.200s': stored in both %s and %s", where,
                         all[i].name, qvl_safetensors_path(w->files[all[i - 1].idx]),
                         qvl_safetensors_path(w->files[all[i].idx]));
            goto done;
        }

    size_t n_missing = 0, n_bad = 0, n_extra = 0;
    for (size_t i = 0; i < w->n; i++) {
        const qvl_tensor_spec *sp = &w->specs[i];
        entry key = {.name = sp->name};
        const entry *hit = bsearch(&key, all, n_all, sizeof *all, cmp_entry);
        if (!hit) {
            missing[n_missing++] = sp->name;
            continue;
        }
        if (!same_shape(sp, hit->t)) {
            if (n_bad < LIST_NAMES) {
                char a[64], b[64];
                shape_str(a, sizeof a, hit->t->ndim, hit->t->shape);
                shape_str(b, sizeof b, sp->ndim, sp->shape);
                snprintf(details[n_bad], DETAIL_CAP, " is %s, config implies %s", a, b);
            }
            badshape[n_bad++] = sp->name;
            continue;
        }
        w->tensors[i] = hit->t;
        w->total_bytes += hit->t->nbytes;
    }
    for (size_t i = 0; i < n_all; i++) {
        const char *name = all[i].name;
        if (bsearch(&all[i], w->by_name, w->n, sizeof *w->by_name, cmp_entry)) continue;
        if (is_ignored(name, ignored, n_ignored)) continue;
        extra[n_extra++] = name;
    }
    if (n_missing || n_bad || n_extra) {
        char msg[sizeof err->msg];
        msg[0] = '\0';
        const char *detail_ptrs[LIST_NAMES];
        for (int i = 0; i < LIST_NAMES; i++) detail_ptrs[i] = details[i];
        append_list(msg, sizeof msg,
                    n_missing == 1 ? "expected tensor missing" : "expected tensors missing",
                    missing, n_missing, NULL);
        append_list(msg, sizeof msg,
                    n_bad == 1 ? "tensor with the wrong shape" : "tensors with the wrong shape",
                    badshape, n_bad, detail_ptrs);
        append_list(msg, sizeof msg, n_extra == 1 ? "unexpected tensor" : "unexpected tensors",
                    extra, n_extra, NULL);
        s = qvl_fail(err,
                     n_missing ? QVL_E_NOT_FOUND
                     : n_bad   ? QVL_E_SHAPE
                               : QVL_E_INVALID,
                     "%s: %s", where, msg);
    }
done:
    free(all);
    free(missing);
    free(badshape);
    free(details);
    free(extra);
    return s;
}

/* The table's spec arrays (copied specs, and their names sorted for lookup). */
static qvl_status set_specs(qvl_weights *w, const char *where, const qvl_tensor_spec *specs,
                            size_t n, qvl_error *err) {
    w->specs = malloc((n ? n : 1) * sizeof *w->specs);
    w->tensors = calloc(n ? n : 1, sizeof *w->tensors);
    w->by_name = malloc((n ? n : 1) * sizeof *w->by_name);
    if (!w->specs || !w->tensors || !w->by_name)
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", where);
    if (n) memcpy(w->specs, specs, n * sizeof *specs);
    w->n = n;
    for (size_t i = 0; i < w->n; i++) w->by_name[i] = (entry){w->specs[i].name, NULL, i};
    qsort(w->by_name, w->n, sizeof *w->by_name, cmp_entry);
    return QVL_OK;
}

qvl_status qvl_weights_open_tensors(const char *where, const qvl_tensor_spec *specs, size_t n,
                                    const qvl_st_tensor *tensors, size_t n_tensors,
                                    const char *const *ignored, size_t n_ignored, void *owner,
                                    void (*owner_free)(void *), qvl_weights **out,
                                    qvl_error *err) {
    qvl_weights *w = NULL;
    qvl_status s = QVL_OK;
    if (out) *out = NULL;
    if (!where || (!specs && n) || (!tensors && n_tensors) || (!ignored && n_ignored) || !out) {
        s = qvl_fail(err, QVL_E_INVALID, "weights: missing argument");
    } else if (!(w = calloc(1, sizeof *w))) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", where);
    }
    if (!w) {
        if (owner_free) owner_free(owner);
        return s;
    }
    w->owner = owner;
    w->owner_free = owner_free;
    s = set_specs(w, where, specs, n, err);
    if (s == QVL_OK && !(w->given = malloc((n_tensors ? n_tensors : 1) * sizeof *w->given)))
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", where);
    if (s == QVL_OK) {
        if (n_tensors) memcpy(w->given, tensors, n_tensors * sizeof *tensors);
        w->n_given = n_tensors;
        s = check_against_specs(w, where, ignored, n_ignored, err);
    }
    if (s != QVL_OK) {
        qvl_weights_close(w);
        return s;
    }
    *out = w;
    return QVL_OK;
}

qvl_status qvl_weights_open_specs(const char *model_dir, const qvl_tensor_spec *specs, size_t n,
                                  const char *const *ignored, size_t n_ignored,
                                  qvl_weights **out, qvl_error *err) {
    if (!model_dir || (!specs && n) || (!ignored && n_ignored) || !out)
        return qvl_fail(err, QVL_E_INVALID, "weights: missing argument");
    *out = NULL;
    qvl_weights *w = calloc(1, sizeof *w);
    if (!w) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", model_dir);
    char *single = qvl_path_join(model_dir, "model.safetensors");
    char *index = qvl_path_join(model_dir, "model.safetensors.index.json");
    const char *where = NULL;
    qvl_status s = QVL_OK;
    if (!single || !index) {
        s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", model_dir);
        goto fail;
    }
    if ((s = set_specs(w, model_dir, specs, n, err)) != QVL_OK) goto fail;

    if (is_file(single)) {
        where = single;
        w->files = calloc(1, sizeof *w->files);
        if (!w->files) {
            s = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", model_dir);
            goto fail;
        }
        if ((s = qvl_safetensors_open(single, &w->files[0], err)) != QVL_OK) goto fail;
        w->n_files = 1;
    } else if (is_file(index)) {
        where = index;
        if ((s = open_sharded(w, model_dir, index, err)) != QVL_OK) goto fail;
    } else {
        s = qvl_fail(err, QVL_E_NOT_FOUND,
                     "%s: neither model.safetensors nor model.safetensors.index.json found",
                     model_dir);
        goto fail;
    }
    if ((s = check_against_specs(w, where, ignored, n_ignored, err)) != QVL_OK) goto fail;
    free(single);
    free(index);
    *out = w;
    return QVL_OK;
fail:
    free(single);
    free(index);
    qvl_weights_close(w);
    return s;
}

const qvl_st_tensor *qvl_weights_get(const qvl_weights *w, const char *name) {
    if (!w || !name) return NULL;
    entry key = {.name = name};
    const entry *hit = bsearch(&key, w->by_name, w->n, sizeof *w->by_name, cmp_entry);
    return hit ? w->tensors[hit->idx] : NULL;
}

size_t qvl_weights_count(const qvl_weights *w) {
    return w ? w->n : 0;
}

const qvl_st_tensor *qvl_weights_at(const qvl_weights *w, size_t i) {
    return w && i < w->n ? w->tensors[i] : NULL;
}

size_t qvl_weights_total_bytes(const qvl_weights *w) {
    return w ? w->total_bytes : 0;
}
