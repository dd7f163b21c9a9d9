/* What a GGUF model brings besides its weights and config: which files a directory holds, the
 * tokenizer, the chat template and the image processor's settings (qvl/qwen3vl_gguf.h). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "qvl/qwen3vl_gguf.h"
#include "qvl/tokenizer_lists.h"

static bool has_gguf_suffix(const char *name) {
    const size_t n = strlen(name);
    return n >= 5 && strcasecmp(name + n - 5, ".gguf") == 0;
}

bool qvl_is_gguf_path(const char *path) {
    if (!path) return false;
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) return has_gguf_suffix(path);
    if (has_gguf_suffix(path)) return true;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char magic[4] = {0};
    const bool gguf = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(f);
    return gguf;
}

static char *join(const char *dir, const char *name) {
    const size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

qvl_status qvl_gguf_dir_files(const char *dir, char **model, char **mmproj, qvl_error *err) {
    *model = *mmproj = NULL;
    DIR *d = opendir(dir);
    if (!d) return qvl_fail(err, QVL_E_IO, "%s: cannot read the directory", dir);
    char *names[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* [mmproj?][first, second] */
    size_t count[2] = {0, 0};
    qvl_status st = QVL_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.' || !has_gguf_suffix(e->d_name)) continue;
        const int k = strstr(e->d_name, "mmproj") != NULL;
        if (count[k] < 2 && !(names[k][count[k]] = strdup(e->d_name))) {
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
            break;
        }
        count[k]++;
    }
    closedir(d);
    if (st == QVL_OK && count[0] == 0 && count[1] == 0)
        st = qvl_fail(err, QVL_E_NOT_FOUND, "%s: no GGUF file", dir);
    else if (st == QVL_OK && count[0] != 1)
        st = qvl_fail(err, QVL_E_INVALID, "%s: %s model GGUF file%s (%s%s%s): name the model "
                      "with -m FILE.gguf and its vision part with --mmproj FILE.gguf", dir,
                      count[0] ? "more than one" : "no", count[0] ? "s" : "",
                      count[0] ? names[0][0] : "only mmproj files", count[0] ? ", " : "",
                      count[0] ? names[0][1] : "");
    else if (st == QVL_OK && count[1] > 1)
        st = qvl_fail(err, QVL_E_INVALID, "%s: more than one mmproj GGUF file (%s, %s): name "
                      "one with --mmproj FILE.gguf", dir, names[1][0], names[1][1]);
    if (st == QVL_OK && !(*model = join(dir, names[0][0])))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK && count[1] && !(*mmproj = join(dir, names[1][0])))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int k = 0; k < 2; k++) free(names[k][0]), free(names[k][1]);
    if (st != QVL_OK) {
        free(*model);
        free(*mmproj);
        *model = *mmproj = NULL;
    }
    return st;
}

