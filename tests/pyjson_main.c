/* qvl-pyjson: prints a request body as the chat template's `tojson` would render it, through
 * qvl serve's own parse (serve_json_parse) and printer (serve_pyjson), so that
 * tests/serve_pyjson_test.py can compare it byte for byte with Python's json.dumps.
 *
 *     qvl-pyjson FILE.json
 *
 * FILE.json holds one JSON object; the rendering goes to stdout without a trailing newline;
 * exit 1 with one line on stderr for a body the server refuses. */
#include <stdio.h>
#include <stdlib.h>

#include "serve/serve_json.h"
#include "serve/serve_pyjson.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: qvl-pyjson FILE.json\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "qvl-pyjson: cannot open %s\n", argv[1]);
        return 1;
    }
    static char body[1 << 20];
    const size_t len = fread(body, 1, sizeof body, f);
    fclose(f);
    serve_bad bad = {0};
    cJSON *root = serve_json_parse(body, len, 64, &bad, NULL);
    if (!root) {
        fprintf(stderr, "qvl-pyjson: %d %s\n", bad.status, bad.message);
        return 1;
    }
    char *text = serve_pyjson(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "qvl-pyjson: out of memory\n");
        return 1;
    }
    fputs(text, stdout);
    free(text);
    return 0;
}
