/* qvl-grammar: the grammar library from the command line (a developer tool, not installed).
 *
 *   qvl-grammar gbnf (--json | --json-schema FILE | --grammar FILE)
 *       print the GBNF text (a schema compiled; a grammar file checked and echoed)
 *   qvl-grammar gen  (--json | --json-schema FILE | --grammar FILE) N SEED [SOFT_MAX]
 *       N random strings of the language, each followed by a NUL byte; every one is also fed
 *       to the matcher, and a string it refuses is an error (the two must agree)
 *   qvl-grammar match (--json | --json-schema FILE | --grammar FILE) [--prefix] < TEXT
 *       exit 0 when stdin is a complete string of the language (with --prefix: the start of
 *       one), 1 when not
 *   qvl-grammar bench (--json | --json-schema FILE | --grammar FILE) TOKENIZER_JSON
 *                     (N SEED [SOFT_MAX] | --text FILE)
 *       the cost of the allowed-token mask over a real vocabulary: follow N random strings of
 *       about SOFT_MAX bytes (default 64), or the text in FILE (an answer as a model writes it),
 *       token by token (greedy longest-token split of each allowed set) and time one mask
 *       per token, as the engine applies it (qvl_grammar_sampler: its cache of sets included),
 *       and the mean of the masks the cache did not hold */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl/file.h"
#include "qvl/grammar.h"
#include "qvl/grammar_sampler.h"
#include "qvl/tokenizer.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int usage(void) {
    fprintf(stderr, "usage: qvl-grammar gbnf|gen|match|bench (--json | --json-schema FILE | "
                    "--grammar FILE) [args]\n");
    return 2;
}

/* argv[0..1] -> the grammar; returns how many arguments it took, 0 on error (printed). */
static int load(int argc, char **argv, qvl_grammar **g, char **text) {
    qvl_error err = {0};
    char *buf = NULL;
    size_t len = 0;
    int used = 0;
    qvl_status st = QVL_OK;
    if (argc >= 1 && strcmp(argv[0], "--json") == 0) {
        buf = strdup(qvl_grammar_json_gbnf());
        len = buf ? strlen(buf) : 0;
        used = 1;
    } else if (argc >= 2 && (strcmp(argv[0], "--json-schema") == 0 || strcmp(argv[0], "--grammar") == 0)) {
        char *file = NULL;
        size_t flen = 0;
        st = qvl_read_file(argv[1], QVL_GRAMMAR_MAX_TEXT, QVL_E_IO, &file, &flen, &err);
        if (st == QVL_OK && argv[0][2] == 'j') {
            st = qvl_grammar_from_json_schema(file, flen, &buf, &err);
            free(file);
            len = buf ? strlen(buf) : 0;
        } else if (st == QVL_OK) {
            buf = file;
            len = flen;
        }
        used = 2;
    } else {
        return 0;
    }
    if (st == QVL_OK && !buf) st = qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) st = qvl_grammar_parse(buf, len, g, &err);
    if (st != QVL_OK) {
        fprintf(stderr, "qvl-grammar: %s\n", err.msg);
        free(buf);
        return -1;
    }
    *text = buf;
    return used;
}

static int cmd_gen(qvl_grammar *g, int argc, char **argv) {
    if (argc < 2) return usage();
    long n = strtol(argv[0], NULL, 10);
    unsigned long long seed = strtoull(argv[1], NULL, 10);
    size_t soft = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 64;
    qvl_grammar_matcher *m = NULL;
    qvl_error err = {0};
    if (qvl_grammar_matcher_create(g, &m, &err) != QVL_OK) {
        fprintf(stderr, "qvl-grammar: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    for (long i = 0; i < n && rc == 0; i++) {
        char *s;
        size_t len;
        bool ok = false;
        qvl_status st = qvl_grammar_generate(g, seed * 1000003ull + (unsigned long long)i, soft, &s, &len, &err);
        if (st == QVL_OK) st = qvl_grammar_matcher_reset(m, &err);
        if (st == QVL_OK) st = qvl_grammar_matcher_feed(m, s, len, &ok, &err);
        if (st != QVL_OK) {
            fprintf(stderr, "qvl-grammar: %s\n", err.msg);
            rc = 1;
        } else if (!ok || !qvl_grammar_matcher_accepting(m)) {
            fprintf(stderr, "qvl-grammar: the matcher refuses generated string %ld: %s\n", i, s);
            rc = 1;
        } else {
            fwrite(s, 1, len + 1, stdout); /* with its NUL */
        }
        if (st == QVL_OK) free(s);
    }
    qvl_grammar_matcher_free(m);
    return rc;
}

static int cmd_match(qvl_grammar *g, bool prefix) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    qvl_grammar_matcher *m = NULL;
    qvl_error err = {0};
    bool ok = false;
    qvl_status st = buf ? qvl_grammar_matcher_create(g, &m, &err) : qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) st = qvl_grammar_matcher_feed(m, buf, n, &ok, &err);
    free(buf);
    bool accepting = m && qvl_grammar_matcher_accepting(m);
    qvl_grammar_matcher_free(m);
    if (st != QVL_OK) {
        fprintf(stderr, "qvl-grammar: %s\n", err.msg);
        return 2;
    }
    return ok && (accepting || prefix) ? 0 : 1;
}

typedef struct bench_stats {
    double total, worst, miss_total; /* miss: a set the state cache did not hold */
    long masks, misses;
    size_t allowed_sum;
} bench_stats;

/* Follows text s token by token as the engine would: apply the mask to a row of zero logits
 * (timed), take the longest allowed token that spells the next bytes, accept it. */
