/* The GBNF parser (errors with line:col and the checks), the matcher (strings accepted and
 * refused, UTF-8 byte by byte, the stack cap), the token mask (against feeding each token by
 * hand) and the grammar constraint on logits (qvl/grammar.h, qvl/grammar_sampler.h). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/grammar.h"
#include "qvl/grammar_sampler.h"

static qvl_grammar *parse_ok(const char *text) {
    qvl_grammar *g = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_grammar_parse(text, strlen(text), &g, &err);
    if (st != QVL_OK) fail_msg("grammar refused: %s\n%s", err.msg, text);
    return g;
}

/* A JSON Schema compiled and parsed. */
static qvl_grammar *schema_ok(const char *schema) {
    char *gbnf = NULL;
    qvl_error err = {0};
    if (qvl_grammar_from_json_schema(schema, strlen(schema), &gbnf, &err) != QVL_OK)
        fail_msg("schema refused: %s\n%s", err.msg, schema);
    qvl_grammar *g = parse_ok(gbnf);
    free(gbnf);
    return g;
}

/* Strings bounded by maxLength (1, 3, 64, 5) and minLength (2), with keys the small
 * vocabularies below can spell: every counted character a state of its own. */
static const char bounded_schema[] =
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"maxLength\": 1}, "
    "\"e\": {\"type\": \"string\", \"maxLength\": 3}, "
    "\"l\": {\"type\": \"string\", \"minLength\": 2, \"maxLength\": 64}, "
    "\"x\": {\"type\": \"string\", \"maxLength\": 5}}, "
    "\"required\": [\"a\", \"e\", \"l\", \"x\"], \"additionalProperties\": false}";

/* The grammar must be refused with a message containing want. */
static void parse_bad(const char *text, const char *want) {
    qvl_grammar *g = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_grammar_parse(text, strlen(text), &g, &err);
    if (st == QVL_OK) fail_msg("grammar accepted, wanted '%s':\n%s", want, text);
    assert_null(g);
    if (!strstr(err.msg, want)) fail_msg("message '%s' lacks '%s'", err.msg, want);
    assert_null(strchr(err.msg, '\n'));
}

/* 1: the whole string is accepted and complete, 0: refused or incomplete. */
static int matches(const qvl_grammar *g, const char *s, size_t n) {
    qvl_grammar_matcher *m = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    bool ok = false;
    assert_int_equal(qvl_grammar_matcher_feed(m, s, n, &ok, &err), QVL_OK);
    int r = ok && qvl_grammar_matcher_accepting(m);
    qvl_grammar_matcher_free(m);
    return r;
}

#define ACCEPTS(g, s) assert_true(matches(g, s, strlen(s)))
#define REFUSES(g, s) assert_false(matches(g, s, strlen(s)))

static void test_parse_errors(void **state) {
    (void)state;
    parse_bad("root ::= \"abc", "grammar:1:10: unterminated string literal");
    parse_bad("root ::= \"a\"\n  | foo\n", "grammar:2:5: undefined rule 'foo'");
    parse_bad("rot ::= \"a\"", "no rule named 'root'");
    parse_bad("root ::= [a-", "grammar:1:10:");
    parse_bad("root ::= \"a\" root", "root has no finite derivation");
    parse_bad("root ::= x | \"b\"\nx ::= \"a\" x", "rule 'x' has no finite derivation");
    parse_bad("root ::= root \"a\" | \"b\"", "left recursion");
    parse_bad("root ::= (\"a\"?)* \"b\"", "left recursion");
    parse_bad("root ::= e\ne ::= n? e \"+\" | \"1\"\nn ::= \"-\"", "rule 'e' can reach itself");
    parse_bad("root ::= \"a\"{3,1}", "grammar:1:13: repetition maximum below its minimum");
    parse_bad("root ::= \"\\q\"", "grammar:1:11: unknown escape \\q");
    parse_bad("root ::= \"a\"\nroot ::= \"b\"", "grammar:2:1: rule 'root' defined twice");
    parse_bad("root \"a\"", "grammar:1:6: expected '::='");
    parse_bad("root ::= (\"a\" | \"b\"", "grammar:1:10: unclosed '('");
    parse_bad("root ::= \"a\" )", "grammar:1:14: unexpected ')'");
    parse_bad("root ::= [^\\x00-\\U0010FFFF]", "matches nothing");
    parse_bad("root ::= \"\\uD800\"", "no Unicode scalar value");
    parse_bad("root ::= [z-a]", "range end before its start");
    parse_bad("root ::= \"a\"**", "cannot follow another");
    parse_bad("root ::= \"a\"{100001}", "over the limit");
    parse_bad("# only a comment\n", "no rule named 'root'");
}

