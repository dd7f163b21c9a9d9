/* A request into a job (qvl_engine_prepare): its prompt's tokens with the pictures' and
 * videos' pads expanded, the cache key of every token, and the checks of what the request
 * asks (ids, pads, constraints); tokenizing and detokenizing for front ends. */
#define _XOPEN_SOURCE 700

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* Per token, what its KV cache entry depends on (qvl/prefix_cache.h): the id, or for the k-th
 * pad of a picture or video the item's digest and k. images gets each item's span (a video's
 * runs from its first pad to its last, the timestamps between them included) and digest.
 * Items come in prompt order; a pad of the other kind than the current item's is refused. */
static qvl_status make_keys(const int32_t *ids, int64_t n, int32_t pad, int32_t video_pad,
                            const qvl_engine_request *r, uint64_t *keys, qvl_prefix_image *images,
                            qvl_error *err) {
    size_t item = 0;
    int64_t k = 0;
    for (int64_t t = 0; t < n; t++) {
        const bool is_pad = ids[t] == pad || (video_pad >= 0 && ids[t] == video_pad);
        if (!is_pad) {
            keys[t] = qvl_prefix_text_key(ids[t]);
            continue;
        }
        const qvl_picture *im = item < r->n_pictures ? &r->pictures[item] : NULL;
        if (!im || (ids[t] == video_pad) != im->is_video)
            return qvl_fail(err, QVL_E_INVALID, "the prompt's picture and video placeholders are "
                            "not in the order of its pictures and videos");
        if (k == 0) {
            images[item].at = t;
            memcpy(images[item].digest, im->digest, sizeof images[item].digest);
        }
        keys[t] = qvl_prefix_pad_key(im->digest, k);
        if (++k == im->n_tokens) {
            images[item].n_tokens = t + 1 - images[item].at;
            item++;
            k = 0;
        }
    }
    return QVL_OK;
}

/* The rendered prompt with each video placeholder replaced by its video's text. */
static qvl_status video_text(const qvl_engine_request *req, char **out, qvl_error *err) {
    *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < req->n_pictures; i++) n += req->pictures[i].is_video;
    if (n == 0) return QVL_OK;
    const char **texts = malloc(n * sizeof *texts);
    if (!texts) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    size_t k = 0;
    qvl_status st = QVL_OK;
    for (size_t i = 0; i < req->n_pictures; i++) {
        if (!req->pictures[i].is_video) continue;
        if (!req->pictures[i].text)
            st = qvl_fail(err, QVL_E_INVALID, "a video without its prompt text");
        texts[k++] = req->pictures[i].text;
    }
    if (st == QVL_OK) st = qvl_video_expand_text(req->prompt, texts, n, out, err);
    free(texts);
    return st;
}

/* Each pad of kind `pad` in *ids expanded: the k-th to counts[k] tokens. */
static qvl_status expand(int32_t **ids, int64_t *n, int32_t pad, const int64_t *counts,
                         size_t n_counts, qvl_error *err) {
    int32_t *out = NULL;
    int64_t n_out = 0;
    qvl_status st = qvl_expand_image_pads(*ids, *n, pad, counts, n_counts, &out, &n_out, err);
    if (st != QVL_OK) return st;
    free(*ids);
    *ids = out;
    *n = n_out;
    return QVL_OK;
}

qvl_status qvl_engine_tokenize(qvl_engine *e, const char *text, size_t len, int32_t **ids,
                               size_t *n, qvl_error *err) {
    if (!e->tok) return qvl_fail(err, QVL_E_INVALID, "the model has no tokenizer.json: give the prompt as token ids");
    pthread_mutex_lock(&e->tok_mu); /* encode keeps scratch state in the tokenizer */
    qvl_status st = qvl_tokenizer_encode(e->tok, text, len, ids, n, err);
    pthread_mutex_unlock(&e->tok_mu);
    return st;
}

qvl_status qvl_engine_detokenize(qvl_engine *e, const int32_t *ids, size_t n, char **text,
                                 size_t *len, qvl_error *err) {
    if (!e->tok) return qvl_fail(err, QVL_E_INVALID, "the model has no tokenizer.json");
    const int32_t vocab = qvl_tokenizer_vocab_size(e->tok);
    for (size_t i = 0; i < n; i++) {
        const char *bytes;
        size_t nb;
        if (ids[i] < 0 || ids[i] >= vocab ||
            qvl_tokenizer_token_to_piece(e->tok, ids[i], &bytes, &nb, NULL) != QVL_OK)
            return qvl_fail(err, QVL_E_INVALID, "token %zu: %lld is not a token of this model "
                            "(0..%d)", i, (long long)ids[i], (int)vocab - 1);
    }
    return qvl_tokenizer_decode(e->tok, ids, n, false, text, len, err);
}

