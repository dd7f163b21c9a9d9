# Graphs split across backends: the parity tests again with one decoder layer (and the output
# head) on the backend under test and the rest on the reference (test_graph_split checks the
# scheduler itself), and the command line's -ngl / --cpu-backend / --vision-backend.
add_test(NAME test_parity_split COMMAND test_parity)
set_tests_properties(test_parity_split PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PARITY_GPU_LAYERS=1;QVL_PARITY_CPU_BACKEND=reference")
add_test(NAME test_vision_parity_split COMMAND test_vision_parity)
set_tests_properties(test_vision_parity_split PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PARITY_GPU_LAYERS=1;QVL_PARITY_CPU_BACKEND=reference;QVL_PARITY_VISION_BACKEND=reference")
add_test(NAME cli_split COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_split.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_split PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
