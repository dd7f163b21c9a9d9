# Several sequences on one model's weights, decoded in one batched step (qvl_model_decode_batch),
# against each sequence decoded alone, on every parity backend.
qvl_add_test(test_decode_batch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_decode_batch.c
  LIBS qvl-qwen3vl qvl-test-support m)
add_dependencies(test_decode_batch qvl-reference)
# Greedy ids on the minimal backend, which has no ARGMAX kernel: the model refuses to choose
# them there (qvl_model_set_greedy_vocab says why), and nothing else changes.
add_dependencies(test_decode_batch qvl-minimal)
add_test(NAME test_decode_batch_greedy_minimal COMMAND test_decode_batch)
set_tests_properties(test_decode_batch_greedy_minimal PROPERTIES ENVIRONMENT
  "QVL_PLUGINS=${CMAKE_BINARY_DIR}/tests/plugins-minimal.yaml;QVL_PARITY_BACKENDS=minimal;QVL_TEST_ONLY=greedy_ids_from_the_backend")
# One sequence's cached prefix copied into another (qvl_seq_copy_prefix, what n > 1 choices
# share) against a sequence that prefilled it itself, on every parity backend and KV dtype.
qvl_add_test(test_seq_copy SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_seq_copy.c
  LIBS qvl-qwen3vl qvl-test-support m)
add_dependencies(test_seq_copy qvl-reference)
# The same on the minimal backend (plugins file from minimal_backend.cmake): the copy uses only
# primitive ops that any backend has.
add_dependencies(test_seq_copy qvl-minimal)
add_test(NAME test_seq_copy_minimal COMMAND test_seq_copy)
set_tests_properties(test_seq_copy_minimal PROPERTIES ENVIRONMENT
  "QVL_PLUGINS=${CMAKE_BINARY_DIR}/tests/plugins-minimal.yaml;QVL_PARITY_BACKENDS=minimal")
# Several sequences' prompts in one graph (qvl_model_prefill_batch), against each prompt
# prefilled alone, on every parity backend.
qvl_add_test(test_prefill_batch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_prefill_batch.c
  LIBS qvl-qwen3vl qvl-test-support m)
add_dependencies(test_prefill_batch qvl-reference)
