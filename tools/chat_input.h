/* The chat's input side: one line at a time from stdin, with line editing and history (libedit)
 * when stdin is a terminal, and Ctrl-C (SIGINT) turned into a flag: while an answer is being
 * generated it asks the answer to stop; at the prompt it ends the chat. */
#ifndef QVL_TOOLS_CHAT_INPUT_H
#define QVL_TOOLS_CHAT_INPUT_H

#include <stdbool.h>

typedef enum chat_read {
    CHAT_LINE,      /* a line (without its newline) */
    CHAT_EOF,       /* Ctrl-D on an empty line, or the end of piped input */
    CHAT_INTERRUPT, /* Ctrl-C at the prompt */
    CHAT_ERROR,     /* reading failed (out of memory, I/O) */
} chat_read;

typedef struct chat_input chat_input;

/* Installs the SIGINT handler (the previous one comes back at chat_input_close). NULL on OOM. */
chat_input *chat_input_open(void);
void chat_input_close(chat_input *in);

/* Shows "> " on stderr when stdin is a terminal and reads a line; *line stays valid until the
 * next call. Non-empty lines typed on a terminal go into the history. */
chat_read chat_input_read(chat_input *in, const char **line);

/* A Ctrl-C since the last chat_input_read or chat_interrupt_clear. */
bool chat_interrupted(void);
void chat_interrupt_clear(void);

#endif
