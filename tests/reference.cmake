# The reference backend checked against ops.h itself (loads
# build*/backends/reference/libqvl-reference.so): it is the oracle of qvl-backend-ops, so its
# own correctness is tested here, not by comparing it with another backend.
qvl_add_test(test_reference_backend
  SOURCES test_reference_backend.c
  LIBS qvl-test-support m
  DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>")
add_dependencies(test_reference_backend qvl-reference)