/* A prompt given as ids: copied, each checked against the model's vocabulary. */
static qvl_status copy_ids(const qvl_engine *e, const qvl_engine_request *req, int32_t **out,
                           size_t *n, qvl_error *err) {
    *out = malloc((req->n_prompt_ids + 1) * sizeof **out);
    if (!*out) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < req->n_prompt_ids; i++) {
        const int32_t id = req->prompt_ids[i];
        if (id < 0 || id >= e->defaults.n_valid) {
            free(*out);
            *out = NULL;
            return qvl_fail(err, QVL_E_INVALID, "prompt token %zu: %lld is outside the model's "
                            "vocabulary (0..%d)", i, (long long)id, (int)e->defaults.n_valid - 1);
        }
        (*out)[i] = id;
    }
    *n = req->n_prompt_ids;
    return QVL_OK;
}

/* Ids given as the prompt hold every pad of their pictures and videos already: as many as
 * the items take, of each kind. */
static qvl_status check_pads(const qvl_engine *e, const qvl_engine_request *req,
                             const int32_t *ids, size_t n, qvl_error *err) {
    int64_t want[2] = {0, 0}, have[2] = {0, 0};
    for (size_t i = 0; i < req->n_pictures; i++) want[req->pictures[i].is_video] += req->pictures[i].n_tokens;
    for (size_t i = 0; i < n; i++) {
        have[0] += ids[i] == e->pad_id;
        have[1] += e->has_video && ids[i] == e->video_pad_id;
    }
    for (int k = 0; k < 2; k++)
        if (have[k] != want[k])
            return qvl_fail(err, QVL_E_INVALID, "the prompt ids hold %lld %s pad tokens but its "
                            "%s take %lld", (long long)have[k], k ? "video" : "image",
                            k ? "videos" : "pictures", (long long)want[k]);
    return QVL_OK;
}

/* The prompt's ids with each picture's one placeholder expanded to its tokens, and each
 * video's groups (one placeholder each) to theirs. */
static qvl_status tokenize(qvl_engine *e, const qvl_engine_request *req, int32_t **out,
                           int64_t *n_out, qvl_error *err) {
    int32_t *ids = NULL;
    size_t count = 0;
    if (req->prompt_ids) { /* the pads are there already */
        qvl_status st = copy_ids(e, req, &ids, &count, err);
        if (st == QVL_OK) st = check_pads(e, req, ids, count, err);
        if (st != QVL_OK) {
            free(ids);
            return st == QVL_E_NOMEM ? st : QVL_E_INVALID;
        }
        *out = ids;
        *n_out = (int64_t)count;
        return QVL_OK;
    }
    char *with_videos = NULL;
    qvl_status st = video_text(req, &with_videos, err);
    if (st == QVL_E_NOMEM) return st;
    if (st != QVL_OK) return QVL_E_INVALID;
    const char *text = with_videos ? with_videos : req->prompt;
    st = qvl_engine_tokenize(e, text, strlen(text), &ids, &count, err);
    free(with_videos);
    int64_t n = (int64_t)count;
    /* Also without pictures: a pad token in the text (a front end refuses the ones it can see
     * in the rendered prompt; this is the tokenizer's own count) has no pixels behind it, and
     * reaching a slot it would fail there and cost the slot its cache. */
    size_t n_groups = 0, n_images = 0;
    for (size_t i = 0; i < req->n_pictures; i++)
        if (req->pictures[i].is_video) n_groups += (size_t)req->pictures[i].grid_t;
        else n_images++;
    int64_t *counts = st == QVL_OK ? malloc((n_images + n_groups + 1) * sizeof *counts) : NULL;
    if (st == QVL_OK && !counts) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) {
        size_t k = 0;
        for (size_t i = 0; i < req->n_pictures; i++)
            if (!req->pictures[i].is_video) counts[k++] = req->pictures[i].n_tokens;
        st = expand(&ids, &n, e->pad_id, counts, n_images, err);
    }
    if (st == QVL_OK && e->has_video) {
        size_t k = 0;
        for (size_t i = 0; i < req->n_pictures; i++) {
            const qvl_picture *p = &req->pictures[i];
            for (int64_t g = 0; p->is_video && g < p->grid_t; g++) counts[k++] = p->n_tokens / p->grid_t;
        }
        st = expand(&ids, &n, e->video_pad_id, counts, n_groups, err);
    } else if (st == QVL_OK && n_groups > 0) {
        st = qvl_fail(err, QVL_E_INVALID, "this model takes no videos");
    }
    free(counts);
    if (st != QVL_OK) {
        free(ids);
        /* A text that spells out the picture placeholder token breaks the count. */
        return st == QVL_E_NOMEM ? st : QVL_E_INVALID;
    }
    *out = ids;
    *n_out = n;
    return QVL_OK;
}