static const char arith[] =
    "# arithmetic, written for this test\n"
    "root   ::= sum\n"
    "sum    ::= prod ( [+-] prod )*\n"
    "prod   ::= atom ( ( \"*\" | \"/\" ) atom )*\n"
    "atom   ::= number | \"(\" sum \")\" | \"-\" atom\n"
    "number ::= [0-9]+ ( \".\" [0-9]+ )?\n";

static void test_arithmetic(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok(arith);
    ACCEPTS(g, "1+2*(3-4)");
    ACCEPTS(g, "42");
    ACCEPTS(g, "-(-1.5)/2");
    REFUSES(g, "1+");
    REFUSES(g, "(1");
    REFUSES(g, "1++2");
    REFUSES(g, "a");
    REFUSES(g, "");
    REFUSES(g, "1.");
    qvl_grammar_free(g);
}

static void test_lists_and_nesting(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok("root ::= \"[\" ( item ( \",\" item )* )? \"]\"\n"
                              "item ::= [a-z]+ | root\n");
    ACCEPTS(g, "[]");
    ACCEPTS(g, "[a,bc]");
    ACCEPTS(g, "[a,[b,[]],c]");
    REFUSES(g, "[a,]");
    REFUSES(g, "[,]");
    REFUSES(g, "[a");
    REFUSES(g, "[[a]");
    qvl_grammar_free(g);

    g = parse_ok("root ::= pair*\npair ::= \"(\" root \")\"\n");
    ACCEPTS(g, "");
    ACCEPTS(g, "(()())");
    REFUSES(g, "(()");
    REFUSES(g, "())");
    qvl_grammar_free(g);

    /* a rule body spanning lines, with a leading-| continuation and comments */
    g = parse_ok("root ::= \"x\" # first\n"
                 "       | \"y\" (\n"
                 "    \"1\" | \"2\"   # inside the group\n"
                 "  )\n"
                 "other ::= \"z\"\n");
    ACCEPTS(g, "x");
    ACCEPTS(g, "y2");
    REFUSES(g, "y");
    REFUSES(g, "z");
    qvl_grammar_free(g);
}

static void test_repetition(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok("root ::= [ab]{2,3} \"c\"{,2} \"d\"{2} \"e\"{1,}\n");
    ACCEPTS(g, "abdde");
    ACCEPTS(g, "abaccddeee");
    REFUSES(g, "adde");
    REFUSES(g, "ababdde");
    REFUSES(g, "abcccdde");
    REFUSES(g, "abddd");
    REFUSES(g, "abdd");
    qvl_grammar_free(g);
    g = parse_ok("root ::= \"ab\"+ \"c\"?\n");
    ACCEPTS(g, "abab");
    ACCEPTS(g, "abc");
    REFUSES(g, "aba");
    REFUSES(g, "c");
    qvl_grammar_free(g);
}

