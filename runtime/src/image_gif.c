/* GIF through giflib: the first frame, as Pillow's GifImagePlugin gives it before convert("RGB").
 * Its canvas is the logical screen grown to hold the frame; what the frame does not cover holds
 * the frame's transparent index when its graphic control extension names one, else index 0.
 * Pillow ignores a colour table that is the grey ramp (entry i = (i, i, i)); indices become
 * colours through the frame's local table, else (also when the local one is a ramp) the global
 * one, and an index past the table is black; with no table left the index is the grey level. Only the records up to the
 * first frame are read, so later frames cost nothing. */
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

/* Reads the first frame's rows into idx (canvas-sized, already filled). */
static int read_frame(GifFileType *gif, uint8_t *idx, int64_t cw) {
    const GifImageDesc *d = &gif->Image;
    const int64_t fw = d->Width, fh = d->Height;
    if (fw == 0 || fh == 0) return GIF_OK;
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    const int npass = d->Interlace ? 4 : 1;
    for (int pass = 0; pass < npass; pass++) {
        const int64_t y0 = d->Interlace ? start[pass] : 0, dy = d->Interlace ? step[pass] : 1;
        for (int64_t y = y0; y < fh; y += dy) {
            uint8_t *row = idx + (size_t)(d->Top + y) * (size_t)cw + (size_t)d->Left;
            if (DGifGetLine(gif, row, d->Width) != GIF_OK) return GIF_ERROR;
        }
    }
    return GIF_OK;
}

qvl_status qvl_decode_gif(const uint8_t *p, size_t n, const char *what, bool header_only,
                          qvl_image *out, qvl_error *err) {
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
    if (st != QVL_OK || header_only) {
        if (st == QVL_OK) out->width = (int32_t)w, out->height = (int32_t)h;
        goto done;
    }
    uint8_t *idx = malloc((size_t)w * (size_t)h);
    if (!idx) {
        st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory for %lldx%lld pixels", what,
                      (long long)w, (long long)h);
        goto done;
    }
    memset(idx, transparent >= 0 ? transparent : 0, (size_t)w * (size_t)h);
    if (read_frame(gif, idx, w) != GIF_OK) {
        free(idx);
        goto giflib_error;
    }
    st = qvl_image_alloc(out, w, h, what, err);
    if (st == QVL_OK) {
        const ColorMapObject *map = NULL;
        if (d->ColorMap && !grey_ramp(d->ColorMap)) map = d->ColorMap;
        else if (gif->SColorMap && !grey_ramp(gif->SColorMap)) map = gif->SColorMap;
        const bool grey = !map;
        for (size_t i = 0; i < (size_t)w * (size_t)h; i++) {
            uint8_t *o = out->rgb + 3 * i;
            const int v = idx[i];
            if (grey) o[0] = o[1] = o[2] = (uint8_t)v;
            else if (v < map->ColorCount)
                o[0] = map->Colors[v].Red, o[1] = map->Colors[v].Green, o[2] = map->Colors[v].Blue;
            else o[0] = o[1] = o[2] = 0;
        }
    }
    free(idx);
    goto done;

giflib_error:
    st = gif_fail(what, gif->Error, err);
done:
    DGifCloseFile(gif, &code);
    return st;
}
