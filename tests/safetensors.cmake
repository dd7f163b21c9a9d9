# Safetensors reader/writer, the expected-tensor list, the weight store and mkmodel.
qvl_add_test(test_safetensors SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_safetensors.c LIBS qvl-runtime qvl-test-support)
qvl_add_test(test_weights SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_weights.c LIBS qvl-qwen3vl qvl-test-support)
