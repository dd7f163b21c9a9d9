/* qvl quantize --out FILE.gguf [--mmproj-out MMPROJ.gguf]: llama.cpp's two-file layout from a
 * Hugging Face directory or GGUF files (qvl/qwen3vl_gguf_export.h). The output rule is the one
 * the directory output follows: an existing file is replaced only with --force, and never a
 * source file, a directory, or one output given twice. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qvl/model_files.h"
#include "qvl/qwen3vl_gguf_export.h"
#include "qvl/weights.h"
#include "qvl_quantize.h"

static bool same_file(const struct stat *a, const char *path) {
    struct stat b;
    return path && stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

static qvl_status check_out(const char *flag, const char *out, const qvl_model_files *f,
                            bool force, qvl_error *err) {
    struct stat sb;
    if (stat(out, &sb) != 0) {
        if (errno == ENOENT) return QVL_OK; /* a dangling link is refused when opened */
        return qvl_fail(err, QVL_E_IO, "%s %s: %s", flag, out, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode))
        return qvl_fail(err, QVL_E_INVALID, "%s %s is a directory: give a file name", flag, out);
    if (same_file(&sb, f->gguf) || same_file(&sb, f->mmproj))
        return qvl_fail(err, QVL_E_INVALID, "%s %s is a source file: choose another", flag, out);
    if (S_ISREG(sb.st_mode) && !force)
        return qvl_fail(err, QVL_E_INVALID, "%s %s already exists: refusing to replace it "
                        "without --force", flag, out);
    return QVL_OK;
}

qvl_status qvl_quantize_gguf(const qvl_quantize_args *a, qvl_error *err) {
    qvl_model_files files;
    qvl_status st = qvl_model_files_find(a->model, a->mmproj, &files, err);
    if (st != QVL_OK) return st;
    qvl_qwen3vl_config cfg;
    qvl_weights *w = NULL;
    if (a->mmproj_out && !strcmp(a->out, a->mmproj_out))
        st = qvl_fail(err, QVL_E_INVALID, "--out and --mmproj-out name the same file");
    if (st == QVL_OK) st = check_out("--out", a->out, &files, a->force, err);
    if (st == QVL_OK && a->mmproj_out)
        st = check_out("--mmproj-out", a->mmproj_out, &files, a->force, err);
    if (st == QVL_OK) st = qvl_model_files_open(&files, &cfg, &w, err);
    qvl_qwen3vl_export_stats stats = {0};
    if (st == QVL_OK) {
        const qvl_qwen3vl_export x = {.files = &files, .cfg = &cfg, .w = w,
                                      .weights = a->weights, .threads = a->threads,
                                      .out = a->out, .mmproj_out = a->mmproj_out};
        st = qvl_qwen3vl_gguf_export(&x, &stats, err);
    }
    if (st == QVL_OK) {
        fprintf(stderr, "qvl quantize: wrote %s (%zu tensors: ", a->out, stats.tensors[0]);
        qvl_quantize_print_mix(stderr, stats.by_dtype[0]);
        if (a->mmproj_out) {
            fprintf(stderr, ") and %s (%zu tensors: ", a->mmproj_out, stats.tensors[1]);
            qvl_quantize_print_mix(stderr, stats.by_dtype[1]);
        }
        fprintf(stderr, "); --weights %s converted %zu of the source's tensors\n", a->weights,
                stats.converted);
        if (!a->mmproj_out && cfg.has_vision)
            fprintf(stderr, "qvl quantize: the vision tower was not written (--mmproj-out "
                    "MMPROJ.gguf writes it)\n");
    }
    qvl_weights_close(w);
    qvl_model_files_free(&files);
    return st;
}
