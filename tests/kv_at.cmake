# The ops that read the KV length from data (one decode graph for every step), on every
# host-memory backend built here, against their static-position twins.
if(TARGET qvl-cpu_avx2)
  set(_kv_at_avx2 "$<TARGET_FILE:qvl-cpu_avx2>")
else()
  set(_kv_at_avx2 "not-built")
endif()
qvl_add_test(test_kv_at_ops
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_at_ops.c
  LIBS qvl-test-support m
  DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>" QVL_CPU_AVX2_SO="${_kv_at_avx2}")
add_dependencies(test_kv_at_ops qvl-reference)
if(TARGET qvl-cpu_avx2)
  add_dependencies(test_kv_at_ops qvl-cpu_avx2)
endif()

# NORM_ROPE (the fused q/k norm + rotation) against RMS_NORM then ROPE, on the same backends.
qvl_add_test(test_norm_rope
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_norm_rope.c
  LIBS qvl-test-support m
  DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>" QVL_CPU_AVX2_SO="${_kv_at_avx2}")
add_dependencies(test_norm_rope qvl-reference)
if(TARGET qvl-cpu_avx2)
  add_dependencies(test_norm_rope qvl-cpu_avx2)
endif()
