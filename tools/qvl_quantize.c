/* qvl quantize: convert a model directory's weights once (--weights q8_0, q4_k_m, f16, ...) and
 * save the result as a model directory that `qvl run` maps and uses in place, so no launch
 * repeats the conversion. The file format (safetensors, quantised tensors as U8 described in
 * __metadata__) is in docs/QUANT.md and runtime/include/qvl/safetensors.h. With --out FILE.gguf
 * it writes llama.cpp's GGUF files instead (qvl_quantize_gguf.c). */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "qvl/file.h"
#include "qvl/dir_write.h"
#include "qvl/file_write.h"
#include "qvl/log.h"
#include "qvl/model_copy.h"
#include "qvl/qwen3vl_gguf.h"
#include "qvl/safetensors.h"
#include "qvl/weight_convert.h"
#include "qvl/weight_mix.h"
#include "qvl/weights.h"
#include "qvl_commands.h"
#include "qvl/dtype_mix.h"
#include "qvl_quantize.h"

/* Files a model directory may hold beside its weights, copied unchanged when present. */
static const char *const companions[] = {
    "config.json",           "generation_config.json", "preprocessor_config.json",
    "tokenizer.json",        "tokenizer_config.json",  "special_tokens_map.json",
    "chat_template.jinja",   "chat_template.json",     "video_preprocessor_config.json",
    "vocab.json",            "merges.txt",
};
#define COMPANION_MAX_BYTES ((size_t)256 << 20)

/* One tensor of the output, in file order. */
typedef struct out_tensor {
    const qvl_st_tensor *src;
    qvl_dtype to;
    double sums[2]; /* squared error and squared source, over the chunks converted so far */
} out_tensor;

typedef struct quant_job {
    out_tensor *t;
    int threads;
    size_t n_converted;
} quant_job;

/* The writer asks for one chunk of a converted tensor: convert the source elements behind it
 * (chunks start on 256-element boundaries, whole blocks of any source dtype). The tensor's
 * RMS error is printed with its last chunk. */
static qvl_status fill_converted(void *user, size_t index, uint64_t byte_offset, void *dst,
                                 size_t nbytes, qvl_error *err) {
    quant_job *j = user;
    out_tensor *o = &j->t[index];
    bool last = false;
    qvl_status st = qvl_convert_piece(o->src, o->to, byte_offset, dst, nbytes, j->threads,
                                      o->sums, &last, err);
    if (st == QVL_OK && last) {
        qvl_print_conversion(60, o->src->name, o->src, o->to, o->sums);
        j->n_converted++;
    }
    return st;
}

/* --out: a new directory, an empty one, or (with --force) one holding only regular files, as a
 * model directory does; never the source, a symbolic link, or a directory holding links or
 * subdirectories (someone else arranged it: it is not a model qvl would replace). The output
 * is written beside it and moved into place at the end (qvl/dir_write.h). */
