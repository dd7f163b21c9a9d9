/* Small encoders for tests that need a picture file made on the fly: PNG through libpng's
 * simplified API, baseline JPEG through libjpeg (standard Huffman tables, 4:2:0). Both return a
 * malloc'ed file image, or NULL on failure. */
#ifndef QVL_TEST_IMAGE_WRITE_H
#define QVL_TEST_IMAGE_WRITE_H

#include <stddef.h>
#include <stdint.h>

/* channels: 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA; 8-bit samples, rows packed. */
uint8_t *test_png_encode(const uint8_t *px, int w, int h, int channels, size_t *n);
/* 8-bit RGB rows, packed. */
uint8_t *test_jpeg_encode(const uint8_t *rgb, int w, int h, int quality, size_t *n);

#endif
