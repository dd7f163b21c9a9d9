# Ops checked against their unfused or static-position twins on every host-memory backend
# built here: the ops that read the KV length from data (one decode graph for every step),
# and NORM_ROPE (the fused q/k norm + rotation) against RMS_NORM then ROPE.
if(TARGET qvl-cpu_avx2)
  set(_kv_at_avx2 "$<TARGET_FILE:qvl-cpu_avx2>")
else()
  set(_kv_at_avx2 "not-built")
endif()
foreach(_t test_kv_at_ops test_norm_rope)
  qvl_add_test(${_t}
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/${_t}.c
    LIBS qvl-test-support m
    DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>" QVL_CPU_AVX2_SO="${_kv_at_avx2}")
  add_dependencies(${_t} qvl-reference)
  if(TARGET qvl-cpu_avx2)
    add_dependencies(${_t} qvl-cpu_avx2)
  endif()
endforeach()
