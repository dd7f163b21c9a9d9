/* Decoding pictures to 8-bit RGB: JPEG (libjpeg-turbo), PNG (libpng), GIF (giflib, first frame),
 * WebP (libwebp, first frame) and binary PGM/PPM, each to the bytes Pillow gives for
 * ImageOps.exif_transpose(Image.open(f)).convert("RGB") as transformers' load_image does: alpha
 * dropped, grey copied to R, G and B, CMYK converted with Pillow's formula, and the orientation
 * applied as Pillow's getexif finds it (EXIF: JPEG APP1, PNG eXIf or "Raw profile type exif"
 * text, WebP EXIF; else XMP: PNG iTXt, JPEG APP1, WebP XMP). BMP is refused. */
#ifndef QVL_IMAGE_H
#define QVL_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pictures declaring more pixels than this are refused before decoding (a decompression bomb
 * guard: a 43-byte GIF can declare a 130-megapixel canvas). 8192 x 8192: four times the largest
 * picture Qwen3-VL's processor keeps (max_pixels 16,777,216; larger ones are scaled down), and
 * above a 61-megapixel camera's. The environment variable QVL_IMAGE_MAX_PIXELS=N changes it
 * at run time (1 <= N <= QVL_IMAGE_MAX_PIXELS_CEILING); build with -DQVL_IMAGE_MAX_PIXELS=N to
 * change the default. */
#ifndef QVL_IMAGE_MAX_PIXELS
#define QVL_IMAGE_MAX_PIXELS 67108864LL
#endif
/* The environment cannot raise the limit past this: 3 bytes a pixel stays under 2^31, which the
 * decoders' int row and size arithmetic needs. */
#define QVL_IMAGE_MAX_PIXELS_CEILING 536870911LL
/* max(w, h) / min(w, h) above this is refused (the model's processor refuses it too). */
#define QVL_IMAGE_MAX_ASPECT 200

/* Interleaved RGB, row-major: pixel (x, y) channel c is rgb[(y * width + x) * 3 + c]. */
typedef struct qvl_image {
    int32_t width, height;
    uint8_t *rgb;
} qvl_image;

/* Read and decode a file. Errors name the file: unreadable, empty, unknown format, truncated,
 * zero-sized, too many pixels (qvl_image_max_pixels(), or more than a PNG, sequential JPEG or PNM
 * of that many bytes can hold at all), aspect ratio over QVL_IMAGE_MAX_ASPECT. Also refuses (one
 * line naming the path) a path that is not a regular file or a file over 2 GiB. */
qvl_status qvl_image_load(const char *path, qvl_image *out, qvl_error *err);
/* The same from memory; `what` names the source in messages. */
qvl_status qvl_image_decode(const void *data, size_t size, const char *what, qvl_image *out,
                            qvl_error *err);
/* Asked while a picture decodes whether to give up (the server's per-request deadline, a client
 * that left). should_stop(arg) returning true stops the decode with QVL_E_LIMIT and a message
 * saying it was stopped. Called from the decoding thread only. */
typedef struct qvl_image_stop {
    bool (*should_stop)(void *arg);
    void *arg;
} qvl_image_stop;
/* qvl_image_decode that asks `stop` (may be NULL: never stop) whether to go on: before and after
 * decoding and during it (JPEG per row of MCUs and per output row, PNG per row of each pass and
 * per ancillary chunk, GIF and PGM/PPM per row, WebP per 256 KiB of frame data). */
qvl_status qvl_image_decode_stoppable(const void *data, size_t size, const char *what,
                                      const qvl_image_stop *stop, qvl_image *out, qvl_error *err);
/* The size a decode would give (EXIF orientations 5-8 swap the sides) from the headers alone,
 * with the same size checks and errors as qvl_image_decode; pixels are not decoded, so a picture
 * whose data is corrupt past its header passes here and fails in qvl_image_decode. */
qvl_status qvl_image_probe(const void *data, size_t size, const char *what, int32_t *width,
                           int32_t *height, qvl_error *err);
void qvl_image_free(qvl_image *img);
/* The pixel limit in force: QVL_IMAGE_MAX_PIXELS from the environment when it holds a whole
 * number in range, else the built-in QVL_IMAGE_MAX_PIXELS. */
int64_t qvl_image_max_pixels(void);

/* EXIF orientation (1..8) stored in a JPEG's first APP1 Exif segment; 1 when there is none or the
 * data is not a JPEG or the tag is malformed. */
int qvl_jpeg_exif_orientation(const void *data, size_t size);
/* Rotate/flip img in place so that an image stored with EXIF orientation o (1..8) is upright
 * (o = 1 or out of range: unchanged). */
qvl_status qvl_image_apply_orientation(qvl_image *img, int o, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
