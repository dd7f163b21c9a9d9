qvl_add_test(test_status SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_status.c)