qvl_status qvl_qwen3vl_gguf_tokenizer(const qvl_gguf *g, qvl_tokenizer **out, qvl_error *err) {
    *out = NULL;
    const char *path = qvl_gguf_path(g);
    qvl_gguf_str model, pre;
    const qvl_gguf_value *tokens = NULL, *types = NULL, *merges = NULL;
    qvl_status st = qvl_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st == QVL_OK) st = qvl_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err);
    if (st == QVL_OK)
        st = qvl_gguf_get_array(g, "tokenizer.ggml.tokens", QVL_GGUF_STRING, &tokens, err);
    if (st == QVL_OK)
        st = qvl_gguf_get_array(g, "tokenizer.ggml.merges", QVL_GGUF_STRING, &merges, err);
    if (st == QVL_OK && qvl_gguf_find(g, "tokenizer.ggml.token_type")) {
        st = qvl_gguf_get_array(g, "tokenizer.ggml.token_type", QVL_GGUF_TYPE_COUNT, &types, err);
        if (st == QVL_OK && types->v.arr.count != tokens->v.arr.count)
            st = qvl_fail(err, QVL_E_INVALID, "%s: tokenizer.ggml.token_type has %llu entries "
                          "for %llu tokens", path, (unsigned long long)types->v.arr.count,
                          (unsigned long long)tokens->v.arr.count);
    }
    if (st != QVL_OK) return st;
    const size_t nt = (size_t)tokens->v.arr.count, nm = (size_t)merges->v.arr.count;
    char *model_s = qvl_gguf_str_dup(model), *pre_s = qvl_gguf_str_dup(pre);
    qvl_str *tok = malloc((nt ? nt : 1) * sizeof *tok);
    qvl_str *mer = malloc((nm ? nm : 1) * sizeof *mer);
    int32_t *ty = types ? malloc((nt ? nt : 1) * sizeof *ty) : NULL;
    if (!model_s || !pre_s || !tok || !mer || (types && !ty)) {
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nt; i++) {
        qvl_gguf_str s = {0};
        qvl_gguf_arr_str(tokens, i, &s);
        tok[i] = (qvl_str){s.ptr, (size_t)s.len};
        int64_t v = QVL_TOKEN_NORMAL;
        if (types && (!qvl_gguf_arr_int(types, i, &v) || v < INT32_MIN || v > INT32_MAX)) {
            st = qvl_fail(err, QVL_E_INVALID, "%s: tokenizer.ggml.token_type[%zu] is not an "
                          "integer", path, i);
            goto done;
        }
        if (ty) ty[i] = (int32_t)v;
    }
    for (size_t i = 0; i < nm; i++) {
        qvl_gguf_str s = {0};
        qvl_gguf_arr_str(merges, i, &s);
        mer[i] = (qvl_str){s.ptr, (size_t)s.len};
    }
    const qvl_tokenizer_lists l = {.model = model_s, .pre = pre_s, .tokens = tok, .n_tokens = nt,
                                   .types = ty, .merges = mer, .n_merges = nm};
    st = qvl_tokenizer_from_lists(&l, path, out, err);
done:
    free(model_s);
    free(pre_s);
    free(tok);
    free(mer);
    free(ty);
    return st;
}

qvl_status qvl_qwen3vl_gguf_chat_template(const qvl_gguf *g, char **out, qvl_error *err) {
    *out = NULL;
    if (!qvl_gguf_find(g, "tokenizer.chat_template")) return QVL_OK;
    qvl_gguf_str s;
    qvl_status st = qvl_gguf_get_str(g, "tokenizer.chat_template", &s, err);
    if (st != QVL_OK) return st;
    if (memchr(s.ptr, '\0', (size_t)s.len))
        return qvl_fail(err, QVL_E_INVALID, "%s: tokenizer.chat_template holds a NUL byte",
                        qvl_gguf_path(g));
    if (!(*out = qvl_gguf_str_dup(s))) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    return QVL_OK;
}

qvl_status qvl_qwen3vl_gguf_preprocess(const qvl_gguf *g, const qvl_vision_config *v,
                                       qvl_preprocess_config *out, qvl_error *err) {
    qvl_preprocess_config_default(v, out);
    static const char *const keys[2] = {"clip.vision.image_mean", "clip.vision.image_std"};
    for (int k = 0; k < 2; k++) {
        const qvl_gguf_value *a = NULL;
        if (!qvl_gguf_find(g, keys[k])) continue;
        qvl_status st = qvl_gguf_get_array(g, keys[k], QVL_GGUF_TYPE_COUNT, &a, err);
        if (st != QVL_OK) return st;
        double *dst = k ? out->image_std : out->image_mean;
        for (uint64_t i = 0; i < 3; i++) {
            double x = 0;
            if (a->v.arr.count != 3 || !qvl_gguf_arr_float(a, i, &x) || !(x > -1e6 && x < 1e6) ||
                (k == 1 && !(x > 0)))
                return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must hold 3 numbers%s",
                                qvl_gguf_path(g), keys[k], k ? " above 0" : "");
            dst[i] = x;
        }
    }
    return QVL_OK;
}
