# Saved quantised weights (qvl quantize, docs/QUANT.md): the safetensors encoding of q8_0/q4_k/
# q6_k tensors and its hostile variants, then the command end to end on the fixtures.
qvl_add_test(test_safetensors_quant
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_safetensors_quant.c LIBS qvl-runtime qvl-test-support)
set(QVL_QUANT_CLI_BACKENDS reference)
if(TARGET qvl-cpu_avx2)
  list(APPEND QVL_QUANT_CLI_BACKENDS cpu_avx2) # skipped by the script where it does not initialise
endif()
add_test(NAME cli_quantize COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_quantize.sh $<TARGET_FILE:qvl>
  $<TARGET_FILE:qvl-bench> ${CMAKE_SOURCE_DIR} ${QVL_QUANT_CLI_BACKENDS})
set_tests_properties(cli_quantize PROPERTIES TIMEOUT 600)

# qvl quantize --out FILE.gguf: llama.cpp's two GGUF files, checked against the converter's
# fixtures with gguf-py (those checks skip without it), run by qvl with the logits of the
# directory output, and its hostile outputs.
add_test(NAME cli_quantize_gguf COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_quantize_gguf.sh
  $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_quantize_gguf PROPERTIES TIMEOUT 600)
