# A model file truncated while mapped ends qvl with one line, not "Bus error".
qvl_add_test(test_mapped_shrink SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mapped_shrink.c
  LIBS qvl-runtime)
