/* qvl: ask Qwen3-VL questions from the command line.
 *   qvl run      one prompt -> one answer
 *   qvl chat     interactive multi-turn chat
 *   qvl tokenize text -> token ids (and back)
 *   qvl mkmodel  write a random-weight checkpoint for any Qwen3-VL config */
#include <stdio.h>
#include <string.h>

#include "qvl_commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: qvl COMMAND [options]\n\n"
            "commands:\n"
            "  run       answer one prompt:  qvl run -m MODEL_DIR -p \"PROMPT\"\n"
            "  chat      interactive chat:   qvl chat -m MODEL_DIR\n"
            "  tokenize  print token ids:    qvl tokenize -m MODEL_DIR TEXT\n"
            "  mkmodel   random checkpoint:  qvl mkmodel --config config.json --out DIR\n\n"
            "'qvl COMMAND --help' lists each command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "run") == 0) return qvl_cmd_run(argc - 2, argv + 2, false);
    if (strcmp(cmd, "chat") == 0) return qvl_cmd_run(argc - 2, argv + 2, true);
    if (strcmp(cmd, "tokenize") == 0) return qvl_cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(cmd, "mkmodel") == 0) return qvl_cmd_mkmodel(argc - 2, argv + 2);
    fprintf(stderr, "qvl: unknown command '%s' (run, chat, tokenize, mkmodel; see qvl --help)\n", cmd);
    return 2;
}
