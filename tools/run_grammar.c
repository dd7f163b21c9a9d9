/* qvl run --json / --json-schema / --grammar (run_grammar.h). */
#include "run_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/file.h"

int run_grammar_check_usage(const char *prog, const run_args *a, bool chat_mode) {
    int n = (a->json ? 1 : 0) + (a->json_schema ? 1 : 0) + (a->grammar ? 1 : 0);
    if (n > 1) {
        fprintf(stderr, "%s: --json, --json-schema and --grammar exclude each other\n", prog);
        return 2;
    }
    if (n == 1 && chat_mode) {
        fprintf(stderr, "%s: --json, --json-schema and --grammar go with qvl run -p/-f/--ids, not "
                "a chat\n", prog);
        return 2;
    }
    return 0;
}

qvl_status run_grammar_load(const run_args *a, run_grammar *rg, qvl_error *err) {
    memset(rg, 0, sizeof *rg);
    if (a->json) return qvl_grammar_parse(qvl_grammar_json_gbnf(), strlen(qvl_grammar_json_gbnf()),
                                          &rg->grammar, err);
    const char *path = a->json_schema ? a->json_schema : a->grammar;
    if (!path) return QVL_OK;
    char *text = NULL, *gbnf = NULL;
    size_t len = 0;
    qvl_status st = qvl_read_file(path, QVL_GRAMMAR_MAX_TEXT, QVL_E_IO, &text, &len, err);
    if (st == QVL_OK && a->json_schema) {
        st = qvl_grammar_from_json_schema(text, len, &gbnf, err);
        if (st == QVL_OK) st = qvl_grammar_parse(gbnf, strlen(gbnf), &rg->grammar, err);
    } else if (st == QVL_OK) {
        st = qvl_grammar_parse(text, len, &rg->grammar, err);
    }
    free(text);
    free(gbnf);
    if (st != QVL_OK && err->msg[0] && strncmp(err->msg, path, strlen(path)) != 0)
        qvl_error_prefix(err, "%s", path);
    return st;
}

qvl_status run_grammar_bind(run_grammar *rg, const qvl_tokenizer *tok, const qvl_gen_config *gen,
                            int32_t n_vocab, qvl_error *err) {
    if (!rg->grammar) return QVL_OK;
    if (!tok)
        return qvl_fail(err, QVL_E_NOT_FOUND, "--json, --json-schema and --grammar need the "
                        "model's tokenizer.json");
    qvl_status st = qvl_grammar_vocab_from_tokenizer(tok, &rg->vocab, err);
    if (st == QVL_OK)
        st = qvl_grammar_sampler_create(rg->grammar, rg->vocab, gen->eos_token_ids,
                                        (size_t)(gen->n_eos > 0 ? gen->n_eos : 0), n_vocab,
                                        &rg->sampler, err);
    return st;
}

void run_grammar_free(run_grammar *rg) {
    qvl_grammar_sampler_free(rg->sampler);
    qvl_grammar_vocab_free(rg->vocab);
    qvl_grammar_free(rg->grammar);
    memset(rg, 0, sizeof *rg);
}
