# Threaded weight conversion at load (runtime/src/weight_convert.c).
qvl_add_test(test_weight_convert SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_weight_convert.c
  LIBS qvl-runtime)
