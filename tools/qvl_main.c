/* qvl: ask Qwen3-VL questions from the command line.
 *   qvl run      one prompt -> one answer (also what `qvl -m DIR ...` without a command does)
 *   qvl chat     interactive multi-turn chat
 *   qvl tokenize text -> token ids (and back)
 *   qvl mkmodel  write a random-weight checkpoint for any Qwen3-VL config
 *   qvl quantize convert a model's weights once and save them as a model directory */
#include <stdio.h>
#include <string.h>

#include "qvl_commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: qvl COMMAND [options]   or   qvl -m MODEL_DIR [run options]\n\n"
            "commands:\n"
            "  run       answer one prompt:  qvl run -m MODEL_DIR -p \"PROMPT\" [--image FILE]...\n"
            "  chat      interactive chat:   qvl chat -m MODEL_DIR   (or qvl run -i / -cnv)\n"
            "  tokenize  print token ids:    qvl tokenize -m MODEL_DIR TEXT\n"
            "  mkmodel   random checkpoint:  qvl mkmodel --config config.json --out DIR\n"
            "  quantize  convert weights once: qvl quantize -m DIR --weights q8_0 --out DIR2\n"
            "  decode    picture to RGB:     qvl decode IMAGE --out FILE.rgb   (prints W H)\n"
            "  serve     OpenAI-compatible HTTP server: qvl serve -m MODEL_DIR [--port 8080]\n\n"
            "common options of run and chat (llama.cpp's spellings in brackets):\n"
            "  -m, --model DIR               the model directory\n"
            "  -p, --prompt TEXT             the message (run); -p - reads it from stdin\n"
            "  -f, --file FILE               the message from a file (run)\n"
            "  --system TEXT                 a system message [-sys, --system-prompt]\n"
            "  --image FILE                  a picture (JPEG, PNG, WebP, GIF, PPM/PGM)\n"
            "  --image-max-tokens N          at most N tokens per picture (default 4096)\n"
            "  --image-min-tokens N          at least N tokens per picture\n"
            "  -n, --n-predict N             tokens to generate at most\n"
            "  -c, --ctx N                   context size in tokens [--ctx-size]\n"
            "  -t, --threads N               CPU threads of the backend\n"
            "  -b, --batch-size N            prompt tokens per prefill step\n"
            "  -i, --interactive             chat (qvl run) [-cnv, --conversation]\n"
            "  -s, --seed S, --temp T, --top-k K, --top-p P, --min-p P, --repeat-penalty R\n"
            "  --backend NAME, --plugins FILE, --weights DTYPE\n"
            "  -q, --quiet                   no progress, picture lines or timings on stderr\n"
            "  -v, --verbose                 details, and timings when stderr is not a terminal\n\n"
            "  --version [--plugins FILE]    version, commit, compiler, backends found/skipped\n\n"
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
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        const char *plugins = NULL;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--plugins") == 0 && i + 1 < argc) {
                plugins = argv[++i];
            } else if (strncmp(argv[i], "--plugins=", 10) == 0) {
                plugins = argv[i] + 10;
            } else {
                fprintf(stderr, "qvl --version: unexpected argument '%s' (only --plugins FILE)\n",
                        argv[i]);
                return 2;
            }
        }
        return qvl_cmd_version(plugins);
    }
    if (strcmp(cmd, "run") == 0) return qvl_cmd_run(argc - 2, argv + 2, false);
    if (strcmp(cmd, "chat") == 0) return qvl_cmd_run(argc - 2, argv + 2, true);
    if (strcmp(cmd, "tokenize") == 0) return qvl_cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(cmd, "mkmodel") == 0) return qvl_cmd_mkmodel(argc - 2, argv + 2);
    if (strcmp(cmd, "quantize") == 0) return qvl_cmd_quantize(argc - 2, argv + 2);
    if (strcmp(cmd, "decode") == 0) return qvl_cmd_decode(argc - 2, argv + 2);
    if (strcmp(cmd, "serve") == 0) return qvl_cmd_serve(argc - 2, argv + 2);
    /* llama-cli style: options without a command are qvl run's. */
    if (cmd[0] == '-' && cmd[1] != '\0') return qvl_cmd_run(argc - 1, argv + 1, false);
    fprintf(stderr, "qvl: unknown command '%s' (run, chat, tokenize, mkmodel, quantize, decode, serve; see qvl --help)\n", cmd);
    return 2;
}
