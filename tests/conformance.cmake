# The backend conformance suite (tests/conformance/): qvl-backend-ops runs every op and fused
# op against the reference on one backend. A new backend gets it with one line:
#     qvl_add_conformance(<name> <cmake target of the backend plugin>)
# The run is skipped (not passed) where the backend does not initialise, e.g. cuda_sm61
# without a GPU. By hand:
#     build/tests/qvl-backend-ops build/backends/reference/libqvl-reference.so \
#         build/backends/cuda_sm61/libqvl-cuda_sm61.so [--op NAME] [--seed S] [--verbose]
set(QVL_CONF_DIR ${CMAKE_CURRENT_LIST_DIR}/conformance)

# The cases, the runner and the comparison, also used by the backend-specific tests
# (test_<backend>_backend.c) to check one op against the reference.
add_library(qvl-conformance STATIC
  ${QVL_CONF_DIR}/conf_case.c
  ${QVL_CONF_DIR}/conf_run.c
  ${QVL_CONF_DIR}/conf_tolerance.c
  ${QVL_CONF_DIR}/conf_gen_linear.c
  ${QVL_CONF_DIR}/conf_gen_pointwise.c
  ${QVL_CONF_DIR}/conf_gen_rope.c
  ${QVL_CONF_DIR}/conf_gen_attention.c
  ${QVL_CONF_DIR}/conf_gen_rows.c
  ${QVL_CONF_DIR}/conf_errors.c)
target_include_directories(qvl-conformance PUBLIC ${QVL_CONF_DIR})
target_link_libraries(qvl-conformance PUBLIC qvl-test-support m)

add_executable(qvl-backend-ops ${QVL_CONF_DIR}/conf_main.c)
target_link_libraries(qvl-backend-ops PRIVATE qvl-conformance)
add_dependencies(qvl-backend-ops qvl-reference)

function(qvl_add_conformance name target)
  add_test(NAME conformance_${name}
    COMMAND qvl-backend-ops --unavailable-exit 77
            $<TARGET_FILE:qvl-reference> $<TARGET_FILE:${target}>)
  set_tests_properties(conformance_${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
  add_dependencies(qvl-backend-ops ${target})
endfunction()

qvl_add_conformance(reference qvl-reference) # the oracle against itself: the suite's sanity
if(TARGET qvl-cpu_avx2)
  qvl_add_conformance(cpu_avx2 qvl-cpu_avx2)
endif()
if(TARGET qvl-cuda_sm61)
  qvl_add_conformance(cuda_sm61 qvl-cuda_sm61)
endif()
