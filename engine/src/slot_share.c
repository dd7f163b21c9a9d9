/* Prefixes shared between slots: a job may start from the longest prefix any slot of its
 * partition holds (copied into its own slot's cache, qvl_seq_copy_prefix), not only its own
 * slot's. n > 1 choices of one request are n jobs with one prompt: the first prefills it, the
 * others copy it and run only the last prompt token (whose logits pick their first token).
 *
 * A job whose prompt another slot is prefilling right now waits for that prefill to pass the
 * part they share, rather than prefill the same tokens beside it. The wait is bounded by that
 * one prefill: the slot waited on is prefilling (it waits on no one), and prefills advance
 * every round, oldest first. A job that gets its slot later copies from whichever slot still
 * holds the prefix then, or prefills what no slot holds; nothing waits for a slot to become
 * free, so fewer free slots than choices is no different from separate requests. */
#include <stdbool.h>

#include "qvl/log.h"
#include "slot.h"

/* Prompt tokens of j that slot o's prompt will hold once o's prefill is done. */
static int64_t pending_match(const engine_slot *o, const qvl_job *j) {
    const qvl_job *oj = o->job;
    const qvl_prefix cache = {.partition = &oj->partition, .keys = oj->keys, .n_keys = oj->n_ids,
                              .images = oj->images, .n_images = oj->req->n_pictures};
    const qvl_prefix prompt = {.partition = &j->partition, .keys = j->keys, .n_keys = j->n_ids,
                               .images = j->images, .n_images = j->req->n_pictures};
    return qvl_prefix_match(&cache, &prompt);
}

/* The slot other than s whose cache holds the longest prefix of j now (NULL: none holds more
 * than `beat` tokens of it). */
static engine_slot *donor_for(engine_slot *slots, int n, const engine_slot *s, const qvl_job *j,
                              int64_t beat) {
    engine_slot *best = NULL;
    for (int i = 0; i < n; i++) {
        engine_slot *o = &slots[i];
        if (o == s || o->n_keys <= beat) continue;
        const int64_t keep = engine_slot_reusable(o, j);
        if (keep > beat) {
            best = o;
            beat = keep;
        }
    }
    return best;
}

/* The slot prefilling a prompt that will hold more than `beat` tokens of j, the most of them
 * (*want); NULL when none does. */
static engine_slot *source_for(engine_slot *slots, int n, const engine_slot *s, const qvl_job *j,
                               int64_t beat, int64_t *want) {
    engine_slot *best = NULL;
    for (int i = 0; i < n; i++) {
        engine_slot *o = &slots[i];
        if (o == s || !o->job || !o->prefilling) continue;
        const int64_t keep = pending_match(o, j);
        if (keep > beat) {
            best = o;
            beat = keep;
        }
    }
    *want = beat;
    return best;
}

bool engine_share_start(engine_slot *slots, int n, engine_slot *s, qvl_job *j,
                        const engine_slot_env *env) {
    const int64_t own = engine_slot_reusable(s, j);
    const engine_slot *donor = donor_for(slots, n, s, j, own);
    const int64_t now = donor ? engine_slot_reusable(donor, j) : own;
    int64_t want = 0;
    engine_slot *source = source_for(slots, n, s, j, now, &want);
    if (source) {
        /* Busy (not claimable, not idle) but neither prefilling nor decoding: the rounds pass
         * it by until engine_share_resume starts it. What engine_slot_end reads of a slot is
         * reset, so that a shutdown can end the job as it waits. */
        s->job = j;
        s->waiting = true;
        s->wait_for = source;
        s->wait_claim = source->last_used;
        s->wait_want = want;
        s->n_generated = 0;
        s->decode_start = 0;
        s->oom = false;
        return false;
    }
    engine_slot_start(s, j, env, donor);
    return true;
}

int engine_share_resume(engine_slot *slots, int n, const engine_slot_env *env) {
    int started = 0;
    for (int i = 0; i < n; i++) {
        engine_slot *s = &slots[i];
        if (!s->waiting) continue;
        const engine_slot *src = s->wait_for;
        /* Ready once the source's cache holds the shared part, or once the source is no
         * longer prefilling that prompt (done, ended, or on to another job: the last claim
         * changed). */
        const bool ready = src->last_used != s->wait_claim || !src->job || !src->prefilling ||
                           src->n_keys >= s->wait_want;
        if (!ready) continue;
        qvl_job *j = s->job;
        s->job = NULL;
        s->waiting = false;
        s->wait_for = NULL;
        started += engine_share_start(slots, n, s, j, env);
    }
    return started;
}
