# The shared data directory chosen at test time and the skip reasons (tests/CMakeLists.txt).
add_test(NAME shared_data_dir COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/shared_data_test.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(shared_data_dir PROPERTIES TIMEOUT 120)
