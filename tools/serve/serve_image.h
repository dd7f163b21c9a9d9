/* Pictures of a request: an image_url (a data: URL, or a file under --image-dir) decoded and
 * preprocessed for the vision encoder. Nothing is ever fetched from the network. */
#ifndef QVL_SERVE_IMAGE_H
#define QVL_SERVE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/engine_picture.h"
#include "serve_budget.h"

/* A request's picture is the engine's (qvl/engine_picture.h); its pixels' bytes are counted
 * against the server's picture budget (serve_budget.h) until qvl_picture_free gives them back. */
typedef qvl_picture serve_image;

/* Decode standard base64 (ASCII whitespace is skipped, '=' padding optional) into out, which
 * holds at least n / 4 * 3 + 3 bytes. Returns the decoded length, or -1 on a character
 * outside the alphabet, data after padding, or a dangling final character. */
int64_t serve_base64_decode(const char *in, size_t n, unsigned char *out);

/* Bytes per pixel a decode may need at its peak: the RGB output (3) plus the largest working
 * buffer a decoder keeps for the whole picture: libwebp's two RGBA canvases (8); a progressive
 * JPEG's coefficients take 6 (a 16-bit coefficient per sample of 3 components), and an EXIF
 * rotation's copy (3) comes after the decoder's buffers are gone. */
#define SERVE_DECODE_BYTES_PER_PIXEL 11

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
    double deadline;                /* CLOCK_MONOTONIC seconds (qvl_job_now()); 0: none */
    bool (*client_gone)(void *arg); /* NULL: never */
    void *client_arg;
    double next_client_check;       /* the socket is looked at once per interval, not per poll */
    serve_image_stop why;           /* set when a stop was asked for */
} serve_image_guard;

/* Whether a decode or wait guarded so should stop now (records why in g->why). */
bool serve_image_should_stop(serve_image_guard *g);
/* The decoders' stop callback asking g (NULL: never stop). */
qvl_image_stop serve_image_stop_of(serve_image_guard *g);

typedef struct serve_image_limits {
    const qvl_picture_rules *rules;
    serve_image_guard *guard; /* NULL: no budget, deadline or client check */
    const char *image_dir;  /* real path of --image-dir, or NULL: no local files */
    size_t max_file_bytes;  /* largest local file read */
    int64_t token_budget;   /* tokens the picture may take at most */
} serve_image_limits;

/* The bytes (malloc'd) a URL names: a base64 data: URL whose media type starts with `media`
 * ("image/"), or a file under image_dir (a path, or file:///path; NULL image_dir: refused).
 * Nothing is fetched from the network. `what` names the part in messages; name gets the file's
 * path, else `what`. Returns 0, or the HTTP status (400, 500 out of memory) with a one-line
 * reason in msg. */
int serve_url_read(const char *url, const char *what, const char *media, const char *image_dir,
                   size_t max_file_bytes, unsigned char **bytes, size_t *n, char *name,
                   size_t name_len, char *msg, size_t msg_len);

/* Reserve `bytes` of g's budget for out (waiting for room, bounded by the guard; g NULL or
 * without a budget: nothing is counted): out's accounting fields then give them back when
 * qvl_picture_free frees it. Returns 0 or the HTTP status with msg (400 over the whole
 * budget, 503 when stopped). */
int serve_image_reserve(serve_image_guard *g, int64_t bytes, const char *what, serve_image *out,
                        char *msg, size_t msg_len);
/* The 503 and its one line for a decode that stopped early (g->why). */
int serve_image_stopped(const serve_image_guard *g, const char *what, char *msg, size_t msg_len);

/* url -> *out. On failure returns the HTTP status (400 for the client's mistakes, 500 when out
 * of memory, 503 when stopped: lim->guard->why says why) and writes a one-line reason into
 * msg; 0 on success. */
int serve_image_from_url(const char *url, const serve_image_limits *lim, serve_image *out,
                         char *msg, size_t msg_len);

#endif
