/* qvl decode: a picture as qvl sees it before preprocessing. Writes the decoded, EXIF-oriented
 * 8-bit RGB bytes (row-major, R G B per pixel, no header) to --out and prints "W H" on stdout,
 * so the bytes can be compared with Pillow's
 * ImageOps.exif_transpose(Image.open(f)).convert("RGB").tobytes(). */
#include <stdio.h>
#include <string.h>

#include "qvl/file_write.h"
#include "qvl/image.h"
#include "qvl_commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: qvl decode IMAGE --out FILE.rgb\n"
               "  writes the decoded, EXIF-oriented RGB bytes (3 per pixel, row-major) to FILE.rgb\n"
               "  and prints the picture's width and height as \"W H\"\n");
}

int qvl_cmd_decode(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--out") == 0 || strcmp(argv[i], "-o") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "qvl decode: %s needs a file name\n", argv[i]);
                return 2;
            }
            out = argv[++i];
        } else if (strncmp(argv[i], "--out=", 6) == 0) {
            out = argv[i] + 6;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "qvl decode: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (in) {
            fprintf(stderr, "qvl decode: one picture at a time ('%s' and '%s')\n", in, argv[i]);
            return 2;
        } else {
            in = argv[i];
        }
    }
    if (!in || !out || !*out) {
        usage(stderr);
        return 2;
    }
    qvl_image img;
    qvl_error err = {0};
    qvl_new_file f = {.fd = -1}; /* abandon closes nothing until opened */
    qvl_status st = qvl_image_load(in, &img, &err);
    if (st == QVL_OK) st = qvl_new_file_open(out, &f, &err);
    if (st == QVL_OK)
        st = qvl_new_file_write(&f, img.rgb, (size_t)img.width * (size_t)img.height * 3, &err);
    if (st == QVL_OK) st = qvl_new_file_commit(&f, &err);
    else qvl_new_file_abandon(&f);
    if (st != QVL_OK) {
        fprintf(stderr, "qvl decode: %s\n", err.msg);
        qvl_image_free(&img);
        return 1;
    }
    printf("%d %d\n", (int)img.width, (int)img.height);
    qvl_image_free(&img);
    return 0;
}
