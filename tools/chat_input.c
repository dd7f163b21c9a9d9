/* Line input and Ctrl-C for qvl chat (chat_input.h).
 *
 * SIGINT only sets a flag. At the prompt the handler is installed without SA_RESTART, so the
 * blocked read returns EINTR and the prompt ends; while answering it is installed with
 * SA_RESTART, so a write to the terminal or a file read the model is doing is resumed, not
 * failed, and the decoding loop sees the flag before its next token. libedit's own signal
 * handling is off (EL_SIGNAL 0): it would re-raise the signal to the whole process group. */
#define _POSIX_C_SOURCE 200809L

#include "chat_input.h"

#include <errno.h>
#include <histedit.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HISTORY_SIZE 500

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

bool chat_interrupted(void) { return interrupted != 0; }
void chat_interrupt_clear(void) { interrupted = 0; }

struct chat_input {
    struct sigaction old_sigint;
    EditLine *el;  /* NULL: stdin is not a terminal (or libedit could not start): getline */
    History *hist;
    char *line;    /* the last line read, its newline removed */
    size_t cap;
};

static void set_sigint(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGINT, &sa, NULL);
}

static char *prompt(EditLine *el) {
    (void)el;
    return "> ";
}

chat_input *chat_input_open(void) {
    chat_input *in = calloc(1, sizeof *in);
    if (!in) return NULL;
    sigaction(SIGINT, NULL, &in->old_sigint);
    set_sigint(true);
    if (!isatty(STDIN_FILENO)) return in;
    /* libedit reads multibyte characters per LC_CTYPE: the user's, else UTF-8 (the tokenizer's
     * encoding) rather than the C locale's ASCII. */
    const char *ctype = setlocale(LC_CTYPE, "");
    if (!ctype || strcmp(ctype, "C") == 0 || strcmp(ctype, "POSIX") == 0)
        setlocale(LC_CTYPE, "C.UTF-8");
    in->el = el_init("qvl", stdin, stderr, stderr);
    in->hist = history_init();
    if (!in->el || !in->hist) {
        if (in->el) el_end(in->el);
        if (in->hist) history_end(in->hist);
        in->el = NULL;
        in->hist = NULL;
        return in; /* plain reading still works */
    }
    HistEvent ev;
    history(in->hist, &ev, H_SETSIZE, HISTORY_SIZE);
    history(in->hist, &ev, H_SETUNIQUE, 1);
    el_set(in->el, EL_SIGNAL, 0);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_PROMPT, prompt);
    el_set(in->el, EL_HIST, history, in->hist);
    return in;
}

void chat_input_close(chat_input *in) {
    if (!in) return;
    if (in->el) el_end(in->el);
    if (in->hist) history_end(in->hist);
    sigaction(SIGINT, &in->old_sigint, NULL);
    free(in->line);
    free(in);
}

static bool keep(chat_input *in, const char *text, size_t len) {
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
    if (len + 1 > in->cap) {
        char *grown = realloc(in->line, len + 1);
        if (!grown) return false;
        in->line = grown;
        in->cap = len + 1;
    }
    memcpy(in->line, text, len);
    in->line[len] = '\0';
    return true;
}

chat_read chat_input_read(chat_input *in, const char **line) {
    chat_read r = CHAT_LINE;
    chat_interrupt_clear();
    set_sigint(false);
    if (in->el) {
        int count = 0;
        errno = 0;
        const char *got = el_gets(in->el, &count);
        if (!got || count <= 0)
            r = chat_interrupted() ? CHAT_INTERRUPT : count == 0 ? CHAT_EOF : CHAT_ERROR;
        else if (!keep(in, got, (size_t)count))
            r = CHAT_ERROR;
    } else {
        if (isatty(STDIN_FILENO)) fputs("> ", stderr);
        ssize_t len = getline(&in->line, &in->cap, stdin);
        if (len < 0)
            r = chat_interrupted() ? CHAT_INTERRUPT : ferror(stdin) ? CHAT_ERROR : CHAT_EOF;
        else if (strlen(in->line) != (size_t)len)
            r = CHAT_ERROR; /* a NUL byte inside the line */
        else
            keep(in, in->line, (size_t)len); /* shortens in place: cannot fail */
        clearerr(stdin);
    }
    set_sigint(true);
    if (r == CHAT_LINE && in->hist && in->line[0]) {
        HistEvent ev;
        history(in->hist, &ev, H_ENTER, in->line);
    }
    /* a Ctrl-C at the prompt is not meant for the next answer */
    if (r != CHAT_INTERRUPT) chat_interrupt_clear();
    *line = r == CHAT_LINE ? in->line : NULL;
    return r;
}
