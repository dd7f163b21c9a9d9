# The KV cache type (--kv-type, plugins.yaml kv_type): the parity tests again with an f32
# cache at the transformers tolerances of f32 (test_parity and test_vision_parity themselves
# run the default, f16) and the text one with q8_0, and the CLI's choices and errors.
add_test(NAME test_parity_kv_f32 COMMAND test_parity)
set_tests_properties(test_parity_kv_f32 PROPERTIES TIMEOUT 900 ENVIRONMENT "QVL_PARITY_KV_TYPE=f32")
add_test(NAME test_vision_parity_kv_f32 COMMAND test_vision_parity)
set_tests_properties(test_vision_parity_kv_f32 PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PARITY_KV_TYPE=f32")
# q8_0: the text parity test at its own measured tolerance (test_parity.c says why), where
# tiny-untied (head_dim 16, half a q8_0 block) must be refused at open.
add_test(NAME test_parity_kv_q8_0 COMMAND test_parity)
set_tests_properties(test_parity_kv_q8_0 PROPERTIES TIMEOUT 900 ENVIRONMENT "QVL_PARITY_KV_TYPE=q8_0")
set(QVL_KV_CLI_BACKENDS reference)
if(TARGET qvl-cpu_avx2)
  list(APPEND QVL_KV_CLI_BACKENDS cpu_avx2) # skipped by the script where it does not initialise
endif()
add_test(NAME cli_kv_type COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_kv_type.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR} ${QVL_KV_CLI_BACKENDS})
set_tests_properties(cli_kv_type PROPERTIES TIMEOUT 300)
