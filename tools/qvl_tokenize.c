/* qvl tokenize: raw UTF-8 text -> token ids on one line, or ids -> text with --decode.
 * Needs only tokenizer.json. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "qvl/model_files.h"
#include "qvl/file.h"
#include "qvl/tokenizer.h"
#include "qvl_commands.h"

/* Far more text than any context holds (about 16M tokens). A regular file larger than this is
 * refused from its size before anything is read; a pipe or terminal is read up to it. */
#define MAX_INPUT_BYTES ((size_t)64 << 20)

/* A stream (stdin, a FIFO such as a shell's <(...)) read whole, at most MAX_INPUT_BYTES. */
static char *read_stream(FILE *f, const char *path, size_t *len, qvl_error *err) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap >= MAX_INPUT_BYTES) {
                qvl_fail(err, QVL_E_LIMIT, "%s: larger than %zu bytes", path, MAX_INPUT_BYTES);
                free(buf);
                buf = NULL;
                break;
            }
            char *grown = realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                qvl_fail(err, QVL_E_IO, "%s: read error", path);
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    if (!buf && err->status == QVL_OK) qvl_fail(err, QVL_E_NOMEM, "out of memory reading %s", path);
    *len = buf ? n : 0;
    return buf;
}

/* The text of -f: a regular file through the bounded reader (directories and devices are refused
 * there without being read); a FIFO or "-" (stdin) as a stream. Stdin that is a regular file is
 * refused from its size at once; a device other than a terminal (< /dev/zero) is refused. */
static char *read_input(const char *path, size_t *len, qvl_error *err) {
    *len = 0;
    struct stat sb;
    if (strcmp(path, "-") == 0) {
        if (fstat(STDIN_FILENO, &sb) == 0) {
            if (S_ISREG(sb.st_mode) && (unsigned long long)sb.st_size > MAX_INPUT_BYTES) {
                qvl_fail(err, QVL_E_LIMIT, "stdin: larger than %zu bytes", MAX_INPUT_BYTES);
                return NULL;
            }
            if ((S_ISCHR(sb.st_mode) && !isatty(STDIN_FILENO)) || S_ISBLK(sb.st_mode) ||
                S_ISDIR(sb.st_mode)) {
                qvl_fail(err, QVL_E_IO, "stdin: not a file, pipe or terminal (a device)");
                return NULL;
            }
        }
        return read_stream(stdin, "stdin", len, err);
    }
    if (stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode)) {
        FILE *f = fopen(path, "rb");
        if (!f) {
            qvl_fail(err, QVL_E_IO, "%s: cannot open: %s", path, strerror(errno));
            return NULL;
        }
        char *buf = read_stream(f, path, len, err);
        fclose(f);
        return buf;
    }
    char *buf = NULL;
    if (qvl_read_file(path, MAX_INPUT_BYTES, QVL_E_IO, &buf, len, err) != QVL_OK) return NULL;
    return buf;
}

int qvl_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *decode = NULL;
    cli_opt opts[] = {
        {"model", 'm', CLI_STRING, &model, "DIR|FILE", "model directory holding tokenizer.json, or a GGUF model", 0, 0, false},
        {"file", 'f', CLI_STRING, &file, "FILE", "read the text from FILE ('-' = stdin)", 0, 0, false},
        {"decode", 0, CLI_STRING, &decode, "\"IDS\"", "print the text of these token ids instead", 0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    size_t n_pos = 0;
    int rc = cli_parse("qvl tokenize", opts, n_opts, argc, argv, pos, 1, &n_pos);
    if (rc == CLI_HELP) {
        cli_print_help(stdout, "usage: qvl tokenize -m MODEL_DIR [-f FILE | TEXT | --decode \"IDS\"]\n"
                               "Prints the token ids of the raw text on one line (special-token "
                               "strings map to their ids; nothing is added).",
                       opts, n_opts);
        return 0;
    }
    if (rc != CLI_OK) return 2;
    int sources = (file != NULL) + (n_pos == 1) + (decode != NULL);
    if (!model || sources != 1) {
        fprintf(stderr, "qvl tokenize: give -m MODEL_DIR and exactly one of -f FILE, TEXT or --decode\n");
        return 2;
    }
    /* tokenizer.json of a directory, or tokenizer.ggml.* of a GGUF model */
    qvl_error err = {0};
    qvl_tokenizer *tok = NULL;
    qvl_model_files files;
    qvl_status st = qvl_model_files_find(model, NULL, &files, &err);
    if (st == QVL_OK) {
        st = qvl_model_files_tokenizer(&files, &tok, &err);
        qvl_model_files_free(&files);
    }
    if (st != QVL_OK) {
        fprintf(stderr, "qvl tokenize: %s\n", err.msg);
        return 1;
    }
    rc = 0;
    if (decode) {
        size_t n = 0;
        int32_t *ids = cli_parse_ids("qvl tokenize", decode, &n);
        char *text = NULL;
        size_t len = 0;
        /* the library skips ids it has no piece for (a model's vocabulary may be padded past
         * the tokenizer's); asked to decode, the user hears about them */
        for (size_t i = 0; ids && i < n; i++) {
            const char *piece;
            size_t piece_len;
            if (qvl_tokenizer_token_to_piece(tok, ids[i], &piece, &piece_len, &err) != QVL_OK) {
                /* the library's message has no range; the tool knows the vocabulary */
                fprintf(stderr, "qvl tokenize: --decode: no token has id %d (the vocabulary's ids "
                        "are 0 to %d)\n", (int)ids[i], (int)qvl_tokenizer_vocab_size(tok) - 1);
                free(ids);
                ids = NULL;
                rc = 1;
                break;
            }
        }
        if (!ids) {
            if (rc == 0) rc = 2;
        } else if (qvl_tokenizer_decode(tok, ids, n, false, &text, &len, &err) != QVL_OK) {
            fprintf(stderr, "qvl tokenize: %s\n", err.msg);
            rc = 1;
        } else {
            fwrite(text, 1, len, stdout);
            fputc('\n', stdout);
        }
        free(text);
        free(ids);
    } else {
        size_t len = n_pos ? strlen(pos[0]) : 0;
        char *owned = file ? read_input(file, &len, &err) : NULL;
        const char *text = file ? owned : pos[0];
        int32_t *ids = NULL;
        size_t n = 0;
        if (!text || qvl_tokenizer_encode(tok, text, len, &ids, &n, &err) != QVL_OK) {
            fprintf(stderr, "qvl tokenize: %s\n", err.msg);
            rc = 1;
        } else {
            for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
        }
        free(ids);
        free(owned);
    }
    qvl_tokenizer_free(tok);
    return rc;
}