static qvl_status check_out(const char *src, const char *out, bool force, qvl_error *err) {
    struct stat s_src, s_out;
    if (stat(src, &s_src) != 0)
        return qvl_fail(err, QVL_E_NOT_FOUND, "model directory not found: %s", src);
    if (lstat(out, &s_out) != 0) {
        if (errno != ENOENT) return qvl_fail(err, QVL_E_IO, "--out %s: %s", out, strerror(errno));
        return QVL_OK;
    }
    if (S_ISLNK(s_out.st_mode))
        return qvl_fail(err, QVL_E_INVALID, "--out %s is a symbolic link: give a real directory",
                        out);
    if (!S_ISDIR(s_out.st_mode))
        return qvl_fail(err, QVL_E_INVALID, "--out %s exists and is not a directory", out);
    if (s_out.st_dev == s_src.st_dev && s_out.st_ino == s_src.st_ino)
        return qvl_fail(err, QVL_E_INVALID,
                        "--out %s is the source model directory: choose another", out);
    DIR *d = opendir(out);
    if (!d) return qvl_fail(err, QVL_E_IO, "--out %s: cannot list: %s", out, strerror(errno));
    qvl_status st = QVL_OK;
    size_t files = 0;
    for (struct dirent *e; st == QVL_OK && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = qvl_path_join(out, e->d_name);
        struct stat sb;
        if (!p) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        else if (lstat(p, &sb) != 0)
            st = qvl_fail(err, QVL_E_IO, "--out %s: %.200s: %s", out, e->d_name, strerror(errno));
        else if (S_ISLNK(sb.st_mode))
            st = qvl_fail(err, QVL_E_INVALID, "--out %s holds a symbolic link (%.200s): refusing "
                          "to write there", out, e->d_name);
        else if (!S_ISREG(sb.st_mode))
            st = qvl_fail(err, QVL_E_INVALID, "--out %s holds %s (%.200s): not a model directory "
                          "to replace", out, qvl_file_kind(sb.st_mode), e->d_name);
        else files++;
        free(p);
    }
    closedir(d);
    if (st == QVL_OK && files && !force)
        st = qvl_fail(err, QVL_E_INVALID, "--out %s already holds %zu file(s), a model perhaps: "
                      "refusing to replace them without --force", out, files);
    return st;
}

/* The companions the source holds, under the link rule of qvl/model_copy.h. */
static qvl_status copy_companions(const char *src, const char *out, size_t *copied,
                                  qvl_error *err) {
    *copied = 0;
    for (size_t i = 0; i < sizeof companions / sizeof companions[0]; i++) {
        char *to = qvl_path_join(out, companions[i]);
        bool done = false;
        qvl_status st = to ? qvl_model_file_copy(src, companions[i], to, COMPANION_MAX_BYTES,
                                                 &done, err)
                           : qvl_fail(err, QVL_E_NOMEM, "out of memory");
        free(to);
        if (st != QVL_OK) return st;
        *copied += done;
    }
    return QVL_OK;
}

/* Each stored tensor's dtype in the output: vectors as stored, matrices as --weights says
 * (q4_k_m: per tensor, weight_mix.c). */
static qvl_status plan_tensors(const qvl_qwen3vl_config *cfg, const qvl_weights *w,
                               const char *weights, out_tensor *plan, qvl_error *err) {
    const bool mix = strcmp(weights, "q4_k_m") == 0;
    qvl_dtype d = QVL_Q4_K;
    if (!mix && (!qvl_dtype_parse(weights, &d) || d == QVL_I32))
        return qvl_fail(err, QVL_E_INVALID, "--weights '%s' is not one of f32, f16, bf16, q8_0, "
                        "q4_k, q6_k, q4_k_m", weights);
    /* F32 tensors first: every other tensor is an even number of bytes, so all stay aligned to
     * their element or block fields in the mapping (safetensors allows no padding). */
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < qvl_weights_count(w); i++) {
            const qvl_st_tensor *t = qvl_weights_at(w, i);
            qvl_dtype to = t->ndim < 2 ? t->dtype
                           : mix       ? qvl_qwen3vl_mix_dtype(cfg, t->name, t->ndim, t->shape,
                                                               t->dtype)
                                       : d;
            if ((to == QVL_F32) != (pass == 0)) continue;
            int64_t row = 1;
            for (int r = 1; r < t->ndim; r++) row *= t->shape[r];
            size_t unused;
            if (t->ndim >= 2 && !qvl_dtype_row_bytes(to, row, &unused))
                return qvl_fail(err, QVL_E_SHAPE, "%s: rows of %lld elements cannot be stored as "
                                "%s (blocks of %zu; --weights q4_k_m falls back per tensor)",
                                t->name, (long long)row, qvl_dtype_name(to),
                                qvl_dtype_block_elems(to));
            plan[k++] = (out_tensor){.src = t, .to = to};
        }
    return QVL_OK;
}

