# qvl serve under hostile picture and cache use (tests/serve_hostile_queue_test.py): prefix-cache
# partitions by API key and cache_salt, the picture memory budget (--max-image-memory), decodes
# outside any global lock, stopped by deadlines, clients leaving and SIGTERM.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_hostile_queue COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_hostile_queue_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR})
  set_tests_properties(serve_hostile_queue PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endif()
