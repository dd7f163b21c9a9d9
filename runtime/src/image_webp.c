/* WebP through libwebp's animation decoder, the way Pillow's WebPImagePlugin reads every WebP
 * (still or animated): the first frame composed on a canvas of the declared size, non-premultiplied
 * RGBA, alpha then dropped by convert("RGB"). The canvas size comes from WebPGetFeatures and is
 * checked before the decoder allocates its two canvas-sized buffers (8 bytes a pixel). WebP has
 * no floor on bytes per pixel that would catch a bomb, so only the pixel limit bounds it. */
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "image_formats.h"

int qvl_webp_exif_orientation(const uint8_t *p, size_t n) {
    WebPData data = {p, n};
    WebPDemuxer *demux = WebPDemux(&data);
    if (!demux) return 1;
    int o = 1;
    WebPChunkIterator it;
    if (WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
        o = qvl_tiff_orientation(it.chunk.bytes, it.chunk.size);
        WebPDemuxReleaseChunkIterator(&it);
    }
    WebPDemuxDelete(demux);
    return o;
}

qvl_status qvl_decode_webp(const uint8_t *p, size_t n, const char *what, bool header_only,
                           qvl_image *out, qvl_error *err) {
    WebPBitstreamFeatures f;
    VP8StatusCode vs = WebPGetFeatures(p, n, &f);
    if (vs != VP8_STATUS_OK)
        return qvl_fail(err, QVL_E_PARSE, "%s: unreadable WebP header (libwebp status %d)", what,
                        (int)vs);
    qvl_status st = qvl_image_check_size(what, "WebP", f.width, f.height, err);
    if (st != QVL_OK) return st;
    if (header_only) {
        out->width = f.width;
        out->height = f.height;
        return QVL_OK;
    }
    WebPData data = {p, n};
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: libwebp version mismatch", what);
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
    if (!dec) return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode WebP (bad container)", what);
    WebPAnimInfo info;
    if (!WebPAnimDecoderGetInfo(dec, &info) || (int64_t)info.canvas_width != f.width ||
        (int64_t)info.canvas_height != f.height || info.frame_count < 1) {
        WebPAnimDecoderDelete(dec);
        return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode WebP (inconsistent canvas)", what);
    }
    const int64_t w = info.canvas_width, h = info.canvas_height;
    uint8_t *rgba = NULL;
    int timestamp = 0;
    if (!WebPAnimDecoderGetNext(dec, &rgba, &timestamp) || !rgba) {
        WebPAnimDecoderDelete(dec);
        return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode WebP (corrupt frame)", what);
    }
    st = qvl_image_alloc(out, w, h, what, err);
    if (st == QVL_OK)
        for (size_t i = 0; i < (size_t)w * (size_t)h; i++) memcpy(out->rgb + 3 * i, rgba + 4 * i, 3);
    WebPAnimDecoderDelete(dec);
    return st;
}
