# The backend conformance suite (tests/conformance/): qvl-backend-ops runs every op and fused
# op against the reference on one backend. Every backend built by qvl_add_backend gets it as
# the ctest conformance_<name>, registered in the backend's own folder (cmake/QvlBackend.cmake;
# a plugin built another way calls qvl_add_conformance(<name> <target>) there). The run is
# skipped (not passed) where the backend does not initialise, e.g. cuda_sm61 without a GPU.
# By hand:
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
  ${QVL_CONF_DIR}/conf_gen_slots.c
  ${QVL_CONF_DIR}/conf_errors.c)
target_include_directories(qvl-conformance PUBLIC ${QVL_CONF_DIR})
target_link_libraries(qvl-conformance PUBLIC qvl-test-support m)

add_executable(qvl-backend-ops ${QVL_CONF_DIR}/conf_main.c)
target_link_libraries(qvl-backend-ops PRIVATE qvl-conformance)
add_dependencies(qvl-backend-ops qvl-reference) # and every tested plugin: qvl_backends_finalize
