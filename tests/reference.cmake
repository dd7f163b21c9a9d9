# The reference backend checked against ops.h itself (loads
# build*/backends/reference/libqvl-reference.so): it is the oracle of qvl-backend-ops, so its
# own correctness is tested here, not by comparing it with another backend. Two programs on one
# harness (test_reference_util.c): the linear and attention ops, and the element-wise and data
# ops with the backend's table and refusals.
foreach(t linear pointwise)
  qvl_add_test(test_reference_${t}
    SOURCES test_reference_${t}.c test_reference_util.c
    LIBS qvl-test-support m
    DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>")
  add_dependencies(test_reference_${t} qvl-reference)
endforeach()
