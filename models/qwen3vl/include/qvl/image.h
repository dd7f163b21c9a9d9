/* Decoding pictures to 8-bit RGB: PNG, JPEG, BMP, GIF (first frame) and PNM through stb_image.
 * Alpha is dropped (the colour channels are kept as stored, like PIL's convert("RGB") in
 * transformers' load_image), grey becomes R = G = B, and a JPEG's EXIF orientation is applied so
 * the pixels are the way the picture is meant to be seen (load_image's exif_transpose). */
#ifndef QVL_IMAGE_H
#define QVL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pictures with more pixels than this are refused before decoding (a decompression bomb
 * guard; the same bound as PIL's DecompressionBombError: 2 x 89,478,485). */
#define QVL_IMAGE_MAX_PIXELS 178956970LL
/* max(w, h) / min(w, h) above this is refused (the model's processor refuses it too). */
#define QVL_IMAGE_MAX_ASPECT 200

/* Interleaved RGB, row-major: pixel (x, y) channel c is rgb[(y * width + x) * 3 + c]. */
typedef struct qvl_image {
    int32_t width, height;
    uint8_t *rgb;
} qvl_image;

/* Read and decode a file. Errors name the file: unreadable, empty, unknown format, truncated,
 * zero-sized, too many pixels, aspect ratio over QVL_IMAGE_MAX_ASPECT. */
qvl_status qvl_image_load(const char *path, qvl_image *out, qvl_error *err);
/* The same from memory; `what` names the source in messages. */
qvl_status qvl_image_decode(const void *data, size_t size, const char *what, qvl_image *out,
                            qvl_error *err);
void qvl_image_free(qvl_image *img);

/* EXIF orientation (1..8) stored in a JPEG's APP1 segment; 1 when there is none or the data is
 * not a JPEG or the tag is malformed. */
int qvl_jpeg_exif_orientation(const void *data, size_t size);
/* Rotate/flip img in place so that an image stored with EXIF orientation o (1..8) is upright
 * (o = 1 or out of range: unchanged). */
qvl_status qvl_image_apply_orientation(qvl_image *img, int o, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
