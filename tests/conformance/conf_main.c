/* qvl-backend-ops: every op and fused op of ops.def, on a backend named on the command line,
 * against an oracle (normally the reference).
 *
 *   qvl-backend-ops [--op NAME] [--seed S] [--case I] [--verbose] [--unavailable-exit N]
 *                   ORACLE.so BACKEND.so
 *
 * Each op runs its budget of cases (conf_gen_*.c: fixed edge shapes first, then random ones
 * drawn from the seed; case i of an op is the same for a seed whatever else runs, so
 * --op/--case reproduce one). One line per op: "matmul: 212 passed, 3 unsupported". A case
 * the backend does not support (its supports() says no) is counted and, with --verbose,
 * listed with the reason; a case the ORACLE does not support, or that breaks the op contract,
 * is a bug in the case and fails. Exit status: 0 when everything ran agrees, 1 on any
 * mismatch or failure, 2 on bad usage or an oracle that does not load, and N (default 0)
 * when the backend under test does not initialise here (no GPU): one line says why. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf.h"

/* Cases per op. Edge cases come first within the budget (their count is in each generator),
 * so every budget is at least the number of edge cases. The budgets keep a release run near
 * 10 s per backend on two cores and an ASan/UBSan run under a minute. */
static const conf_op_cases op_cases[] = {
    {QVL_OP_GET_ROWS, conf_gen_get_rows, 126},
    {QVL_OP_MATMUL, conf_gen_matmul, 422},
    {QVL_OP_ADD, conf_gen_add, 160},
    {QVL_OP_MUL, conf_gen_mul, 160},
    {QVL_OP_SCALE, conf_gen_scale, 80},
    {QVL_OP_RMS_NORM, conf_gen_rms_norm, 120},
    {QVL_OP_LAYER_NORM, conf_gen_layer_norm, 120},
    {QVL_OP_ROPE, conf_gen_rope, 180},
    {QVL_OP_SOFTMAX, conf_gen_softmax, 120},
    {QVL_OP_SILU, conf_gen_silu, 80},
    {QVL_OP_GELU_TANH, conf_gen_gelu_tanh, 80},
    {QVL_OP_GELU_ERF, conf_gen_gelu_erf, 80},
    {QVL_OP_MASK_CAUSAL, conf_gen_mask_causal, 80},
    {QVL_OP_MASK_SEGMENTS, conf_gen_mask_segments, 80},
    {QVL_OP_CONT, conf_gen_cont, 100},
    {QVL_OP_STORE_ROWS, conf_gen_store_rows, 100},
    {QVL_OP_NORM_LINEAR, conf_gen_norm_linear, 292},
    {QVL_OP_ATTENTION, conf_gen_attention, 300},
    {QVL_OP_MLP_RESIDUAL, conf_gen_mlp_residual, 212},
    {QVL_OP_SET_ROWS, conf_gen_set_rows, 80},
    {QVL_OP_ADD_ROWS, conf_gen_add_rows, 80},
    {QVL_OP_STORE_ROWS_AT, conf_gen_store_rows_at, 100},
    {QVL_OP_MASK_CAUSAL_AT, conf_gen_mask_causal_at, 80},
    {QVL_OP_NORM_ROPE, conf_gen_norm_rope, 180},
    {QVL_OP_STORE_SLOT_ROWS, conf_gen_store_slot_rows, 100},
    {QVL_OP_ATTENTION_SLOTS, conf_gen_attention_slots, 120},
    {QVL_OP_ARGMAX, conf_gen_argmax, 60},
};
#define N_OP_CASES ((int)(sizeof op_cases / sizeof op_cases[0]))

typedef struct options {
    const char *oracle, *backend;
    qvl_op only; /* QVL_OP_COUNT: every op */
    uint64_t seed;
    int case_index; /* -1: every case */
    bool verbose;
    int unavailable_exit;
} options;

static const char usage_text[] =
    "usage: qvl-backend-ops [--op NAME] [--seed S] [--case I] [--verbose]\n"
    "                       [--unavailable-exit N] ORACLE.so BACKEND.so\n";

static int usage(const char *why) {
    fprintf(stderr, "qvl-backend-ops: %s\n%s", why, usage_text);
    return 2;
}

/* parse()'s result for --help: the usage went to stdout, and the program exits 0. */
#define PARSE_HELP (-1)

static int parse(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->only = QVL_OP_COUNT;
    o->seed = 1;
    o->case_index = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return PARSE_HELP;
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            o->verbose = true;
        } else if (strcmp(a, "--op") == 0 && has_value) {
            if (!qvl_op_parse(argv[++i], &o->only)) return usage("unknown op");
        } else if (strcmp(a, "--seed") == 0 && has_value) {
            o->seed = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(a, "--case") == 0 && has_value) {
            o->case_index = atoi(argv[++i]);
        } else if (strcmp(a, "--unavailable-exit") == 0 && has_value) {
            o->unavailable_exit = atoi(argv[++i]);
        } else if (a[0] == '-') {
            return usage("unknown option or missing value");
        } else if (!o->oracle) {
            o->oracle = a;
        } else if (!o->backend) {
            o->backend = a;
        } else {
            return usage("one oracle and one backend");
        }
    }
    if (!o->backend) return usage("an oracle and a backend are needed");
    return 0;
}

