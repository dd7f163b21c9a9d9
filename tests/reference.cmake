# The reference backend, op by op (loads build*/backends/reference/libqvl-reference.so).
qvl_add_test(test_reference_ops
  SOURCES test_reference_ops.c
  LIBS qvl-test-support m
  DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>")
add_dependencies(test_reference_ops qvl-reference)
