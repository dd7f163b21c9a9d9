/* What engine.c (loading, the queue, the scheduling loop) and engine_prepare.c (a request
 * into a job: tokens, pads, cache keys, checks) share: the engine itself. */
#ifndef QVL_ENGINE_INTERNAL_H
#define QVL_ENGINE_INTERNAL_H

#include "qvl/engine.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl/gen_config.h"
#include "qvl/image_preprocess.h"
#include "qvl/log.h"
#include "qvl/mm_prompt.h"
#include "qvl/model_files.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/tokenizer.h"
#include "picture_rules.h"
#include "qvl/prefix_cache.h"
#include "slot.h"

struct qvl_engine {
    qvl_engine_options opts;
    /* Text chunks of several slots in one batched prefill; QVL_PREFILL_BATCH=0 in the
     * environment runs each alone (A/B benchmarks of the batched prefill). */
    bool prefill_batch;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu; /* state, queue, slot assignment */
    pthread_cond_t cv;
    qvl_engine_phase state;
    char error[1024];
    qvl_job **queue; /* ring of opts.queue + opts.slots entries */
    size_t q_cap, q_head, q_len;
    int idle;          /* slots without a job */

    /* Set while LOADING by the engine thread; read-only afterwards. */
    qvl_tokenizer *tok;
    pthread_mutex_t tok_mu; /* encode is not thread-safe (qvl/tokenizer.h) */
    qvl_gen_config gen;
    qvl_grammar_vocab *trie; /* the tokenizer's text tokens, shared by every grammar job */
    qvl_sampling_params defaults;
    qvl_picture_rules pictures;
    qvl_video_rules videos;
    bool has_vision, has_video;
    int32_t pad_id, video_pad_id;
    qvl_model *model; /* one copy of the weights; each slot decodes its own sequence on it */
    engine_slot *slots;
    int n_slots;
    /* One batched decode step's sequences, token ids, slots and logits [n_slots, vocab]. */
    qvl_seq **batch_seqs;
    int32_t *batch_ids;
    int *batch_slot;
    float *batch_logits;
    int32_t *batch_next; /* the greedy tokens a step chose on the device (-1: see the logits) */
    engine_slot_env env;
    uint64_t tick;
    qvl_engine_slot_info *info; /* [n_slots] under mu: what /slots shows */
};

#endif