static void test_utf8(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok("root ::= [α-ω]+ \"€\" | [^a-z] \"!\" | \"\\x41\\u00e9\\n\\t\\\"\\\\\" | \".\" .\n");
    ACCEPTS(g, "αβ€");
    REFUSES(g, "a€");
    ACCEPTS(g, "é!");
    ACCEPTS(g, "😀!");
    REFUSES(g, "b!");
    ACCEPTS(g, "Aé\n\t\"\\");
    ACCEPTS(g, ".\xF0\x9F\x98\x80");
    REFUSES(g, ".\xC0\x80");         /* overlong */
    REFUSES(g, ".\xED\xA0\x80");     /* a surrogate */
    REFUSES(g, ".\xF4\x90\x80\x80"); /* past U+10FFFF */
    REFUSES(g, ".\x80");

    /* byte by byte: a partial character is neither refused nor complete */
    qvl_grammar_matcher *m = NULL;
    qvl_error err = {0};
    bool ok;
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    assert_int_equal(qvl_grammar_matcher_feed(m, "\xCE", 1, &ok, &err), QVL_OK); /* α's lead */
    assert_true(ok);
    assert_int_equal(qvl_grammar_matcher_feed(m, "\xB1\xE2\x82", 3, &ok, &err), QVL_OK);
    assert_true(ok);
    assert_false(qvl_grammar_matcher_accepting(m));
    bool b;
    assert_int_equal(qvl_grammar_matcher_allows_byte(m, 0xAC, &b, &err), QVL_OK);
    assert_true(b);
    assert_int_equal(qvl_grammar_matcher_allows_byte(m, 0xAD, &b, &err), QVL_OK);
    assert_false(b);
    assert_int_equal(qvl_grammar_matcher_feed(m, "\xAC", 1, &ok, &err), QVL_OK);
    assert_true(ok && qvl_grammar_matcher_accepting(m) && qvl_grammar_matcher_done(m));
    /* a refused byte leaves the state as it was */
    assert_int_equal(qvl_grammar_matcher_reset(m, &err), QVL_OK);
    assert_int_equal(qvl_grammar_matcher_feed(m, "\xCE\xB1", 2, &ok, &err), QVL_OK);
    assert_int_equal(qvl_grammar_matcher_feed(m, "x", 1, &ok, &err), QVL_OK);
    assert_false(ok);
    assert_int_equal(qvl_grammar_matcher_feed(m, "\xE2\x82\xAC", 3, &ok, &err), QVL_OK);
    assert_true(ok && qvl_grammar_matcher_accepting(m));
    qvl_grammar_matcher_free(m);
    qvl_grammar_free(g);
}

static void test_done_and_accepting(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok("root ::= \"a\" \"b\"?\n");
    qvl_grammar_matcher *m = NULL;
    qvl_error err = {0};
    bool ok;
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    assert_false(qvl_grammar_matcher_accepting(m));
    assert_int_equal(qvl_grammar_matcher_feed(m, "a", 1, &ok, &err), QVL_OK);
    assert_true(qvl_grammar_matcher_accepting(m));
    assert_false(qvl_grammar_matcher_done(m));
    assert_int_equal(qvl_grammar_matcher_feed(m, "b", 1, &ok, &err), QVL_OK);
    assert_true(qvl_grammar_matcher_done(m));
    qvl_grammar_matcher_free(m);
    qvl_grammar_free(g);
}

static void test_stack_cap(void **state) {
    (void)state;
    /* every "x" doubles the distinct stacks (two different returns), so the cap is reached */
    qvl_grammar *g = parse_ok("root ::= a\na ::= \"x\" a \"y\" | \"x\" a \"z\" | \"\"\n");
    qvl_grammar_matcher *m = NULL;
    qvl_error err = {0};
    bool ok = true;
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    qvl_status st = QVL_OK;
    for (int i = 0; i < 20 && st == QVL_OK; i++) st = qvl_grammar_matcher_feed(m, "x", 1, &ok, &err);
    assert_int_equal(st, QVL_E_LIMIT);
    assert_non_null(strstr(err.msg, "parse stacks"));
    qvl_grammar_matcher_free(m);
    qvl_grammar_free(g);
    /* a long run of a right-recursive repetition keeps stacks flat: no cap, bounded memory */
    g = parse_ok("root ::= [a-z]*\n");
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    for (int i = 0; i < 100000; i++) {
        assert_int_equal(qvl_grammar_matcher_feed(m, "q", 1, &ok, &err), QVL_OK);
        assert_true(ok);
    }
    qvl_grammar_matcher_free(m);
    qvl_grammar_free(g);
}

/* A small vocabulary: pieces of JSON text, UTF-8 fragments, and a few that never fit. */
static const char *const pieces[] = {
    "{", "}", "[", "]", "\"", ",", ":", " ", "\n", "{\"", "\":", "\",", "a", "ab", "abc", "1", "12",
    "0", "-", ".", "e", "true", "false", "null", "tr", "ue", "\xC3", "\xA9", "\xC3\xA9", "é\"",
    "\\", "\\n", "\\u", "00", "e9", "x", "}]", "]}", "\t\t", "nul", "l", "\x01", "\xFF", "",
    "abcd", "abcdefghijklmnopqrst", "\xC3\xA9\xC3\xA9\xC3\xA9", "ab\xC3", "\\\"", "a\"", "ab\",",
    "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97\xE7\xAC\xA6\xE4\xB8\xB2\xE5\xBE\x88\xE9\x95\xBF",
};