static qvl_status bench_follow(qvl_grammar_sampler *gs, const qvl_grammar_vocab *v,
                               int32_t n_vocab, float *logits, const char *s, size_t len,
                               bench_stats *b, qvl_error *err) {
    qvl_status st = qvl_grammar_sampler_reset(gs, err);
    size_t at = 0;
    while (st == QVL_OK && at < len) {
        memset(logits, 0, (size_t)n_vocab * sizeof *logits);
        const int64_t hits = qvl_grammar_sampler_cache_hits(gs);
        double t = now_seconds();
        st = qvl_grammar_sampler_apply(gs, logits, (size_t)n_vocab, err);
        t = now_seconds() - t;
        if (st == QVL_E_INVALID) st = QVL_OK; /* no whole token fits here: a byte is fed */
        if (st != QVL_OK) break;
        b->total += t;
        if (qvl_grammar_sampler_cache_hits(gs) == hits) {
            b->miss_total += t;
            b->misses++;
        }
        if (t > b->worst) b->worst = t;
        b->masks++;
        size_t best = 0;
        int32_t best_id = -1;
        for (int32_t id = 0; id < n_vocab; id++) {
            const uint8_t *p;
            size_t pl;
            if (logits[id] != 0.0f) continue;
            b->allowed_sum++;
            if (qvl_grammar_vocab_piece(v, id, &p, &pl) && pl > best && pl <= len - at &&
                memcmp(p, s + at, pl) == 0) {
                best = pl;
                best_id = id;
            }
        }
        if (best_id >= 0) {
            st = qvl_grammar_sampler_accept(gs, best_id, err);
        } else { /* a byte no token covers alone: feed it as is */
            best = 1;
            st = qvl_grammar_sampler_feed(gs, s + at, 1, err);
        }
        at += best;
    }
    return st;
}

/* argv: TOKENIZER_JSON (N SEED [SOFT_MAX] | --text FILE) */
static int cmd_bench(qvl_grammar *g, int argc, char **argv) {
    if (argc < 3) return usage();
    const bool follow_file = strcmp(argv[1], "--text") == 0;
    qvl_error err = {0};
    qvl_tokenizer *tok = NULL;
    qvl_grammar_vocab *v = NULL;
    qvl_grammar_sampler *gs = NULL;
    double t0 = now_seconds();
    qvl_status st = qvl_tokenizer_load(argv[0], &tok, &err);
    if (st == QVL_OK) st = qvl_grammar_vocab_from_tokenizer(tok, &v, &err);
    double t_trie = now_seconds() - t0;
    int32_t n_vocab = tok ? qvl_tokenizer_vocab_size(tok) : 0;
    /* the engine's path: one constraint per sequence, its cache of sets by state included */
    if (st == QVL_OK) st = qvl_grammar_sampler_create(g, v, NULL, 0, n_vocab, &gs, &err);
    float *logits = malloc(((size_t)n_vocab + 1) * sizeof *logits);
    if (st == QVL_OK && !logits) st = qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    bench_stats b = {0};
    if (st == QVL_OK && follow_file) {
        char *text = NULL;
        size_t len = 0;
        st = qvl_read_file(argv[2], 1 << 24, QVL_E_IO, &text, &len, &err);
        if (st == QVL_OK) st = bench_follow(gs, v, n_vocab, logits, text, len, &b, &err);
        free(text);
    }
    long n = follow_file ? 0 : strtol(argv[1], NULL, 10);
    unsigned long long seed = strtoull(argv[2], NULL, 10);
    size_t soft_max = argc > 3 ? (size_t)strtoull(argv[3], NULL, 10) : 64; /* bytes aimed at */
    for (long i = 0; st == QVL_OK && i < n; i++) {
        char *s;
        size_t len;
        st = qvl_grammar_generate(g, seed + (unsigned long long)i, soft_max, &s, &len, &err);
        if (st == QVL_OK) st = bench_follow(gs, v, n_vocab, logits, s, len, &b, &err);
        if (st == QVL_OK) free(s);
    }
    if (st == QVL_OK)
        printf("trie: %zu nodes, built in %.1f ms; masks: %ld, mean %.3f ms, worst %.3f ms, "
               "mean miss %.3f ms, mean allowed %.0f tokens, sets from the state cache %.1f%%\n",
               qvl_grammar_vocab_n_nodes(v), t_trie * 1e3, b.masks,
               b.masks ? b.total / (double)b.masks * 1e3 : 0.0, b.worst * 1e3,
               b.misses ? b.miss_total / (double)b.misses * 1e3 : 0.0,
               b.masks ? (double)b.allowed_sum / (double)b.masks : 0.0,
               b.masks ? 100.0 * (double)qvl_grammar_sampler_cache_hits(gs) / (double)b.masks
                       : 0.0);
    else
        fprintf(stderr, "qvl-grammar: %s\n", err.msg);
    free(logits);
    qvl_grammar_sampler_free(gs);
    qvl_grammar_vocab_free(v);
    qvl_tokenizer_free(tok);
    return st == QVL_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *cmd = argv[1];
    qvl_grammar *g = NULL;
    char *text = NULL;
    int used = load(argc - 2, argv + 2, &g, &text);
    if (used == 0) return usage();
    if (used < 0) return 1;
    int rest = argc - 2 - used;
    char **args = argv + 2 + used;
    int rc;
    if (strcmp(cmd, "gbnf") == 0) {
        fputs(text, stdout);
        rc = 0;
    } else if (strcmp(cmd, "gen") == 0) {
        rc = cmd_gen(g, rest, args);
    } else if (strcmp(cmd, "match") == 0) {
        rc = cmd_match(g, rest > 0 && strcmp(args[0], "--prefix") == 0);
    } else if (strcmp(cmd, "bench") == 0) {
        rc = cmd_bench(g, rest, args);
    } else {
        rc = usage();
    }
    free(text);
    qvl_grammar_free(g);
    return rc;
}
