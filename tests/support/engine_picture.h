/* A picture file made ready for an engine, for the engine tests (cmocka asserts on failure). */
#ifndef QVL_TEST_ENGINE_PICTURE_H
#define QVL_TEST_ENGINE_PICTURE_H

#include "qvl/engine.h"

/* Reads DIR/NAME, decodes it and makes *out under e's picture rules. */
void test_engine_load_picture(qvl_engine *e, const char *dir, const char *name, qvl_picture *out);

#endif
