/* Ctrl-C in qvl run: the first press ends the answer (it stops before the next token or
 * prefill batch, then the newline and the timings are printed and qvl exits with 130); a
 * second press exits at once with 130, as llama.cpp's llama-cli does. qvl chat has its own
 * handling (chat_input.h): there Ctrl-C returns to the prompt. */
#ifndef QVL_TOOLS_RUN_INTERRUPT_H
#define QVL_TOOLS_RUN_INTERRUPT_H

#include <stdbool.h>

/* Exit status after Ctrl-C: 128 + SIGINT, what a shell reports for a process it ended. */
#define RUN_EXIT_INTERRUPTED 130

/* Installs the SIGINT handler (with SA_RESTART: a write or read in progress is resumed). */
void run_interrupt_install(void);
/* A Ctrl-C came; as a qvl_generation cancel callback (user unused). */
bool run_interrupted(void *user);

#endif
