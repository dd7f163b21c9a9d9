# The README's quick start on the tiny fixture with its own small tokenizer (item 7 of the CLI
# issue; scripts/make_fixture_tokenizer.py).
add_test(NAME cli_quickstart COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_quickstart.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_quickstart PROPERTIES TIMEOUT 120)