/* One of the count allowed tokens, uniformly (a seeded LCG: the walks repeat run to run). */
static int32_t pick_allowed(uint64_t *rng, const uint8_t *allowed, int32_t n, size_t count) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    size_t pick = (size_t)(*rng >> 33) % count;
    for (int32_t i = 0; i < n; i++)
        if (allowed[i] && pick-- == 0) return i;
    return 0;
}

/* Random walks through g's language, one allowed token at a time; at every step each token's
 * mask bit must equal what feeding prefix + token to a fresh matcher says. */
static void walks_against_feeding(const qvl_grammar *g, uint64_t rng) {
    const int32_t n = (int32_t)(sizeof pieces / sizeof pieces[0]);
    size_t lens[64];
    for (int32_t i = 0; i < n; i++) lens[i] = strlen(pieces[i]);
    qvl_grammar_vocab *v = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_grammar_vocab_from_pieces(pieces, lens, n, &v, &err), QVL_OK);
    qvl_grammar_matcher *m = NULL, *probe = NULL;
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    assert_int_equal(qvl_grammar_matcher_create(g, &probe, &err), QVL_OK);
    uint8_t allowed[64 + 8];
    char prefix[4096];
    size_t plen = 0;
    int steps = 0, checks = 0;
    for (int walk = 0; walk < 30; walk++) {
        assert_int_equal(qvl_grammar_matcher_reset(m, &err), QVL_OK);
        plen = 0;
        for (int step = 0; step < 40; step++) {
            size_t count;
            assert_int_equal(qvl_grammar_matcher_allowed(m, v, allowed, (size_t)n + 8, &count, &err), QVL_OK);
            size_t seen = 0;
            for (int32_t i = 0; i < n + 8; i++) {
                bool want = false;
                if (i < n && lens[i] > 0) {
                    bool ok;
                    assert_int_equal(qvl_grammar_matcher_reset(probe, &err), QVL_OK);
                    assert_int_equal(qvl_grammar_matcher_feed(probe, prefix, plen, &ok, &err), QVL_OK);
                    assert_true(ok);
                    assert_int_equal(qvl_grammar_matcher_feed(probe, pieces[i], lens[i], &ok, &err), QVL_OK);
                    want = ok;
                }
                if ((allowed[i] != 0) != want)
                    fail_msg("after '%.*s': token %d '%s' mask %d, feeding says %d", (int)plen,
                             prefix, i, i < n ? pieces[i] : "", allowed[i], want);
                seen += allowed[i];
                checks++;
            }
            assert_int_equal(seen, count);
            if (count == 0) break;
            const int32_t id = pick_allowed(&rng, allowed, n, count);
            bool ok;
            assert_int_equal(qvl_grammar_matcher_feed(m, pieces[id], lens[id], &ok, &err), QVL_OK);
            assert_true(ok);
            if (plen + lens[id] >= sizeof prefix) break;
            memcpy(prefix + plen, pieces[id], lens[id]);
            plen += lens[id];
            steps++;
        }
    }
    assert_true(steps > 100 && checks > 1000);
    qvl_grammar_matcher_free(probe);
    qvl_grammar_matcher_free(m);
    qvl_grammar_vocab_free(v);
}

static void test_mask_against_feeding(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok(qvl_grammar_json_gbnf());
    walks_against_feeding(g, 12345);
    qvl_grammar_free(g);
    g = schema_ok(bounded_schema); /* strings of 1, 3, 2-64 and 5 characters */
    walks_against_feeding(g, 2024);
    walks_against_feeding(g, 99);
    qvl_grammar_free(g);
}

/* Inside strings the walk takes whole trie subtrees of plain text without matching their bytes
 * (grammar_vocab.c). Every token's bit must still equal feeding it: plain ASCII, complete and
 * cut UTF-8 characters, broken UTF-8 (overlong, surrogate, too large, stray continuation),
 * quotes, escapes and control bytes, after prefixes that sit in states taking every non-ASCII
 * character (a JSON string), only ASCII (a class without them), only some non-ASCII (no
 * whole subtree of non-ASCII text then), and none of them; and the whole-subtree path must
 * have been taken where it applies. */
