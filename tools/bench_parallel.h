/* qvl-bench --parallel N: N sequences on the model's one copy of the weights, each prefilled
 * with the prompt (all in one batched prefill), then decoded together in batched steps (qvl_model_decode_batch): the total
 * tokens per second a server with N busy slots gets. */
#ifndef QVL_TOOLS_BENCH_PARALLEL_H
#define QVL_TOOLS_BENCH_PARALLEL_H

#include <stdint.h>

#include "bench_report.h"
#include "qvl/qwen3vl_model.h"

/* reps x {N fresh sequences, their prompts in one batched prefill (qvl_model_prefill_batch),
 * n_gen batched greedy steps}; out: total decode tokens per second (N x n_gen / the steps'
 * time) with each step's logits brought to the host (as llama-batched-bench does), greedy: the
 * same with the tokens chosen on the device (qvl_model_decode_batch_greedy), prefill: the
 * batched prefill's tokens per second (N x n_prompt / its time), over the repetitions. With
 * prof non-NULL one more batched step runs profiled: its per-op time in *prof, its wall
 * seconds in *prof_wall. */
qvl_status bench_parallel(qvl_model *m, int64_t n_seqs, const int32_t *prompt, int64_t n_prompt,
                          int64_t n_gen, int64_t reps, bench_spread *out, bench_spread *greedy,
                          bench_spread *prefill, qvl_op_profile *prof, double *prof_wall,
                          qvl_error *err);

#endif
