qvl_add_test(test_status SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_status.c)
qvl_add_test(test_node_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_node_check.c
  LIBS qvl-test-support)
