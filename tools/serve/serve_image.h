/* Pictures of a request: an image_url (a data: URL, or a file under --image-dir) decoded and
 * preprocessed for the vision encoder. Nothing is ever fetched from the network. */
#ifndef QVL_SERVE_IMAGE_H
#define QVL_SERVE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/image_preprocess.h"
#include "qvl/sha256.h"
#include "serve_budget.h"

typedef struct serve_image {
    qvl_image_grid grid; /* in patches */
    float *pixels;       /* [patches, 3*temporal*patch*patch] f32 (qvl_image_preprocess);
                          * NULL once the prefill has consumed them */
    int64_t n_rows;      /* patches */
    int64_t n_tokens;    /* merged tokens the picture takes in the prompt */
    /* SHA-256 of the preprocessing parameters, grid and pixels: prefix reuse tells pictures
     * apart by it (serve_prefix.h). Stays when the pixels are freed. */
    uint8_t digest[QVL_SHA256_BYTES];
    serve_budget *budget; /* where `reserved` is counted (NULL: nowhere) */
    int64_t reserved;     /* bytes of the budget held for the pixels */
} serve_image;

/* Free the pixels and give their bytes back to the budget (grid, tokens and digest stay).
 * Idempotent. */
void serve_image_free(serve_image *im);

/* Decode standard base64 (ASCII whitespace is skipped, '=' padding optional) into out, which
 * holds at least n / 4 * 3 + 3 bytes. Returns the decoded length, or -1 on a character
 * outside the alphabet, data after padding, or a dangling final character. */
int64_t serve_base64_decode(const char *in, size_t n, unsigned char *out);

/* Why a picture's decode (or its wait for budget) stopped early. */
typedef enum serve_image_stop {
    SERVE_IMAGE_GO_ON = 0,
    SERVE_IMAGE_DEADLINE,    /* the request's deadline passed (--request-timeout) */
    SERVE_IMAGE_CLIENT_GONE, /* the client closed the connection */
    SERVE_IMAGE_STOPPING,    /* the server is shutting down */
} serve_image_stop;

/* One request's decoding conditions, owned by its connection thread: the memory budget, the
 * deadline, how to tell that the client left, and (out) why a decode stopped. */
typedef struct serve_image_guard {
    serve_budget *budget;           /* NULL: pictures are not counted */
    double deadline;                /* CLOCK_MONOTONIC seconds (serve_job_now()); 0: none */
    bool (*client_gone)(void *arg); /* NULL: never */
    void *client_arg;
    double next_client_check;       /* the socket is looked at once per interval, not per poll */
    serve_image_stop why;           /* set when a stop was asked for */
} serve_image_guard;

/* Whether a decode or wait guarded so should stop now (records why in g->why). */
bool serve_image_should_stop(serve_image_guard *g);

/* Bytes a w x h picture (as qvl_image_probe reports it) reserves while it is decoded and
 * preprocessed to `grid`, and the part of those kept until the prefill (its f32 pixels). */
int64_t serve_image_decode_bytes(int64_t w, int64_t h, const qvl_image_grid *grid,
                                 const qvl_preprocess_config *pc);
int64_t serve_image_held_bytes(const qvl_image_grid *grid, const qvl_preprocess_config *pc);

typedef struct serve_image_limits {
    const qvl_preprocess_config *pc;
    serve_image_guard *guard; /* NULL: no budget, deadline or client check */
    const char *image_dir;  /* real path of --image-dir, or NULL: no local files */
    size_t max_file_bytes;  /* largest local file read */
    int64_t token_budget;   /* tokens the picture may take at most */
} serve_image_limits;

/* url -> *out. On failure returns the HTTP status (400 for the client's mistakes, 500 when out
 * of memory, 503 when stopped: lim->guard->why says why) and writes a one-line reason into
 * msg; 0 on success. */
int serve_image_from_url(const char *url, const serve_image_limits *lim, serve_image *out,
                         char *msg, size_t msg_len);

#endif
