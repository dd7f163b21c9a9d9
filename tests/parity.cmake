# Parity with Hugging Face transformers on the committed fixtures, and the qvl CLI.
pkg_check_modules(CJSON_TEST REQUIRED IMPORTED_TARGET libcjson)
qvl_add_test(test_parity SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_parity.c
  LIBS qvl-qwen3vl qvl-test-support PkgConfig::CJSON_TEST m)
add_dependencies(test_parity qvl-reference)
qvl_add_test(test_text_stream SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_text_stream.c LIBS qvl-runtime)
add_test(NAME cli_qvl COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_qvl.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR} ${QVL_SHARED_DATA_DIR})
set_tests_properties(cli_qvl PROPERTIES TIMEOUT 600)
# The same parity on the minimal backend written from docs/writing-a-backend.md, and on the
# reference with its fused ops off (plugins files from minimal_backend.cmake).
add_dependencies(test_parity qvl-minimal)
add_test(NAME test_parity_minimal COMMAND test_parity)
set_tests_properties(test_parity_minimal PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PLUGINS=${QVL_MIN_PLUGINS};QVL_PARITY_BACKENDS=minimal")
add_test(NAME test_parity_reference_unfused COMMAND test_parity)
set_tests_properties(test_parity_reference_unfused PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PLUGINS=${QVL_NOFUSE_PLUGINS};QVL_PARITY_BACKENDS=reference")
