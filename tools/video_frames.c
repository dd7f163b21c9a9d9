/* Videos given as frames (video_frames.h). */
#define _POSIX_C_SOURCE 200809L

#include "video_frames.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "qvl/file.h"
#include "qvl/image.h"

bool video_frames_is_picture(const char *name) {
    static const char *const ext[] = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".ppm", ".pgm"};
    const char *dot = strrchr(name, '.');
    if (name[0] == '.' || !dot) return false;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (strcasecmp(dot, ext[i]) == 0) return true;
    return false;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "dir/name[0..len)" (or the name alone without dir) appended; *cap is the array's room. */
static qvl_status add_file(char ***files, size_t *n, size_t *cap, const char *dir,
                           const char *name, size_t len, qvl_error *err) {
    if (*n >= VIDEO_FRAMES_MAX_FILES)
        return qvl_fail(err, QVL_E_LIMIT, "more than %d frames", VIDEO_FRAMES_MAX_FILES);
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        char **grown = realloc(*files, c * sizeof *grown);
        if (!grown) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        *files = grown;
        *cap = c;
    }
    size_t dl = dir ? strlen(dir) + 1 : 0;
    char *p = malloc(dl + len + 1);
    if (!p) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (dir) {
        memcpy(p, dir, dl - 1);
        p[dl - 1] = '/';
    }
    memcpy(p + dl, name, len);
    p[dl + len] = '\0';
    (*files)[(*n)++] = p;
    return QVL_OK;
}

qvl_status video_frames_list(const char *source, char ***files, size_t *n, qvl_error *err) {
    struct stat sb;
    size_t cap = *n;
    qvl_status st = QVL_OK;
    if (stat(source, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(source);
        if (!d) return qvl_fail(err, QVL_E_IO, "cannot read the directory: %s", strerror(errno));
        for (struct dirent *e = readdir(d); st == QVL_OK && e; e = readdir(d))
            if (video_frames_is_picture(e->d_name))
                st = add_file(files, n, &cap, source, e->d_name, strlen(e->d_name), err);
        closedir(d);
        if (st == QVL_OK && *n > 1) qsort(*files, *n, sizeof **files, by_name);
        if (st == QVL_OK && *n == 0)
            st = qvl_fail(err, QVL_E_INVALID, "no picture files (png, jpg, webp, gif, ppm, pgm) "
                          "in the directory");
        return st;
    }
    for (const char *p = source; st == QVL_OK;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0) return qvl_fail(err, QVL_E_INVALID, "an empty frame name in the list");
        st = add_file(files, n, &cap, NULL, p, len, err);
        if (!comma) break;
        p = comma + 1;
    }
    return st;
}

qvl_status video_frames_probe(char *const *files, const int64_t *kept, int64_t n_kept, int32_t *w,
                              int32_t *h, qvl_error *err) {
    for (int64_t k = 0; k < n_kept; k++) {
        const char *f = files[kept[k]];
        char *data = NULL;
        size_t size = 0;
        int32_t fw = 0, fh = 0;
        qvl_status st = qvl_read_file(f, (size_t)INT32_MAX, QVL_E_IO, &data, &size, err);
        if (st == QVL_OK) st = qvl_image_probe(data, size, f, &fw, &fh, err);
        free(data);
        if (st != QVL_OK) return st;
        if (k == 0) {
            *w = fw;
            *h = fh;
        } else if (fw != *w || fh != *h) {
            return qvl_fail(err, QVL_E_INVALID, "%s is %dx%d but %s is %dx%d: frames of one size "
                            "needed", f, fw, fh, files[kept[0]], *w, *h);
        }
    }
    return QVL_OK;
}
