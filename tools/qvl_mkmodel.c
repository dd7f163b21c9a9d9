/* qvl mkmodel: a random-weight checkpoint in Hugging Face layout for any Qwen3-VL config, so
 * speed and memory can be measured on full-size models without downloading weights. */
#include <stdio.h>

#include "cli.h"
#include "qvl/log.h"
#include "qvl/mkmodel.h"
#include "qvl_commands.h"

int qvl_cmd_mkmodel(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *tokenizer = NULL, *dtype_name = "bf16";
    int64_t seed = 0;
    double std = 0.02;
    bool verbose = false;
    cli_opt opts[] = {
        {"config", 0, CLI_STRING, &config, "CONFIG.json", "the model's config.json", 0, 0, false},
        {"out", 0, CLI_STRING, &out, "DIR", "directory to write (created if missing)", 0, 0, false},
        {"seed", 0, CLI_INT, &seed, "S", "random seed (default 0)", 0, 9.2e18, false},
        {"dtype", 0, CLI_STRING, &dtype_name, "bf16|f16|f32", "weight dtype (default bf16)", 0, 0, false},
        {"std", 0, CLI_FLOAT, &std, "X", "standard deviation of the weights (default 0.02)", 0, 100, false},
        {"tokenizer", 0, CLI_STRING, &tokenizer, "FILE", "copy this tokenizer.json into the model", 0, 0, false},
        {"verbose", 'v', CLI_FLAG, &verbose, NULL, "log progress", 0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    size_t n_pos = 0;
    int rc = cli_parse("qvl mkmodel", opts, n_opts, argc, argv, pos, 0, &n_pos);
    if (rc == CLI_HELP) {
        cli_print_help(stdout, "usage: qvl mkmodel --config CONFIG.json --out DIR [options]", opts,
                       n_opts);
        return 0;
    }
    if (rc != CLI_OK) return 2;
    if (verbose) qvl_log_level_set(QVL_LOG_INFO);
    if (!config || !out) {
        fprintf(stderr, "qvl mkmodel: --config and --out are required\n");
        return 2;
    }
    qvl_dtype dtype;
    if (!qvl_dtype_parse(dtype_name, &dtype) ||
        (dtype != QVL_BF16 && dtype != QVL_F16 && dtype != QVL_F32)) {
        fprintf(stderr, "qvl mkmodel: --dtype: '%s' is not one of bf16, f16, f32\n", dtype_name);
        return 2;
    }
    qvl_error err = {0};
    if (qvl_qwen3vl_mkmodel(config, out, (uint64_t)seed, dtype, (float)std, tokenizer, &err) !=
        QVL_OK) {
        fprintf(stderr, "qvl mkmodel: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "qvl mkmodel: wrote %s\n", out);
    return 0;
}
