# Threaded weight conversion at load (models/qwen3vl/src/weight_convert.c, a private header).
qvl_add_test(test_weight_convert SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_weight_convert.c
  LIBS qvl-qwen3vl)
target_include_directories(test_weight_convert PRIVATE ${CMAKE_SOURCE_DIR}/models/qwen3vl/src)
