/* GIF through giflib: the first frame, as Pillow's GifImagePlugin gives it before convert("RGB").
 * Its canvas is the logical screen grown to hold the frame; what the frame does not cover holds
 * the frame's transparent index when its graphic control extension names one, else index 0.
 * Pillow ignores a colour table that is the grey ramp (entry i = (i, i, i)); indices become
 * colours through the frame's local table, else (also when the local one is a ramp) the global
 * one, and an index past the table is black; with no table left the index is the grey level.
 * Only the records up to the first frame are read, so later frames cost nothing. The canvas is
 * written as RGB directly (3 bytes a pixel, the output itself); the frame is read a row at a
 * time. */
#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>

#include "image_formats.h"

typedef struct gif_source {
    const uint8_t *p;
    size_t n, at;
} gif_source;

static int on_read(GifFileType *gif, GifByteType *dst, int len) {
    gif_source *s = gif->UserData;
    size_t k = len < 0 ? 0 : (size_t)len;
    if (k > s->n - s->at) k = s->n - s->at;
    memcpy(dst, s->p + s->at, k);
    s->at += k;
    return (int)k;
}

static bool grey_ramp(const ColorMapObject *m) {
    for (int i = 0; i < m->ColorCount; i++) {
        const GifColorType *c = &m->Colors[i];
        if (c->Red != i || c->Green != i || c->Blue != i) return false;
    }
    return true;
}

static qvl_status gif_fail(const char *what, int code, qvl_error *err) {
    const char *why = GifErrorString(code);
    return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode GIF (%s)", what, why ? why : "error");
}

/* LZW codes are at most 12 bits and the string a code stands for is at most one byte longer
 * than the table has entries: a code of b bits gives at most 2^b pixels, and 2^b / b is largest
 * at b = 12 (341.3 pixels a bit, 2731 a byte). So a frame of w x h pixels needs at least
 * w h / 2731 bytes of image data after its descriptor. */
#define GIF_MAX_PIXELS_PER_BYTE 2731

/* The colour of canvas index v. */
static void index_rgb(const ColorMapObject *map, int v, uint8_t *o) {
    if (!map) o[0] = o[1] = o[2] = (uint8_t)v;
    else if (v < map->ColorCount)
        o[0] = map->Colors[v].Red, o[1] = map->Colors[v].Green, o[2] = map->Colors[v].Blue;
    else o[0] = o[1] = o[2] = 0;
}

/* Fills the canvas (w x h, RGB) with index `fill`, then reads the first frame's rows over it
 * through `line` (the frame's width). */
static int read_frame(GifFileType *gif, const ColorMapObject *map, int fill, uint8_t *line,
                      uint8_t *rgb, int64_t w, int64_t h, const qvl_image_stop *stop,
                      bool *stopped) {
    uint8_t bg[3];
    index_rgb(map, fill, bg);
    for (size_t i = 0; i < (size_t)w * (size_t)h; i++) memcpy(rgb + 3 * i, bg, 3);
    const GifImageDesc *d = &gif->Image;
    const int64_t fw = d->Width, fh = d->Height;
    if (fw == 0 || fh == 0) return GIF_OK;
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    const int npass = d->Interlace ? 4 : 1;
    int rc = GIF_OK;
    for (int pass = 0; pass < npass && rc == GIF_OK; pass++) {
        const int64_t y0 = d->Interlace ? start[pass] : 0, dy = d->Interlace ? step[pass] : 1;
        for (int64_t y = y0; y < fh && rc == GIF_OK; y += dy) {
            if (qvl_image_should_stop(stop)) {
                *stopped = true;
                return GIF_ERROR;
            }
            if ((rc = DGifGetLine(gif, line, d->Width)) != GIF_OK) break;
            uint8_t *row = rgb + ((size_t)(d->Top + y) * (size_t)w + (size_t)d->Left) * 3;
            for (int64_t x = 0; x < fw; x++) index_rgb(map, line[x], row + 3 * x);
        }
    }
    return rc;
}

qvl_status qvl_decode_gif(qvl_decode_job *job, qvl_image *out, qvl_error *err) {
    const uint8_t *p = job->p;
    const size_t n = job->n;
    const char *what = job->what;
    gif_source src = {.p = p, .n = n};
    int code = 0;
    GifFileType *gif = DGifOpen(&src, on_read, &code);
    if (!gif) return gif_fail(what, code, err);
    int transparent = -1;
    qvl_status st = QVL_OK;
    for (;;) {
        GifRecordType rec;
        if (DGifGetRecordType(gif, &rec) != GIF_OK) goto giflib_error;
        if (rec == TERMINATE_RECORD_TYPE) {
            st = qvl_fail(err, QVL_E_PARSE, "%s: GIF holds no picture (no image descriptor)", what);
            goto done;
        }
        if (rec == EXTENSION_RECORD_TYPE) {
            int ext_code = 0;
            GifByteType *ext = NULL;
            if (DGifGetExtension(gif, &ext_code, &ext) != GIF_OK) goto giflib_error;
            /* Graphic control: flags, delay (2 bytes), transparent index; the last one counts. */
            if (ext_code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4)
                transparent = (ext[1] & 1) ? ext[4] : -1;
            while (ext)
                if (DGifGetExtensionNext(gif, &ext) != GIF_OK) goto giflib_error;
            continue;
        }
        if (rec == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(gif) != GIF_OK) goto giflib_error;
            break;
        }
    }
    const GifImageDesc *d = &gif->Image;
    const int64_t right = (int64_t)d->Left + d->Width, bottom = (int64_t)d->Top + d->Height;
    const int64_t w = right > gif->SWidth ? right : gif->SWidth;
    const int64_t h = bottom > gif->SHeight ? bottom : gif->SHeight;
    st = qvl_image_check_size(what, "GIF", w, h, err);
    /* src.at: the bytes giflib has taken so far (up to the frame's LZW code size) */
    if (st == QVL_OK)
        st = qvl_image_check_floor(what, "GIF", d->Width, d->Height,
                                   (int64_t)src.at + (int64_t)d->Width * d->Height /
                                                         GIF_MAX_PIXELS_PER_BYTE,
                                   n, err);
    if (st != QVL_OK || job->header_only) {
        if (st == QVL_OK) out->width = (int32_t)w, out->height = (int32_t)h;
        goto done;
    }
    uint8_t *line = malloc(d->Width > 0 ? (size_t)d->Width : 1);
    if (!line) {
        st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", what);
        goto done;
    }
    st = qvl_image_alloc(out, w, h, what, err);
    if (st == QVL_OK) {
        const ColorMapObject *map = NULL;
        if (d->ColorMap && !grey_ramp(d->ColorMap)) map = d->ColorMap;
        else if (gif->SColorMap && !grey_ramp(gif->SColorMap)) map = gif->SColorMap;
        bool stopped = false;
        if (read_frame(gif, map, transparent >= 0 ? transparent : 0, line, out->rgb, w, h,
                       job->stop, &stopped) != GIF_OK) {
            free(line);
            qvl_image_free(out);
            if (!stopped) goto giflib_error;
            st = qvl_image_stopped(what, err);
            goto done;
        }
    }
    free(line);
    goto done;

giflib_error:
    st = gif_fail(what, gif->Error, err);
done:
    DGifCloseFile(gif, &code);
    return st;
}