static const char *const bulk_pieces[] = {
    "a", "ab", "abc", "abc def", " the", "x}", "a\"", "\"", "\"}", "\\", "a\\n", "\t", "a\n",
    "\xC3", "\xC3\xA9", "a\xC3\xA9", "\xC3\xA9t\xC3\xA9", "\xC3\xA9\xC3", "\xE4\xB8\xAD",
    "\xE4\xB8", "\xE4", "\xF0\x9F\x99\x82", "\xF0\x9F", "\xE0\x80", "\xE0\xA0", "\xED\xA0",
    "\xED\x9F", "\xF4\x90", "\xF4\x8F", "\x80", "a\xFF", "\xC0\xAF", "\xC3\xA9\"", "~", "\x7F",
    /* around the bounds of bounded strings: 3 characters (one cut), 4, 63 + 1 of two bytes,
     * 64 and 65 */
    "abcd", "aba", "\xC3\xA9\xC3\xA9\xC3\xA9", "ab\xC3", "ab\xE4\xB8", "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9",
    "0123456789012345678901234567890123456789012345678901234567890123",
    "01234567890123456789012345678901234567890123456789012345678901234",
    "012345678901234567890123456789012345678901234567890123456789012\xC3\xA9",
};

static size_t mask_equals_feeding(const qvl_grammar *g, const qvl_grammar_vocab *v,
                                  const char *prefix) {
    const int32_t n = (int32_t)(sizeof bulk_pieces / sizeof bulk_pieces[0]);
    qvl_error err = {0};
    qvl_grammar_matcher *m = NULL, *probe = NULL;
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    assert_int_equal(qvl_grammar_matcher_create(g, &probe, &err), QVL_OK);
    bool ok;
    assert_int_equal(qvl_grammar_matcher_feed(m, prefix, strlen(prefix), &ok, &err), QVL_OK);
    assert_true(ok);
    uint8_t allowed[64];
    size_t count;
    assert_int_equal(qvl_grammar_matcher_allowed(m, v, allowed, (size_t)n, &count, &err), QVL_OK);
    for (int32_t i = 0; i < n; i++) {
        assert_int_equal(qvl_grammar_matcher_reset(probe, &err), QVL_OK);
        assert_int_equal(qvl_grammar_matcher_feed(probe, prefix, strlen(prefix), &ok, &err), QVL_OK);
        assert_int_equal(qvl_grammar_matcher_feed(probe, bulk_pieces[i], strlen(bulk_pieces[i]),
                                                  &ok, &err), QVL_OK);
        if ((allowed[i] != 0) != ok)
            fail_msg("after '%s': token %d mask %d, feeding says %d", prefix, i, allowed[i], ok);
    }
    const size_t bulk = qvl_grammar_matcher_bulk_tokens(m);
    assert_true(bulk <= count);
    qvl_grammar_matcher_free(probe);
    qvl_grammar_matcher_free(m);
    return bulk;
}

static void test_whole_subtrees_in_strings(void **state) {
    (void)state;
    const int32_t n = (int32_t)(sizeof bulk_pieces / sizeof bulk_pieces[0]);
    size_t lens[64];
    for (int32_t i = 0; i < n; i++) lens[i] = strlen(bulk_pieces[i]);
    qvl_grammar_vocab *v = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_grammar_vocab_from_pieces(bulk_pieces, lens, n, &v, &err), QVL_OK);
    qvl_grammar *json = parse_ok(qvl_grammar_json_gbnf());
    const size_t json_bulk = mask_equals_feeding(json, v, "{\"k\": \"");
    assert_int_equal(mask_equals_feeding(json, v, "[\"ab \xC3\xA9"), json_bulk);
    assert_int_equal(mask_equals_feeding(json, v, "[\"a\\"), 0); /* an escape: no loop */
    assert_int_equal(mask_equals_feeding(json, v, "[\"\xC3"), 0); /* inside a character */
    assert_int_equal(mask_equals_feeding(json, v, "{\"k\": "), 0);
    qvl_grammar *ascii = parse_ok("root ::= \"\\\"\" [ !#-\\[\\]-\\x7F]* \"\\\"\"\n");
    const size_t ascii_bulk = mask_equals_feeding(ascii, v, "\"");
    /* a JSON string takes non-ASCII subtrees whole too, an ASCII-only one the ASCII ones */
    assert_true(ascii_bulk > 0 && json_bulk > ascii_bulk);
    qvl_grammar *some = parse_ok("root ::= \"\\\"\" ([ !#-\\[\\]-\\x7F] | [\xC3\xA0-\xC3\xBF])* \"\\\"\"\n");
    assert_int_equal(mask_equals_feeding(some, v, "\"x"), ascii_bulk); /* ASCII subtrees only */
    qvl_grammar_free(some);
    qvl_grammar_free(ascii);
    qvl_grammar_free(json);
    qvl_grammar_vocab_free(v);
}

