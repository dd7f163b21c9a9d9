/* A shared object that loads fine but is not a qvl backend: no qvl_backend_entry symbol. */
#include "qvl/backend_helpers.h"

QVL_EXPORT int qvl_test_not_a_backend(void) { return 42; }
