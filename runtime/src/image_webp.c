/* WebP as Pillow's WebPImagePlugin reads every WebP (still or animated), through libwebp's
 * animation decoder: the first frame composed on a canvas of the declared size, non-premultiplied
 * RGBA, alpha then dropped by convert("RGB"). For the first frame that decoder clears the canvas
 * to transparent black and decodes the frame into it at its offset, without blending; qvl does
 * the same with libwebp's incremental decoder (same settings: RGBA, no threads), fed the frame's
 * data a piece at a time so that the caller's stop callback is asked between pieces. The canvas
 * size comes from WebPGetFeatures and is checked before anything is allocated. WebP has no floor
 * on bytes per pixel that would catch a bomb, so only the pixel limit bounds it; within one piece
 * of input libwebp decodes without asking. The orientation: the first EXIF and XMP chunks, as
 * Pillow reads them. */
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "image_formats.h"

/* Input handed to the incremental decoder between two questions to the stop callback. Large
 * enough that a lossless frame, which the decoder resumes from its last 16-row checkpoint when
 * a piece ends mid-row, is not decoded twice over. */
#define WEBP_PIECE_BYTES (256 * 1024)

static int chunk_orientation(WebPDemuxer *demux, const char *fourcc, bool xmp) {
    WebPChunkIterator it;
    int tag = QVL_ORIENT_ABSENT;
    if (WebPDemuxGetChunk(demux, fourcc, 1, &it)) {
        if (it.chunk.size > 0) /* Pillow keeps only a non-empty chunk */
            tag = xmp ? qvl_xmp_orientation(it.chunk.bytes, it.chunk.size)
                      : qvl_tiff_orientation_tag(it.chunk.bytes, it.chunk.size);
        WebPDemuxReleaseChunkIterator(&it);
    }
    return tag;
}

/* Decodes the frame's data into the RGBA canvas at its offset. */
static qvl_status decode_frame(const WebPIterator *fr, uint8_t *canvas, int64_t w,
                               const qvl_image_stop *stop, const char *what, qvl_error *err) {
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: libwebp version mismatch", what);
    config.options.use_threads = 0;
    config.output.colorspace = MODE_RGBA;
    config.output.is_external_memory = 1;
    const size_t stride = (size_t)w * 4;
    config.output.u.RGBA.rgba = canvas + (size_t)fr->y_offset * stride + (size_t)fr->x_offset * 4;
    config.output.u.RGBA.stride = (int)stride;
    config.output.u.RGBA.size = stride * (size_t)(fr->height - 1) + (size_t)fr->width * 4;
    WebPIDecoder *idec = WebPIDecode(NULL, 0, &config);
    if (!idec) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", what);
    const uint8_t *data = fr->fragment.bytes;
    const size_t size = fr->fragment.size;
    VP8StatusCode vs = VP8_STATUS_SUSPENDED;
    qvl_status st = QVL_OK;
    for (size_t fed = 0; vs == VP8_STATUS_SUSPENDED && fed < size;) {
        if (qvl_image_should_stop(stop)) {
            st = qvl_image_stopped(what, err);
            break;
        }
        fed += size - fed < WEBP_PIECE_BYTES ? size - fed : WEBP_PIECE_BYTES;
        vs = WebPIUpdate(idec, data, fed);
    }
    WebPIDelete(idec);
    if (st == QVL_OK && vs != VP8_STATUS_OK)
        st = qvl_fail(err, QVL_E_PARSE, "%s: cannot decode WebP (%s frame, libwebp status %d)",
                      what, vs == VP8_STATUS_SUSPENDED ? "truncated" : "corrupt", (int)vs);
    return st;
}

qvl_status qvl_decode_webp(qvl_decode_job *job, qvl_image *out, qvl_error *err) {
    const char *what = job->what;
    WebPBitstreamFeatures f;
    VP8StatusCode vs = WebPGetFeatures(job->p, job->n, &f);
    if (vs != VP8_STATUS_OK)
        return qvl_fail(err, QVL_E_PARSE, "%s: unreadable WebP header (libwebp status %d)", what,
                        (int)vs);
    qvl_status st = qvl_image_check_size(what, "WebP", f.width, f.height, err);
    if (st != QVL_OK) return st;
    WebPData data = {job->p, job->n};
    WebPDemuxer *demux = WebPDemux(&data);
    if (!demux) return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode WebP (bad container)", what);
    const int64_t w = WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH);
    const int64_t h = WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
    WebPIterator fr;
    memset(&fr, 0, sizeof fr);
    if (w != f.width || h != f.height || !WebPDemuxGetFrame(demux, 1, &fr) || fr.width < 1 ||
        fr.height < 1 || fr.x_offset < 0 || fr.y_offset < 0 || fr.x_offset + fr.width > w ||
        fr.y_offset + fr.height > h) {
        WebPDemuxReleaseIterator(&fr);
        WebPDemuxDelete(demux);
        return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode WebP (inconsistent canvas)", what);
    }
    job->orientation = qvl_orientation_pick(chunk_orientation(demux, "EXIF", false),
                                            chunk_orientation(demux, "XMP ", true));
    if (job->header_only) {
        out->width = (int32_t)w;
        out->height = (int32_t)h;
    } else {
        uint8_t *canvas = calloc((size_t)w * (size_t)h, 4); /* transparent black */
        if (!canvas) st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", what);
        if (st == QVL_OK) st = decode_frame(&fr, canvas, w, job->stop, what, err);
        if (st == QVL_OK) st = qvl_image_alloc(out, w, h, what, err);
        if (st == QVL_OK)
            for (size_t i = 0; i < (size_t)w * (size_t)h; i++)
                memcpy(out->rgb + 3 * i, canvas + 4 * i, 3);
        free(canvas);
    }
    WebPDemuxReleaseIterator(&fr);
    WebPDemuxDelete(demux);
    return st;
}
