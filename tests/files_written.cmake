# Files qvl writes or copies (docs/hostile-input.md, "Files qvl writes"): the one rule for an
# output's destination (FIFOs and devices written in place, links followed, nothing renamed
# over a special file), the link rule for files copied out of a model directory, directories
# replaced whole; then the commands end to end (tests/cli_files.sh).
qvl_add_test(test_file_write
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_file_write.c LIBS qvl-runtime qvl-test-support)
add_test(NAME cli_files COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_files.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_files PROPERTIES TIMEOUT 300)
