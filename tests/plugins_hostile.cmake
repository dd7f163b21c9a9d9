# plugins.yaml that would hang qvl (a FIFO as the library, deep flow nesting): refused at once.
qvl_add_test(test_plugins_hostile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_plugins_hostile.c)
set_tests_properties(test_plugins_hostile PROPERTIES TIMEOUT 60)
