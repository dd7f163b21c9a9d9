# libqvl-core: dtypes, conversions, tensor descriptors, and the op shape rules.
qvl_add_test(test_dtype SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_dtype.c LIBS m)
qvl_add_test(test_ops_infer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_infer.c)
# The data checks every backend calls (indices, segment bounds, `at`): backend_helpers.h.
qvl_add_test(test_data_check SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_data_check.c)