/* Bounded strings (jchar{m,n}): a state with r characters left takes the plain subtrees whose
 * tokens hold at most r characters whole, and scans the longer ones by each token's count. Every
 * token's bit must equal feeding it at 0 to 64 characters left, after ASCII, non-ASCII text and
 * an escape, at and over the bounds (a cut character counts as one); the whole-subtree path
 * must count the same tokens for the same characters left, whatever came before; and a chain
 * that ends in a state still taking some plain text ("a" after two characters) must walk the
 * longer tokens. */
static void test_whole_subtrees_in_bounded_strings(void **state) {
    (void)state;
    const int32_t n = (int32_t)(sizeof bulk_pieces / sizeof bulk_pieces[0]);
    size_t lens[64];
    for (int32_t i = 0; i < n; i++) lens[i] = strlen(bulk_pieces[i]);
    qvl_grammar_vocab *v = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_grammar_vocab_from_pieces(bulk_pieces, lens, n, &v, &err), QVL_OK);
    qvl_grammar *g = schema_ok(bounded_schema);
    const size_t one = mask_equals_feeding(g, v, "{\"a\": \"");
    assert_true(one > 0);
    assert_int_equal(mask_equals_feeding(g, v, "{\"a\": \"z"), 0); /* none left */
    const size_t three = mask_equals_feeding(g, v, "{\"a\": \"\", \"e\": \"");
    assert_true(three > one);
    assert_int_equal(mask_equals_feeding(g, v, "{\"a\": \"\", \"e\": \"ab"), one);
    assert_int_equal(mask_equals_feeding(g, v, "{\"a\": \"\", \"e\": \"\xC3\xA9\\n"), one);
    assert_int_equal(mask_equals_feeding(g, v, "{\"a\": \"\", \"e\": \"\\u00e9"), 
                     mask_equals_feeding(g, v, "{\"a\": \"\", \"e\": \"\xE4\xB8\xAD"));
    assert_int_equal(mask_equals_feeding(g, v, "{\"a\": \"\", \"e\": \"abc"), 0);
    const char *const l = "{\"a\": \"\", \"e\": \"\", \"l\": \"";
    const size_t sixty_four = mask_equals_feeding(g, v, l);
    assert_true(sixty_four > three);
    char buf[256];
    snprintf(buf, sizeof buf, "%s\xC3\xA9", l); /* 63 left: the 64-character tokens are out */
    const size_t sixty_three = mask_equals_feeding(g, v, buf);
    assert_true(sixty_three < sixty_four && sixty_three > three);
    snprintf(buf, sizeof buf, "%sab\", \"x\": \"ab", l); /* 3 of 5 left */
    assert_int_equal(mask_equals_feeding(g, v, buf), three);
    qvl_grammar *open = parse_ok("root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{2} \"a\" [^\"\\\\\\x00-\\x1F]* \"\\\"\"\n");
    assert_true(mask_equals_feeding(open, v, "\"") > 0);
    assert_true(mask_equals_feeding(open, v, "\"b") > 0);
    qvl_grammar *ascii = parse_ok("root ::= \"\\\"\" [ !#-\\[\\]-\\x7F]{0,3} \"\\\"\"\n");
    assert_true(mask_equals_feeding(ascii, v, "\"") > 0);
    assert_true(mask_equals_feeding(ascii, v, "\"a") > 0);
    qvl_grammar_free(ascii);
    qvl_grammar_free(open);
    qvl_grammar_free(g);
    qvl_grammar_vocab_free(v);
}

/* The constraint's sets come from a cache keyed by matcher state (grammar_sampler.c): along
 * random walks through JSON, where states recur (inside strings, after each element), and
 * through bounded strings, every set applied must equal the trie walk of a matcher fed the
 * same tokens, and in JSON the cache must have answered some of them. */
