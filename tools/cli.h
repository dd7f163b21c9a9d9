/* A small table-driven command-line parser shared by the qvl tools: every flag has a help
 * line, unknown flags and bad values are errors (one line on stderr, exit status 2). */
#ifndef QVL_CLI_H
#define QVL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_FLAG,   /* bool, no value */
    CLI_STRING, /* const char * */
    CLI_INT,    /* int64_t, checked against [min, max] */
    CLI_FLOAT,  /* double, finite, checked against [min, max] */
} cli_kind;

typedef struct cli_opt {
    const char *name;    /* long name without dashes: "top-k" */
    char short_name;     /* 'n' or 0 */
    cli_kind kind;
    void *dst;           /* bool *, const char **, int64_t *, double * */
    const char *metavar; /* "N", "FILE" */
    const char *help;
    double min, max;     /* for CLI_INT and CLI_FLOAT */
    bool seen;           /* set by the parser */
} cli_opt;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_ERROR = 2 };

/* Parse argv[0..argc) (argv[0] is the first argument, not the program). Positional arguments
 * are collected in order into positional[] (at most max_positional; more is an error).
 * -h/--help returns CLI_HELP. Errors print "PROG: ..." and return CLI_ERROR. */
int cli_parse(const char *prog, cli_opt *opts, size_t n_opts, int argc, char **argv,
              const char **positional, size_t max_positional, size_t *n_positional);
void cli_print_help(FILE *f, const char *usage, const cli_opt *opts, size_t n_opts);

/* Another spelling of an option, with its dashes: {"-sys", "system"}, {"--ctx-size", "ctx"}
 * (llama.cpp's names; a single dash may lead a multi-letter alias). */
typedef struct cli_alias {
    const char *spelling;
    const char *name; /* the option's long name */
} cli_alias;

/* cli_parse that also takes the aliases ("--alias=VALUE" works for "--" spellings). */
int cli_parse_aliased(const char *prog, cli_opt *opts, size_t n_opts, const cli_alias *aliases,
                      size_t n_aliases, int argc, char **argv, const char **positional,
                      size_t max_positional, size_t *n_positional);
/* cli_print_help that shows each option's aliases and leaves out the options named in
 * `hidden` (NULL-terminated long names, or NULL): those of another subcommand. */
void cli_print_help_ex(FILE *f, const char *usage, const cli_opt *opts, size_t n_opts,
                       const cli_alias *aliases, size_t n_aliases, const char *const *hidden);

/* "1,2,3" or "1 2 3" (commas and/or blanks) into a malloc'd array; NULL on a malformed list
 * (with a message on stderr naming prog). */
int32_t *cli_parse_ids(const char *prog, const char *text, size_t *n);

#endif
