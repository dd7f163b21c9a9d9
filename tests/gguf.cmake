# GGUF files (runtime/include/qvl/gguf.h) and their tensor types (core/include/qvl/ggml_types.h).
# test_gguf: the reader on small files written by the test, valid and hostile.
qvl_add_test(test_gguf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf.c
  ${CMAKE_CURRENT_LIST_DIR}/support/gguf_build.c LIBS qvl-runtime qvl-test-support m)
target_include_directories(test_gguf PRIVATE ${CMAKE_CURRENT_LIST_DIR}/support)
# test_gguf_write: the writer (qvl/gguf_write.h) read back by the reader, bad additions, a
# failing fill.
qvl_add_test(test_gguf_write SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_write.c
  LIBS qvl-runtime qvl-test-support)
target_include_directories(test_gguf_write PRIVATE ${CMAKE_CURRENT_LIST_DIR}/support)

# gguf_dequant: gguf-py writes a file with a tensor of every type qvl reads and its own
# dequantisation of each; qvl's reader and dequantisers must give the same bits. Skipped (77)
# when gguf-py or numpy is missing (scripts/install-deps.sh installs them into .pydeps/).
find_package(Python3 COMPONENTS Interpreter)
add_executable(test_gguf_dequant ${CMAKE_CURRENT_LIST_DIR}/test_gguf_dequant.c)
target_link_libraries(test_gguf_dequant PRIVATE qvl-runtime qvl-core m)
if(Python3_Interpreter_FOUND)
  add_test(NAME gguf_dequant COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/gguf_dequant_make.py ${CMAKE_CURRENT_BINARY_DIR}/gguf_dequant.gguf
    $<TARGET_FILE:test_gguf_dequant>)
  set_tests_properties(gguf_dequant PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

# gguf_convert: a model GGUF with Q4_0/Q5_0/Q4_1/Q5_1 matrices (written by gguf-py from the
# converter's F32 fixture): one warning line per converted tensor, and the exact conversions give
# the logits of gguf-py's dequantisation bit for bit. Skipped (77) without gguf-py and numpy.
if(Python3_Interpreter_FOUND)
  add_test(NAME gguf_convert COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/gguf_convert_check.py $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR}
    ${CMAKE_CURRENT_BINARY_DIR}/gguf_convert)
  set_tests_properties(gguf_convert PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