/* Case i of op oc on both backends; adds the result to t. */
static void run_case(const conf_op_cases *oc, int i, const options *o,
                     const qvl_test_backend *oracle, const qvl_test_backend *tb, conf_tally *t) {
    conf_rng r;
    conf_rng_seed(&r, o->seed * 1000003u + (uint64_t)oc->op * 10007u + (uint64_t)i);
    conf_case c;
    conf_case_init(&c, oc->op, &r);
    conf_describe(&c, " #%d", i);
    oc->gen(&c, i);
    qvl_error err = {0};
    unsigned char *want = NULL, *got = NULL;
    qvl_status ks;
    char msg[512];
    double closeness = 0;
    if (!conf_contract_ok(&c, &err)) {
        printf("FAIL %s: the case breaks the op contract: %s\n", c.what, err.msg);
        t->failed++;
    } else if (conf_run(oracle, &c, &want, &ks, &err) != CONF_RAN) {
        printf("FAIL %s: the oracle does not run it: %s\n", c.what, err.msg);
        t->failed++;
    } else {
        conf_outcome out = conf_run(tb, &c, &got, &ks, &err);
        if (out == CONF_UNSUPPORTED) {
            if (o->verbose) printf("unsupported %s: %s\n", c.what, err.msg);
            t->unsupported++;
        } else if (out == CONF_FAILED) {
            printf("FAIL %s: %s\n", c.what, err.msg);
            t->failed++;
        } else if (!conf_compare(&c, want, got, msg, sizeof msg, &closeness)) {
            printf("FAIL %s: %s (tolerance %s)\n", c.what, msg, conf_tolerance_text(c.op));
            t->failed++;
        } else {
            if (o->verbose) printf("ok %s (%.3g of the tolerance)\n", c.what, closeness);
            t->passed++;
            if (closeness > t->closeness) t->closeness = closeness;
        }
    }
    free(want);
    free(got);
    conf_case_free(&c);
}

int main(int argc, char **argv) {
    options o;
    int rc = parse(argc, argv, &o);
    if (rc == PARSE_HELP) return 0;
    if (rc) return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    qvl_test_backend oracle, tb;
    if (qvl_test_backend_open(o.oracle, NULL, &oracle) != 0) {
        fprintf(stderr, "qvl-backend-ops: the oracle %s does not load\n", o.oracle);
        return 2;
    }
    if (qvl_test_backend_open(o.backend, NULL, &tb) != 0) {
        printf("qvl-backend-ops: skipped: %s does not initialise here (the line above says why)\n",
               o.backend);
        qvl_test_backend_close(&oracle);
        return o.unavailable_exit;
    }
    printf("qvl-backend-ops: %s against the oracle %s, seed %llu\n", tb.iface->name,
           oracle.iface->name, (unsigned long long)o.seed);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    conf_tally tally[QVL_OP_COUNT];
    memset(tally, 0, sizeof tally);
    for (int k = 0; k < N_OP_CASES; k++) {
        const conf_op_cases *oc = &op_cases[k];
        if (o.only != QVL_OP_COUNT && oc->op != o.only) continue;
        for (int i = 0; i < oc->n_cases; i++)
            if (o.case_index < 0 || o.case_index == i) run_case(oc, i, &o, &oracle, &tb, &tally[oc->op]);
    }
    if (o.case_index < 0) conf_check_errors(&oracle, &tb, o.only, o.verbose, tally);

    int failed = 0;
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        const conf_tally *t = &tally[op];
        if (qvl_op_is_view((qvl_op)op)) {
            if (o.only == QVL_OP_COUNT) printf("%s: no kernel (an alias), not run\n", qvl_op_name((qvl_op)op));
            continue;
        }
        if (t->passed + t->failed + t->unsupported == 0) continue;
        printf("%s: %d passed", qvl_op_name((qvl_op)op), t->passed);
        if (t->unsupported) printf(", %d unsupported", t->unsupported);
        if (t->failed) printf(", %d FAILED", t->failed);
        if (o.verbose) printf(" (closest: %.3g of the tolerance %s)", t->closeness,
                              conf_tolerance_text((qvl_op)op));
        printf("\n");
        failed += t->failed;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("qvl-backend-ops: %s: %s in %.1f s\n", tb.iface->name,
           failed ? "MISMATCHES" : "all agree", secs);
    qvl_test_backend_close(&tb);
    qvl_test_backend_close(&oracle);
    return failed ? 1 : 0;
}
