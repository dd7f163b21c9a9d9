/* What qvl-bench measured, and the two ways it prints it (text for people, one JSON object for
 * scripts). Derived figures (GB/s achieved, GFLOP/s, fractions of the probes) are computed here
 * from the raw ones so that both outputs agree. */
#ifndef QVL_BENCH_REPORT_H
#define QVL_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_probe.h"
#include "qvl/graph.h"
#include "qvl/qwen3vl_model.h"

/* Median and range of one figure over the repetitions. */
typedef struct bench_spread {
    double median, min, max;
    int n;
} bench_spread;

/* Sorts values in place. */
bench_spread bench_spread_of(double *values, int n);

typedef struct bench_results {
    const char *model_dir;
    const char *backend;     /* the backend's name */
    const char *device;      /* what describe() says */
    const char *weights;     /* dtype the graphs read matrices in */
    /* every matrix type, most used first: "q4_k + q6_k (text), q8_0 (vision)" */
    char weights_mix[128];
    bool weights_requested;  /* --weights chose the dtype (converted at load when it differs) */
    int64_t threads;         /* -t, or -1: the backend's default */
    int64_t n_prompt, n_gen, reps;

    double load_seconds;     /* qvl_model_open as a whole */
    qvl_model_load_stats load;
    double first_prefill_seconds; /* the first prompt after load (cold: weights paged in) */

    bench_spread prefill_tps, decode_tps;

    uint64_t rss_after_load; /* ru_maxrss, bytes */
    uint64_t rss_peak;       /* ru_maxrss after every model run, before the probes */
    bool has_device_memory;  /* backend memory is not host memory */
    int64_t device_memory_bytes; /* memory_free before load minus after */

    bool image_requested;
    int64_t image_w, image_h;
    const char *vision_note; /* why there is no vision figure (has_vision false) */
    bool has_vision;
    qvl_image_grid image_grid;   /* patches */
    int64_t vision_tokens;       /* merged tokens the picture becomes */
    double vision_first_ms;      /* first encode (cold) */
    bench_spread vision_ms;      /* encode time over the repetitions */
    double vision_flops;         /* one encode, from the config */
    bool vision_profiled;
    qvl_op_profile prof_vision;
    double prof_vision_wall;

    bool profiled;
    qvl_op_profile prof_prefill, prof_decode;
    double prof_prefill_wall, prof_decode_wall; /* whole qvl_model_eval calls while profiled */

    bool probed;
    bench_probe probe;
    double prefill_flops;    /* one prefill of n_prompt tokens, from the config */

    int64_t parallel;        /* --parallel N (> 1: parallel_tps measured) */
    bench_spread parallel_tps; /* total decode tok/s of N sequences in batched steps */
    bench_spread parallel_prefill_tps; /* their N prompts in one batched prefill, tok/s */
    bench_spread parallel_greedy_tps;  /* parallel_tps with the tokens chosen on the device */
    bool parallel_profiled;
    qvl_op_profile prof_parallel; /* one more batched step, profiled */
    double prof_parallel_wall;

    char placement[256];     /* qvl_model_placement */
    size_t n_mem;            /* memory per backend after the runs */
    qvl_model_backend_memory mem[4];
} bench_results;

/* r->weights_mix from r->load's matrix counts. */
void bench_describe_weights(bench_results *r);

void bench_print_text(FILE *f, const bench_results *r);
void bench_print_json(FILE *f, const bench_results *r);

#endif