/* The request's structured-output parts, checked before any tokenizing: bias ids inside the
 * vocabulary, a top_logprobs count in range, a grammar that compiles. */
static qvl_status check_constraints(const qvl_engine *e, const qvl_engine_request *req,
                                    qvl_grammar **grammar, qvl_error *err) {
    *grammar = NULL;
    const int32_t n_valid = e->defaults.n_valid;
    for (size_t i = 0; i < req->n_bias; i++) {
        const qvl_logit_bias *b = &req->bias[i];
        if (b->id < 0 || b->id >= n_valid)
            return qvl_fail(err, QVL_E_INVALID, "logit_bias: token id %d is outside the "
                            "vocabulary (0..%d)", (int)b->id, (int)n_valid - 1);
        if (!isfinite(b->bias))
            return qvl_fail(err, QVL_E_INVALID, "logit_bias: the bias of token %d is not a "
                            "finite number", (int)b->id);
    }
    if (req->logprobs && (req->top_logprobs < 0 || req->top_logprobs > QVL_TOP_LOGPROBS_MAX))
        return qvl_fail(err, QVL_E_INVALID, "top_logprobs must be in [0, %d]",
                        QVL_TOP_LOGPROBS_MAX);
    if (!req->grammar) return QVL_OK;
    qvl_status st = qvl_grammar_parse(req->grammar, strlen(req->grammar), grammar, err);
    if (st != QVL_OK) return st == QVL_E_NOMEM ? st : (qvl_error_prefix(err, "grammar"), QVL_E_INVALID);
    return QVL_OK;
}

qvl_status qvl_engine_prepare(qvl_engine *e, qvl_engine_request *req, qvl_job **out,
                              qvl_error *err) {
    *out = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    qvl_grammar *grammar = NULL;
    qvl_status st = check_constraints(e, req, &grammar, err);
    if (st != QVL_OK) {
        qvl_engine_request_free(req);
        return st;
    }
    st = tokenize(e, req, &ids, &n, err);
    if (st != QVL_OK) {
        qvl_grammar_free(grammar);
        qvl_engine_request_free(req);
        return st;
    }
    const int64_t ctx = e->opts.ctx;
    if (n == 0) { /* the first answer token is sampled from the last prompt token's logits */
        qvl_grammar_free(grammar);
        free(ids);
        qvl_engine_request_free(req);
        return qvl_fail(err, QVL_E_INVALID, "the prompt is empty: give at least one token");
    }
    if (n > ctx) { /* a prompt that fills the context still gets the token its logits give */
        qvl_grammar_free(grammar);
        free(ids);
        qvl_engine_request_free(req);
        return qvl_fail(err, QVL_E_LIMIT, "the prompt has %lld tokens, but a slot's context "
                        "(--ctx) holds %lld", (long long)n, (long long)ctx);
    }
    uint64_t *keys = malloc((size_t)n * sizeof *keys);
    qvl_prefix_image *images = calloc(req->n_pictures + 1, sizeof *images);
    qvl_job *j = keys && images ? qvl_job_create(req, ids, keys, images, n) : NULL;
    if (!j) {
        qvl_grammar_free(grammar);
        free(ids);
        free(keys);
        free(images);
        qvl_engine_request_free(req);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    j->grammar = grammar;
    j->logits_width = e->env.vocab;
    if (req->prompt_logits &&
        !(j->prompt_logits = malloc((size_t)n * (size_t)e->env.vocab * sizeof(float)))) {
        qvl_job_release(j);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory for the prompt's logits");
    }
    st = make_keys(ids, n, e->pad_id, e->has_video ? e->video_pad_id : -1, req, keys, images, err);
    if (st != QVL_OK) {
        qvl_job_release(j);
        return QVL_E_INVALID;
    }
    qvl_partition_make(QVL_PARTITION_NO_KEY, NULL, &j->partition);
    *out = j;
    return QVL_OK;
}