/* One run of those walks over g; returns the share of sets the cache answered. */
static double cached_walks(const qvl_grammar *g, uint64_t rng) {
    const int32_t n = (int32_t)(sizeof pieces / sizeof pieces[0]);
    size_t lens[64];
    for (int32_t i = 0; i < n; i++) lens[i] = strlen(pieces[i]);
    qvl_grammar_vocab *v = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_grammar_vocab_from_pieces(pieces, lens, n, &v, &err), QVL_OK);
    qvl_grammar_matcher *m = NULL;
    qvl_grammar_sampler *gs = NULL;
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    assert_int_equal(qvl_grammar_sampler_create(g, v, NULL, 0, n, &gs, &err), QVL_OK);
    uint8_t allowed[64];
    float logits[64];
    int steps = 0;
    for (int walk = 0; walk < 40; walk++) {
        assert_int_equal(qvl_grammar_matcher_reset(m, &err), QVL_OK);
        assert_int_equal(qvl_grammar_sampler_reset(gs, &err), QVL_OK);
        for (int step = 0; step < 60; step++) {
            size_t count;
            assert_int_equal(qvl_grammar_matcher_allowed(m, v, allowed, (size_t)n, &count, &err), QVL_OK);
            if (count == 0) break;
            for (int32_t i = 0; i < n; i++) logits[i] = 0.0f;
            assert_int_equal(qvl_grammar_sampler_apply(gs, logits, (size_t)n, &err), QVL_OK);
            for (int32_t i = 0; i < n; i++)
                if ((logits[i] == 0.0f) != (allowed[i] != 0))
                    fail_msg("walk %d step %d: token %d '%s': constraint %d, trie walk %d", walk,
                             step, i, pieces[i], logits[i] == 0.0f, allowed[i]);
            const int32_t id = pick_allowed(&rng, allowed, n, count);
            bool ok;
            assert_int_equal(qvl_grammar_matcher_feed(m, pieces[id], lens[id], &ok, &err), QVL_OK);
            assert_true(ok);
            assert_int_equal(qvl_grammar_sampler_accept(gs, id, &err), QVL_OK);
            steps++;
        }
    }
    int64_t calls = 0;
    qvl_grammar_sampler_seconds(gs, &calls);
    assert_true(steps > 200 && calls > 0);
    const double share = (double)qvl_grammar_sampler_cache_hits(gs) / (double)calls;
    qvl_grammar_sampler_free(gs);
    qvl_grammar_matcher_free(m);
    qvl_grammar_vocab_free(v);
    return share;
}

static void test_cached_sets_match_walks(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok(qvl_grammar_json_gbnf());
    assert_true(cached_walks(g, 777) > 0.25);
    qvl_grammar_free(g);
    g = schema_ok(bounded_schema); /* every counted character a state: few hits, same sets */
    cached_walks(g, 31337);
    qvl_grammar_free(g);
}

