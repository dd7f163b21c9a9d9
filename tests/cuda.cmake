# The cuda_sm61 backend: what it promises beyond agreeing with the reference op by op (the
# conformance_cuda_sm61 that backends/cuda_sm61/CMakeLists.txt registers). Needs a CUDA device;
# without one, e.g. in CI, the test prints one line saying why and is reported as skipped.
if(TARGET qvl-cuda_sm61)
  qvl_add_test(test_cuda_backend
    SOURCES test_cuda_backend.c cuda_mirror.c
    LIBS qvl-test-support m
    DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>"
         QVL_CUDA_SO="$<TARGET_FILE:qvl-cuda_sm61>")
  add_dependencies(test_cuda_backend qvl-reference qvl-cuda_sm61)
  set_tests_properties(test_cuda_backend PROPERTIES SKIP_RETURN_CODE 77)
endif()

# The device-memory budget (option memory_limit_mib): reported by describe(), enforced on
# buffers and scratch, bad values refused. Skipped without a CUDA device, like the above.
if(TARGET qvl-cuda_sm61)
  qvl_add_test(test_cuda_memory_limit
    SOURCES test_cuda_memory_limit.c
    LIBS m ${CMAKE_DL_LIBS}
    DEFS QVL_CUDA_SO="$<TARGET_FILE:qvl-cuda_sm61>")
  add_dependencies(test_cuda_memory_limit qvl-cuda_sm61)
  set_tests_properties(test_cuda_memory_limit PROPERTIES SKIP_RETURN_CODE 77)
endif()

# Its answer to the scratch extension (placement counts it before loading) equals the scratch
# each kernel then grows. Skipped without a CUDA device, like the above.
if(TARGET qvl-cuda_sm61)
  qvl_add_test(test_cuda_scratch_plan
    SOURCES test_cuda_scratch_plan.c
    LIBS m ${CMAKE_DL_LIBS}
    DEFS QVL_CUDA_SO="$<TARGET_FILE:qvl-cuda_sm61>")
  add_dependencies(test_cuda_scratch_plan qvl-cuda_sm61)
  set_tests_properties(test_cuda_scratch_plan PROPERTIES SKIP_RETURN_CODE 77)
endif()

# Its host-side copy of large transfers (threads over parts): plain C, so it runs everywhere.
qvl_add_test(test_cuda_host_copy
  SOURCES test_cuda_host_copy.c ${CMAKE_SOURCE_DIR}/backends/cuda_sm61/cu_host_copy.c
  LIBS Threads::Threads)
target_include_directories(test_cuda_host_copy PRIVATE ${CMAKE_SOURCE_DIR}/backends/cuda_sm61)
