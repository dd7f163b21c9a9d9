/* Dumps: the text listing names every live node with its op, shape and inputs; the DOT output
 * is valid Graphviz (rendered with `dot -Tsvg` when it is installed), even for names with
 * quotes and backslashes. */
#define _POSIX_C_SOURCE 200809L /* fileno, mkstemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_graph_util.h"

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* The dump of g in fmt as a malloc'd string. */
static char *dump(const qvl_graph *g, qvl_dump_format fmt) {
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    assert_non_null(f);
    assert_int_equal(qvl_graph_dump(g, f, fmt), QVL_OK);
    fclose(f);
    return buf;
}

static size_t count_lines(const char *s, const char *prefix) {
    size_t n = 0, len = strlen(prefix);
    for (const char *line = s; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        n += strncmp(line, prefix, len) == 0;
    return n;
}

static qvl_graph *weird_names(void) {
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x \"quoted\"", QVL_F32, SHAPE(2, 8));
    qvl_tid w = qvl_g_weight(g, "w\\back{slash}|<port>", QVL_F32, SHAPE(4, 8));
    qvl_tid y = qvl_g_matmul(g, x, w, -1);
    qvl_g_name(g, y, "line\nbreak");
    qvl_g_output(g, qvl_g_scale(g, y, 0.5f), "out \"y\"");
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    return g;
}

static void text_listing(void **state) {
    (void)state;
    tg_text_dims d = tg_text_default();
    d.n_layers = 1;
    qvl_graph *g = tg_build_text(&d);
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
    char *s = dump(g, QVL_DUMP_TEXT);
    assert_int_equal(count_lines(s, "node "), qvl_graph_n_nodes(g));
    assert_int_equal(count_lines(s, "output "), 1);
    assert_int_equal(count_lines(s, "input "), 4); /* x, pos, kv.0.k, kv.0.v */
    assert_non_null(strstr(s, "attention"));
    assert_non_null(strstr(s, "mask=causal"));
    assert_non_null(strstr(s, "norm_linear"));
    assert_non_null(strstr(s, "\"blk.0.attn_out\""));
    assert_non_null(strstr(s, "[5, 64] f32"));
    assert_non_null(strstr(s, "\"logits\""));
    /* The header counts ops. */
    char want[64];
    snprintf(want, sizeof want, "%zu live nodes", qvl_graph_n_nodes(g));
    assert_non_null(strstr(s, want));
    assert_non_null(strstr(s, "mlp_residual 2")); /* the MLP, and o_proj + residual */
    free(s);
    qvl_graph_free(g);

    g = weird_names();
    s = dump(g, QVL_DUMP_TEXT);
    assert_non_null(strstr(s, "\"x \\\"quoted\\\"\""));
    assert_null(strstr(s, "line\nbreak")); /* one line per tensor */
    free(s);
    qvl_graph_free(g);
}

static bool have_dot(void) {
    return system("command -v dot >/dev/null 2>&1") == 0;
}

/* Writes text to a temporary file and renders it with dot; true when dot accepts it. */
static bool dot_renders(const char *text, bool quiet) {
    char path[] = "/tmp/qvl-graph-dot-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "dot -Tsvg %s -o /dev/null%s", path, quiet ? " 2>/dev/null" : "");
    int rc = system(cmd);
    unlink(path);
    return rc == 0;
}

static void dot_output(void **state) {
    (void)state;
    qvl_graph *graphs[3];
    tg_text_dims td = tg_text_default();
    td.n_layers = 1;
    graphs[0] = tg_build_text(&td);
    assert_int_equal(qvl_graph_fuse(graphs[0], NULL, NULL, NULL, NULL), QVL_OK);
    tg_vision_dims vd = tg_vision_default();
    graphs[1] = tg_build_vision(&vd);
    graphs[2] = weird_names();
    bool dot = have_dot();
    if (!dot) printf("note: graphviz `dot` not found; DOT output is checked by structure only\n");
    for (int i = 0; i < 3; i++) {
        char *s = dump(graphs[i], QVL_DUMP_DOT);
        assert_true(strncmp(s, "digraph", 7) == 0);
        assert_non_null(strstr(s, "->"));
        /* Every live tensor appears as a DOT node. */
        size_t n_nodes = 0;
        for (const char *p = s; (p = strstr(p, " [")) != NULL; p++) n_nodes++;
        assert_true(n_nodes >= qvl_graph_n_nodes(graphs[i]));
        if (dot) assert_true(dot_renders(s, false));
        free(s);
        qvl_graph_free(graphs[i]);
    }
    /* And dot refuses a broken file, so the check above means something. */
    if (dot) assert_false(dot_renders("digraph { a -> \"b }\n", true));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_listing),
        cmocka_unit_test(dot_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