static void test_constraint_on_logits(void **state) {
    (void)state;
    const char *const p[] = {"a", "b", "ab", "<stop>", "\xC3", "\xA9"};
    size_t lens[6];
    for (int i = 0; i < 6; i++) lens[i] = strlen(p[i]);
    const char *const text_only[] = {"a", "b", "ab", NULL, "\xC3", "\xA9"}; /* 3: an end token */
    qvl_grammar_vocab *v = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_grammar_vocab_from_pieces(text_only, lens, 6, &v, &err), QVL_OK);
    qvl_grammar *g = parse_ok("root ::= \"a\" \"b\"* \"é\"?\n");
    const int32_t stop = 3;
    qvl_grammar_sampler *gs = NULL;
    assert_int_equal(qvl_grammar_sampler_create(g, v, &stop, 1, 8, &gs, &err), QVL_OK);
    float logits[8];
    for (int i = 0; i < 8; i++) logits[i] = 1.0f;
    assert_int_equal(qvl_grammar_sampler_apply(gs, logits, 8, &err), QVL_OK);
    const int start[8] = {1, 0, 1, 0, 0, 0, 0, 0}; /* "a", "ab"; no end before anything */
    for (int i = 0; i < 8; i++) assert_int_equal(isinf(logits[i]) ? 0 : 1, start[i]);
    assert_int_equal(qvl_grammar_sampler_accept(gs, 1, &err), QVL_E_INVALID); /* "b" */
    assert_int_equal(qvl_grammar_sampler_accept(gs, 3, &err), QVL_E_INVALID); /* end too soon */
    assert_int_equal(qvl_grammar_sampler_accept(gs, 2, &err), QVL_OK);        /* "ab" */
    for (int i = 0; i < 8; i++) logits[i] = 1.0f;
    /* the set computed ahead (as on the engine's helper thread) is the one apply() writes */
    int64_t calls = 0;
    qvl_grammar_sampler_seconds(gs, &calls);
    assert_int_equal(qvl_grammar_sampler_prepare(gs, &err), QVL_OK);
    assert_int_equal(qvl_grammar_sampler_prepare(gs, &err), QVL_OK); /* once per state */
    int64_t calls2 = 0;
    qvl_grammar_sampler_seconds(gs, &calls2);
    assert_int_equal(calls2, calls + 1);
    assert_int_equal(qvl_grammar_sampler_apply(gs, logits, 8, &err), QVL_OK);
    const int after[8] = {0, 1, 0, 1, 1, 0, 0, 0}; /* "b", the end, é's first byte */
    for (int i = 0; i < 8; i++) assert_int_equal(isinf(logits[i]) ? 0 : 1, after[i]);
    assert_false(qvl_grammar_sampler_done(gs));
    assert_int_equal(qvl_grammar_sampler_accept(gs, 4, &err), QVL_OK);
    for (int i = 0; i < 8; i++) logits[i] = 1.0f;
    assert_int_equal(qvl_grammar_sampler_apply(gs, logits, 8, &err), QVL_OK);
    const int mid[8] = {0, 0, 0, 0, 0, 1, 0, 0}; /* only é's second byte; no end mid-character */
    for (int i = 0; i < 8; i++) assert_int_equal(isinf(logits[i]) ? 0 : 1, mid[i]);
    assert_int_equal(qvl_grammar_sampler_accept(gs, 5, &err), QVL_OK);
    assert_true(qvl_grammar_sampler_done(gs));
    assert_int_equal(qvl_grammar_sampler_apply(gs, logits, 7, &err), QVL_E_SHAPE);
    qvl_grammar_sampler_free(gs);

    /* text fed as bytes (a grammar switched on after its trigger) moves the state as tokens do */
    assert_int_equal(qvl_grammar_sampler_create(g, v, &stop, 1, 8, &gs, &err), QVL_OK);
    assert_int_equal(qvl_grammar_sampler_prepare(gs, &err), QVL_OK); /* a stale set must go */
    assert_int_equal(qvl_grammar_sampler_feed(gs, "ab", 2, &err), QVL_OK);
    for (int i = 0; i < 8; i++) logits[i] = 1.0f;
    assert_int_equal(qvl_grammar_sampler_apply(gs, logits, 8, &err), QVL_OK);
    for (int i = 0; i < 8; i++) assert_int_equal(isinf(logits[i]) ? 0 : 1, after[i]);
    assert_int_equal(qvl_grammar_sampler_feed(gs, "bxb", 3, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "byte 1"));
    qvl_grammar_sampler_free(gs);

    /* no token can spell what the grammar needs: one clear error */
    qvl_grammar *g2 = parse_ok("root ::= \"z\"\n");
    assert_int_equal(qvl_grammar_sampler_create(g2, v, &stop, 1, 8, &gs, &err), QVL_OK);
    assert_int_equal(qvl_grammar_sampler_apply(gs, logits, 8, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "no token of the vocabulary can continue"));
    qvl_grammar_sampler_free(gs);
    qvl_grammar_free(g2);
    qvl_grammar_free(g);
    qvl_grammar_vocab_free(v);
}

static void test_generate_matches(void **state) {
    (void)state;
    qvl_grammar *g = parse_ok(arith);
    qvl_error err = {0};
    for (uint64_t seed = 0; seed < 200; seed++) {
        char *s;
        size_t n;
        assert_int_equal(qvl_grammar_generate(g, seed, 40, &s, &n, &err), QVL_OK);
        if (!matches(g, s, n)) fail_msg("generated '%s' is refused", s);
        free(s);
    }
    qvl_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_lists_and_nesting),
        cmocka_unit_test(test_repetition),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_done_and_accepting),
        cmocka_unit_test(test_stack_cap),
        cmocka_unit_test(test_mask_against_feeding),
        cmocka_unit_test(test_whole_subtrees_in_strings),
        cmocka_unit_test(test_whole_subtrees_in_bounded_strings),
        cmocka_unit_test(test_cached_sets_match_walks),
        cmocka_unit_test(test_constraint_on_logits),
        cmocka_unit_test(test_generate_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
