/* qvl run's and qvl chat's structured output: --json (any JSON value), --json-schema FILE and
 * --grammar FILE (GBNF; llama.cpp's --grammar-file too) become the engine job's grammar
 * (qvl_engine_request.grammar). The grammar is read and checked before the model loads, so a
 * bad one costs one line and no loading. */
#ifndef QVL_TOOLS_RUN_GRAMMAR_H
#define QVL_TOOLS_RUN_GRAMMAR_H

#include "qvl/status.h"
#include "run_args.h"

/* At most one of the three flags. 0 or the exit status (2). */
int run_grammar_check_usage(const char *prog, const run_args *a);

/* The GBNF text the flags name (*gbnf malloc'd; NULL when none), checked by compiling it
 * once, which each answer's job then does again in the engine. */
qvl_status run_grammar_text(const run_args *a, char **gbnf, qvl_error *err);

#endif
