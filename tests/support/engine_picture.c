/* A picture file made ready for an engine (engine_picture.h). */
#include "engine_picture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qvl/file.h"
#include "qvl/image.h"

void test_engine_load_picture(qvl_engine *e, const char *dir, const char *name, qvl_picture *out) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *bytes = NULL;
    size_t n = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(path, 1 << 24, QVL_E_IO, &bytes, &n, &err), QVL_OK);
    qvl_image img;
    assert_int_equal(qvl_image_decode((const unsigned char *)bytes, n, name, &img, &err), QVL_OK);
    free(bytes);
    memset(out, 0, sizeof *out);
    const qvl_picture_rules *rules = qvl_engine_picture_rules(e);
    assert_non_null(rules);
    assert_int_equal(qvl_picture_make(rules, &img, out, &err), QVL_OK);
}
