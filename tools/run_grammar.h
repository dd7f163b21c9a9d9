/* qvl run's and qvl chat's structured output: --json (any JSON value), --json-schema FILE and
 * --grammar FILE
 * (GBNF; llama.cpp's --grammar-file too) become a grammar constraint on the sampler
 * (qvl/grammar_sampler.h). The grammar is read and checked before the model loads, so a bad
 * one costs one line and no loading. */
#ifndef QVL_TOOLS_RUN_GRAMMAR_H
#define QVL_TOOLS_RUN_GRAMMAR_H

#include <stdint.h>

#include "qvl/gen_config.h"
#include "qvl/grammar_sampler.h"
#include "qvl/tokenizer.h"
#include "run_args.h"

typedef struct run_grammar {
    qvl_grammar *grammar;        /* NULL when no flag asked for one */
    qvl_grammar_vocab *vocab;
    qvl_grammar_sampler *sampler;
} run_grammar;

/* At most one of the three flags. 0 or the exit status (2). */
int run_grammar_check_usage(const char *prog, const run_args *a);

/* qvl chat's form: the GBNF text the flags name (*gbnf malloc'd; NULL when none), checked by
 * compiling it once, which each answer's job then does again in the engine. */
qvl_status run_grammar_text(const run_args *a, char **gbnf, qvl_error *err);

/* Reads and compiles the grammar the flags name (nothing when none). */
qvl_status run_grammar_load(const run_args *a, run_grammar *rg, qvl_error *err);

/* The constraint over the tokenizer's vocabulary; its end tokens are the configuration's stop
 * ids. Nothing when no grammar was loaded; an error without a tokenizer. */
qvl_status run_grammar_bind(run_grammar *rg, const qvl_tokenizer *tok, const qvl_gen_config *gen,
                            int32_t n_vocab, qvl_error *err);

void run_grammar_free(run_grammar *rg);

#endif
