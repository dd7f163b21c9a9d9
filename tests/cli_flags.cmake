# The qvl CLI as a llama.cpp user meets it: picture token bounds decided before any work, the
# familiar flag spellings, quiet and precise messages, progress and timings on a terminal, the
# penalties' flags and -c 0, Ctrl-C.
foreach(t cli_image_bounds cli_aliases cli_messages cli_progress cli_sampling_flags cli_interrupt)
  add_test(NAME ${t} COMMAND ${CMAKE_CURRENT_LIST_DIR}/${t}.sh $<TARGET_FILE:qvl>
    ${CMAKE_SOURCE_DIR} ${QVL_SHARED_DATA_DIR})
  set_tests_properties(${t} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()

# The progress line's share and time left (tools/progress_eta.c).
qvl_add_test(test_progress_eta SOURCES test_progress_eta.c ${CMAKE_SOURCE_DIR}/tools/progress_eta.c
             LIBS m)
target_include_directories(test_progress_eta PRIVATE ${CMAKE_SOURCE_DIR}/tools)
