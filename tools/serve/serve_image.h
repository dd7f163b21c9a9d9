/* Pictures of a request: an image_url (a data: URL, or a file under --image-dir) decoded and
 * preprocessed for the vision encoder. Nothing is ever fetched from the network. */
#ifndef QVL_SERVE_IMAGE_H
#define QVL_SERVE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/image_preprocess.h"

typedef struct serve_image {
    qvl_image_grid grid; /* in patches */
    float *pixels;       /* [patches, 3*temporal*patch*patch] f32 (qvl_image_preprocess) */
    int64_t n_rows;      /* patches */
    int64_t n_tokens;    /* merged tokens the picture takes in the prompt */
    uint64_t hash;       /* of grid and pixels: prefix reuse tells pictures apart by it */
} serve_image;

void serve_image_free(serve_image *im);

/* Decode standard base64 (ASCII whitespace is skipped, '=' padding optional) into out, which
 * holds at least n / 4 * 3 + 3 bytes. Returns the decoded length, or -1 on a character
 * outside the alphabet, data after padding, or a dangling final character. */
int64_t serve_base64_decode(const char *in, size_t n, unsigned char *out);

typedef struct serve_image_limits {
    const qvl_preprocess_config *pc;
    const char *image_dir;  /* real path of --image-dir, or NULL: no local files */
    size_t max_file_bytes;  /* largest local file read */
    int64_t token_budget;   /* tokens the picture may take at most */
} serve_image_limits;

/* url -> *out. On failure returns the HTTP status (400 for the client's mistakes, 500 when out
 * of memory) and writes a one-line reason into msg; 0 on success. */
int serve_image_from_url(const char *url, const serve_image_limits *lim, serve_image *out,
                         char *msg, size_t msg_len);

#endif
