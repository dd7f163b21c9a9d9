# The 4-bit weight formats q4_k and q6_k (core): layout, access, quantiser error and search.
qvl_add_test(test_quant SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant.c LIBS m)
# --weights q4_k_m on a random model with 256-wide rows, against its f32 logits.
qvl_add_test(test_quant_model SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant_model.c
  LIBS qvl-qwen3vl m)
add_dependencies(test_quant_model qvl-reference qvl-minimal)
if(TARGET qvl-cpu_avx2)
  add_dependencies(test_quant_model qvl-cpu_avx2)
endif()
