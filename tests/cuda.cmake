# The cuda_sm61 backend, op by op against the reference (needs a CUDA device; without one,
# e.g. in CI, the test prints one line saying why and passes as skipped).
if(TARGET qvl-cuda_sm61)
  qvl_add_test(test_cuda_ops
    SOURCES test_cuda_ops.c
    LIBS qvl-test-support m
    DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>"
         QVL_CUDA_SO="$<TARGET_FILE:qvl-cuda_sm61>")
  add_dependencies(test_cuda_ops qvl-reference qvl-cuda_sm61)
endif()
