/* Fuzz target: `--ids` parsing of the qvl tools (cli_parse_ids in tools/cli.c). The input is
 * one command-line argument, so it is cut at its first NUL byte as argv would be. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "fuzz_check.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* cli_parse_ids reports malformed lists on the stderr stream; send that stream to
     * /dev/null to keep the fuzzer's log readable. Only the FILE changes: sanitizer reports
     * and FUZZ_CHECK write to file descriptor 2, which stays open. */
    if (!getenv("QVL_FUZZ_VERBOSE")) {
        FILE *null = fopen("/dev/null", "w");
        if (null) stderr = null;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    size_t n = 0;
    int32_t *ids = cli_parse_ids("fuzz", text, &n);
    if (ids) {
        FUZZ_CHECK(n >= 1 && n <= strlen(text));
        for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0);
        free(ids);
    }
    free(text);
    return 0;
}
