#include "test_image_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

uint8_t *test_png_encode(const uint8_t *px, int w, int h, int channels, size_t *n) {
    static const png_uint_32 formats[5] = {0, PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB,
                                           PNG_FORMAT_RGBA};
    if (channels < 1 || channels > 4) return NULL;
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = formats[channels];
    png_alloc_size_t size = 0;
    if (!png_image_write_to_memory(&img, NULL, &size, 0, px, 0, NULL)) return NULL;
    uint8_t *out = malloc(size);
    if (!out || !png_image_write_to_memory(&img, out, &size, 0, px, 0, NULL)) {
        free(out);
        png_image_free(&img);
        return NULL;
    }
    *n = size;
    return out;
}

uint8_t *test_jpeg_encode(const uint8_t *rgb, int w, int h, int quality, size_t *n) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e); /* the inputs are the test's own: an error exits */
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buf, &size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * (size_t)w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *out = malloc(size);
    if (out) memcpy(out, buf, size);
    free(buf);
    *n = size;
    return out;
}
