# Placement counted before loading (models/qwen3vl/src/model_place_count.c): the counts, -ngl
# auto's choice and the refusal of a whole model that does not fit, on the memfree plugin (the
# reference behind a budget) and a `qvl mkmodel` model.
add_subdirectory(memfree_backend)
qvl_add_test(test_place_fit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_place_fit.c
  LIBS qvl-qwen3vl qvl-test-support m
  DEFS "QVL_MEMFREE_PLUGIN=\"$<TARGET_FILE:qvl-memfree>\""
       "QVL_REFERENCE_PLUGIN=\"$<TARGET_FILE:qvl-reference>\"")
add_dependencies(test_place_fit qvl-memfree qvl-reference)
