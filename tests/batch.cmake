# Several sequences on one model's weights, decoded in one batched step (qvl_model_decode_batch),
# against each sequence decoded alone, on every parity backend.
qvl_add_test(test_decode_batch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_decode_batch.c
  LIBS qvl-qwen3vl qvl-test-support m)
add_dependencies(test_decode_batch qvl-reference)
