/* Table-driven flag parsing for the qvl tools. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static cli_opt *find_long(cli_opt *opts, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0) return &opts[i];
    return NULL;
}

static cli_opt *find_short(cli_opt *opts, size_t n, char c) {
    for (size_t i = 0; i < n; i++)
        if (opts[i].short_name && opts[i].short_name == c) return &opts[i];
    return NULL;
}

/* The option an alias spelling (arg's first len bytes) stands for. */
static cli_opt *find_alias(cli_opt *opts, size_t n, const cli_alias *aliases, size_t n_aliases,
                           const char *arg, size_t len) {
    for (size_t i = 0; i < n_aliases; i++)
        if (strlen(aliases[i].spelling) == len && strncmp(aliases[i].spelling, arg, len) == 0)
            return find_long(opts, n, aliases[i].name, strlen(aliases[i].name));
    return NULL;
}

static int set_value(const char *prog, cli_opt *o, const char *value) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG:
        *(bool *)o->dst = true;
        return CLI_OK;
    case CLI_STRING:
        *(const char **)o->dst = value;
        return CLI_OK;
    case CLI_INT: {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end || (double)v < o->min || (double)v > o->max) {
            fprintf(stderr, "%s: --%s: '%s' is not an integer in [%.0f, %.0f]\n", prog, o->name,
                    value, o->min, o->max);
            return CLI_ERROR;
        }
        *(int64_t *)o->dst = v;
        return CLI_OK;
    }
    case CLI_FLOAT: {
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v) || v < o->min || v > o->max) {
            fprintf(stderr, "%s: --%s: '%s' is not a number in [%g, %g]\n", prog, o->name, value,
                    o->min, o->max);
            return CLI_ERROR;
        }
        *(double *)o->dst = v;
        return CLI_OK;
    }
    }
    return CLI_ERROR;
}

int cli_parse(const char *prog, cli_opt *opts, size_t n_opts, int argc, char **argv,
              const char **positional, size_t max_positional, size_t *n_positional) {
    return cli_parse_aliased(prog, opts, n_opts, NULL, 0, argc, argv, positional, max_positional,
                             n_positional);
}

int cli_parse_aliased(const char *prog, cli_opt *opts, size_t n_opts, const cli_alias *aliases,
                      size_t n_aliases, int argc, char **argv, const char **positional,
                      size_t max_positional, size_t *n_positional) {
    *n_positional = 0;
    bool only_positional = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (only_positional || a[0] != '-' || a[1] == '\0') { /* "-" alone is positional */
            if (*n_positional >= max_positional) {
                fprintf(stderr, "%s: unexpected argument '%s'\n", prog, a);
                return CLI_ERROR;
            }
            positional[(*n_positional)++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return CLI_HELP;
        cli_opt *o = NULL;
        const char *inline_value = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            o = find_long(opts, n_opts, name, eq ? (size_t)(eq - name) : strlen(name));
            if (eq) inline_value = eq + 1;
        } else if (a[2] == '\0') {
            o = find_short(opts, n_opts, a[1]);
        }
        if (!o && n_aliases > 0) {
            const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
            o = find_alias(opts, n_opts, aliases, n_aliases, a, eq ? (size_t)(eq - a) : strlen(a));
            inline_value = o && eq ? eq + 1 : NULL;
        }
        if (!o) {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, a);
            return CLI_ERROR;
        }
        o->seen = true;
        if (o->kind == CLI_FLAG) {
            if (inline_value) {
                fprintf(stderr, "%s: --%s takes no value\n", prog, o->name);
                return CLI_ERROR;
            }
            set_value(prog, o, NULL);
            continue;
        }
        const char *value = inline_value;
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: --%s needs a value (%s)\n", prog, o->name,
                        o->metavar ? o->metavar : "VALUE");
                return CLI_ERROR;
            }
            value = argv[++i];
        }
        int rc = set_value(prog, o, value);
        if (rc != CLI_OK) return rc;
    }
    return CLI_OK;
}

void cli_print_help(FILE *f, const char *usage, const cli_opt *opts, size_t n_opts) {
    cli_print_help_ex(f, usage, opts, n_opts, NULL, 0, NULL);
}

static bool is_hidden(const char *const *hidden, const char *name) {
    for (; hidden && *hidden; hidden++)
        if (strcmp(*hidden, name) == 0) return true;
    return false;
}

void cli_print_help_ex(FILE *f, const char *usage, const cli_opt *opts, size_t n_opts,
                       const cli_alias *aliases, size_t n_aliases, const char *const *hidden) {
    fprintf(f, "%s\n\noptions:\n", usage);
    for (size_t i = 0; i < n_opts; i++) {
        if (is_hidden(hidden, opts[i].name)) continue;
        char left[64];
        const char *mv = opts[i].kind == CLI_FLAG ? "" : (opts[i].metavar ? opts[i].metavar : "V");
        if (opts[i].short_name)
            snprintf(left, sizeof left, "-%c, --%s %s", opts[i].short_name, opts[i].name, mv);
        else
            snprintf(left, sizeof left, "    --%s %s", opts[i].name, mv);
        fprintf(f, "  %-28s %s\n", left, opts[i].help);
        bool first = true;
        for (size_t k = 0; k < n_aliases; k++) {
            if (strcmp(aliases[k].name, opts[i].name) != 0) continue;
            if (first) fprintf(f, "  %-28s (also %s", "", aliases[k].spelling);
            else fprintf(f, ", %s", aliases[k].spelling);
            first = false;
        }
        if (!first) fprintf(f, ")\n");
    }
    fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}

int32_t *cli_parse_ids(const char *prog, const char *text, size_t *n) {
    size_t cap = 16, count = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return NULL;
    const char *p = text;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n') p++;
        if (*p == '\0') break;
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX ||
            (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n')) {
            fprintf(stderr, "%s: --ids: '%.20s' is not a list of non-negative token ids\n", prog, p);
            free(ids);
            return NULL;
        }
        if (count == cap) {
            int32_t *grown = realloc(ids, 2 * cap * sizeof *ids);
            if (!grown) {
                free(ids);
                return NULL;
            }
            ids = grown;
            cap *= 2;
        }
        ids[count++] = (int32_t)v;
        p = end;
    }
    if (count == 0) {
        fprintf(stderr, "%s: --ids: no token ids given\n", prog);
        free(ids);
        return NULL;
    }
    *n = count;
    return ids;
}
