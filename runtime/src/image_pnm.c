/* Binary PGM (P5) and PPM (P6), parsed here: a text header of three numbers (width, height,
 * maxval 1..65535; whitespace between, '#' comments to the end of a line), one whitespace byte,
 * then the samples, one byte each when maxval < 256, else two big-endian. The values are what
 * Pillow's PpmImagePlugin gives after convert("RGB"): a sample v becomes
 * min(M, round(v / maxval * M)) (round half to even), M = 255, except for P5 with maxval over
 * 255, which Pillow holds as an integer picture (M = 65535) and clips to 255 on the way to RGB.
 * Every declared sample must be in the file. */
#include <math.h>
#include <string.h>

#include "image_formats.h"

static bool pnm_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* One header number at *i: skips whitespace and comments, reads up to 10 digits, and consumes the
 * single whitespace byte that ends it. -1 when malformed. */
static int64_t pnm_token(const uint8_t *p, size_t n, size_t *i) {
    for (;;) {
        while (*i < n && pnm_space(p[*i])) (*i)++;
        if (*i < n && p[*i] == '#') {
            while (*i < n && p[*i] != '\n' && p[*i] != '\r') (*i)++;
            continue;
        }
        break;
    }
    int64_t v = 0;
    int digits = 0;
    while (*i < n && p[*i] >= '0' && p[*i] <= '9') {
        if (++digits > 10) return -1;
        v = v * 10 + (p[*i] - '0');
        (*i)++;
    }
    if (digits == 0 || *i >= n || !pnm_space(p[*i])) return -1;
    (*i)++;
    return v;
}

qvl_status qvl_decode_pnm(qvl_decode_job *job, qvl_image *out, qvl_error *err) {
    const uint8_t *p = job->p;
    const size_t n = job->n;
    const char *what = job->what;
    if (n < 3 || p[0] != 'P' || (p[1] != '5' && p[1] != '6') || !pnm_space(p[2]))
        return qvl_fail(err, QVL_E_PARSE, "%s: not a binary PGM/PPM (P5 or P6)", what);
    const bool colour = p[1] == '6';
    size_t i = 3;
    const int64_t w = pnm_token(p, n, &i), h = pnm_token(p, n, &i), maxval = pnm_token(p, n, &i);
    if (w < 0 || h < 0 || maxval < 0)
        return qvl_fail(err, QVL_E_PARSE, "%s: unreadable PNM header", what);
    if (maxval < 1 || maxval > 65535)
        return qvl_fail(err, QVL_E_PARSE, "%s: PNM maxval %lld is not in 1..65535", what,
                        (long long)maxval);
    qvl_status st = qvl_image_check_size(what, "PNM", w, h, err);
    if (st != QVL_OK) return st;
    const int64_t bands = colour ? 3 : 1, bytes = maxval < 256 ? 1 : 2;
    const int64_t need = w * h * bands * bytes; /* w * h within the pixel limit: no overflow */
    if ((int64_t)(n - i) < need)
        return qvl_fail(err, QVL_E_PARSE, "%s: truncated PNM (less pixel data than %lldx%lld)",
                        what, (long long)w, (long long)h);
    if (job->header_only) {
        out->width = (int32_t)w;
        out->height = (int32_t)h;
        return QVL_OK;
    }
    st = qvl_image_alloc(out, w, h, what, err);
    if (st != QVL_OK) return st;
    const double top = !colour && maxval > 255 ? 65535.0 : 255.0;
    const uint8_t *s = p + i;
    for (int64_t k = 0; k < w * h; k++) {
        if (k % w == 0 && qvl_image_should_stop(job->stop)) { /* between rows */
            qvl_image_free(out);
            return qvl_image_stopped(what, err);
        }
        uint8_t *o = out->rgb + 3 * k;
        for (int64_t b = 0; b < bands; b++, s += bytes) {
            const double v = bytes == 1 ? s[0] : (double)qvl_rd16(s, false);
            double scaled = rint(v / (double)maxval * top);
            if (scaled > top) scaled = top;
            o[b] = (uint8_t)(scaled > 255.0 ? 255.0 : scaled);
        }
        if (!colour) o[1] = o[2] = o[0];
    }
    return QVL_OK;
}
