# qvl-bench and what it relies on: executor profiling, model load statistics and op profile,
# weight conversion at load, backend options over plugins.yaml; and a smoke test of the tool.
qvl_add_test(test_bench_support SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bench_support.c
  LIBS qvl-qwen3vl qvl-test-support m
  DEFS "QVL_REFERENCE_SO=\"$<TARGET_FILE:qvl-reference>\""
       "QVL_TEST_DUMMY_SO=\"$<TARGET_FILE:qvl-test-plugin-dummy>\"")
add_dependencies(test_bench_support qvl-reference qvl-test-plugin-dummy)

add_test(NAME cli_qvl_bench COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_qvl_bench.sh
  $<TARGET_FILE:qvl-bench> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_qvl_bench PROPERTIES TIMEOUT 600)
