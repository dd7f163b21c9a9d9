/* qvl run --json / --json-schema / --grammar (run_grammar.h). */
#define _POSIX_C_SOURCE 200809L
#include "run_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/file.h"
#include "qvl/grammar.h"

int run_grammar_check_usage(const char *prog, const run_args *a) {
    int n = (a->json ? 1 : 0) + (a->json_schema ? 1 : 0) + (a->grammar ? 1 : 0);
    if (n > 1) {
        fprintf(stderr, "%s: --json, --json-schema and --grammar exclude each other\n", prog);
        return 2;
    }
    return 0;
}

/* The flags' grammar as GBNF text (NULL: no flag), checked by compiling it once. */
qvl_status run_grammar_text(const run_args *a, char **gbnf, qvl_error *err) {
    *gbnf = NULL;
    const char *path = a->json_schema ? a->json_schema : a->grammar;
    if (!a->json && !path) return QVL_OK;
    char *text = NULL;
    size_t len = 0;
    qvl_status st = QVL_OK;
    if (a->json) {
        text = strdup(qvl_grammar_json_gbnf());
        if (!text) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        else len = strlen(text);
    } else {
        st = qvl_read_file(path, QVL_GRAMMAR_MAX_TEXT, QVL_E_IO, &text, &len, err);
    }
    if (st == QVL_OK && a->json_schema) {
        char *from = text;
        st = qvl_grammar_from_json_schema(from, len, &text, err);
        free(from);
        if (st != QVL_OK) text = NULL;
        else len = strlen(text);
    }
    qvl_grammar *parsed = NULL;
    if (st == QVL_OK) st = qvl_grammar_parse(text, len, &parsed, err);
    qvl_grammar_free(parsed);
    if (st != QVL_OK) {
        free(text);
        if (path && err->msg[0] && strncmp(err->msg, path, strlen(path)) != 0)
            qvl_error_prefix(err, "%s", path);
        return st;
    }
    *gbnf = text;
    return QVL_OK;
}
