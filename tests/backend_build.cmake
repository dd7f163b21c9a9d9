# qvl_add_backend (cmake/QvlBackend.cmake) as docs/writing-a-backend.md describes it: the minimal
# backend built by one call in its own folder, each backend folder's conformance test
# registered there, and the generated plugins.yaml (tests/backend_build/check.sh).
add_test(NAME backend_build COMMAND ${CMAKE_CURRENT_LIST_DIR}/backend_build/check.sh
  ${CMAKE_CTEST_COMMAND} ${CMAKE_COMMAND} ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} $<TARGET_FILE:qvl>
  $<TARGET_FILE:qvl-minimal> $<TARGET_PROPERTY:qvl-minimal,QVL_BACKEND_NAME>)
set_tests_properties(backend_build PROPERTIES TIMEOUT 120)
