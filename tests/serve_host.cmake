# qvl serve's Host check (DNS rebinding) as a unit: tools/serve/serve_host.c alone.
qvl_add_test(test_serve_host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serve_host.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_host.c)
target_include_directories(test_serve_host PRIVATE ${CMAKE_SOURCE_DIR}/tools/serve)