static qvl_status quantize(const char *model, const char *weights, const char *out, bool force,
                           int threads, qvl_error *err) {
    struct stat sb;
    if (stat(model, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return qvl_fail(err, QVL_E_NOT_FOUND, "model directory not found: %s", model);
    char *cfg_path = qvl_path_join(model, "config.json");
    char *out_path = qvl_path_join(out, "model.safetensors"), *tmp_path = NULL;
    qvl_new_dir dir = {0};
    qvl_qwen3vl_config cfg;
    qvl_weights *w = NULL;
    out_tensor *plan = NULL;
    qvl_st_write_tensor *wt = NULL;
    qvl_status st = cfg_path && out_path ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) st = qvl_qwen3vl_config_load(cfg_path, &cfg, err);
    if (st == QVL_OK) st = qvl_weights_open(model, &cfg, &w, err);
    size_t n = qvl_weights_count(w);
    if (st == QVL_OK) {
        plan = calloc(n ? n : 1, sizeof *plan);
        wt = calloc(n ? n : 1, sizeof *wt);
        if (!plan || !wt) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    if (st == QVL_OK) st = plan_tensors(&cfg, w, weights, plan, err);
    if (st == QVL_OK) st = check_out(model, out, force, err);
    if (st == QVL_OK) st = qvl_new_dir_open(out, &dir, err);
    if (st == QVL_OK && !(tmp_path = qvl_path_join(dir.tmp, "model.safetensors")))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    quant_job job = {.t = plan, .threads = threads};
    size_t in_bytes = 0;
    for (size_t i = 0; st == QVL_OK && i < n; i++) {
        const qvl_st_tensor *t = plan[i].src;
        wt[i] = (qvl_st_write_tensor){.name = t->name, .dtype = plan[i].to, .ndim = t->ndim};
        memcpy(wt[i].shape, t->shape, sizeof wt[i].shape);
        if (plan[i].to == t->dtype) wt[i].data = t->data; /* copied as it is */
        else wt[i].fill = fill_converted, wt[i].fill_user = &job;
        in_bytes += t->nbytes;
    }
    const char *meta[] = {"format", "pt", "qvl.weights", weights};
    size_t copied = 0;
    /* the companions first: a refused one stops the command before the long conversion */
    if (st == QVL_OK) st = copy_companions(model, dir.tmp, &copied, err);
    if (st == QVL_OK) st = qvl_safetensors_write(tmp_path, wt, n, meta, 2, err);
    /* everything is written: the directory takes its name now, or a failure removes it */
    if (st == QVL_OK) st = qvl_new_dir_commit(&dir, err);
    else qvl_new_dir_abandon(&dir);
    if (st == QVL_OK && stat(out_path, &sb) == 0) {
        size_t by_dtype[QVL_DTYPE_COUNT] = {0};
        for (size_t i = 0; i < n; i++) by_dtype[plan[i].to]++;
        fprintf(stderr, "qvl quantize: wrote %s (%zu tensors: ", out_path, n);
        qvl_quantize_print_mix(stderr, by_dtype);
        fprintf(stderr, "; --weights %s converted %zu of the source's tensors; %.1f MiB, the "
                "source's weights %.1f MiB) and %zu companion files\n", weights, job.n_converted,
                sb.st_size / 1048576.0, in_bytes / 1048576.0, copied);
    }
    free(wt);
    free(plan);
    qvl_weights_close(w);
    free(cfg_path);
    free(out_path);
    free(tmp_path);
    return st;
}

void qvl_quantize_print_mix(FILE *f, const size_t by_dtype[QVL_DTYPE_COUNT]) {
    char buf[256];
    qvl_dtype_mix(by_dtype, true, ", ", buf, sizeof buf);
    fputs(buf, f);
}

bool qvl_quantize_out_is_gguf(const char *out) {
    const size_t n = out ? strlen(out) : 0;
    return n >= 5 && strcasecmp(out + n - 5, ".gguf") == 0;
}

int qvl_cmd_quantize(int argc, char **argv) {
    const char *model = NULL, *weights = NULL, *out = NULL, *mmproj = NULL, *mmproj_out = NULL;
    int64_t threads = 0;
    bool verbose = false, force = false;
    cli_opt opts[] = {
        {"model", 'm', CLI_STRING, &model, "DIR|FILE.gguf", "the source model: a directory, or "
         "a GGUF file (with --mmproj for its vision tower)", 0, 0, false},
        {"mmproj", 0, CLI_STRING, &mmproj, "FILE.gguf", "the source's vision tower (GGUF)", 0, 0,
         false},
        {"weights", 0, CLI_STRING, &weights, "DTYPE",
         "q8_0, q4_k_m, q4_k, q6_k, f16, bf16 or f32: the matrices' dtype", 0, 0, false},
        {"out", 0, CLI_STRING, &out, "DIR|FILE.gguf", "the model directory to write, or (ending in "
         ".gguf) llama.cpp's text model GGUF (written beside it, moved into place when complete)",
         0, 0, false},
        {"mmproj-out", 0, CLI_STRING, &mmproj_out, "FILE.gguf", "with --out FILE.gguf: the vision "
         "tower's GGUF (llama.cpp's mmproj)", 0, 0, false},
        {"force", 0, CLI_FLAG, &force, NULL, "replace the model an existing --out directory holds, "
         "or existing GGUF files", 0, 0, false},
        {"threads", 't', CLI_INT, &threads, "N", "conversion threads (default: all cores)", 0,
         1024, false},
        {"verbose", 'v', CLI_FLAG, &verbose, NULL, "log details", 0, 0, false},
    };
    const size_t n_opts = sizeof opts / sizeof opts[0];
    size_t n_pos = 0;
    int rc = cli_parse("qvl quantize", opts, n_opts, argc, argv, NULL, 0, &n_pos);
    if (rc == CLI_HELP) {
        cli_print_help(stdout, "usage: qvl quantize -m DIR --weights DTYPE --out DIR2 [options]\n"
                       "       qvl quantize -m DIR|FILE.gguf [--mmproj MM.gguf] --weights DTYPE "
                       "--out OUT.gguf [--mmproj-out MMOUT.gguf]", opts, n_opts);
        return 0;
    }
    if (rc != CLI_OK) return 2;
    if (verbose) qvl_log_level_set(QVL_LOG_INFO);
    if (!model || !weights || !out) {
        fprintf(stderr, "qvl quantize: -m, --weights and --out are required\n");
        return 2;
    }
    if (threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus < 1 ? 1 : cpus;
    }
    qvl_error err = {0};
    const bool gguf = qvl_quantize_out_is_gguf(out);
    if (!gguf && (mmproj_out || mmproj || qvl_is_gguf_path(model))) {
        fprintf(stderr, "qvl quantize: %s goes with --out FILE.gguf (a model directory is written "
                "from a model directory)\n", mmproj_out ? "--mmproj-out" : mmproj ? "--mmproj"
                                                                                  : "a GGUF source");
        return 2;
    }
    if (gguf && mmproj_out && !qvl_quantize_out_is_gguf(mmproj_out)) {
        fprintf(stderr, "qvl quantize: --mmproj-out %s must end in .gguf\n", mmproj_out);
        return 2;
    }
    const qvl_quantize_args qa = {.model = model, .mmproj = mmproj, .weights = weights,
                                  .out = out, .mmproj_out = mmproj_out, .force = force,
                                  .threads = (int)threads};
    qvl_status st = gguf ? qvl_quantize_gguf(&qa, &err)
                         : quantize(model, weights, out, force, (int)threads, &err);
    if (st != QVL_OK) {
        fprintf(stderr, "qvl quantize: %s\n", err.msg);
        return 1;
    }
    return 0;
}
