# Bad input at the qvl CLI's edges (tests/cli_hostile.sh): tokenize -f input kinds and sizes,
# --decode past the vocabulary, <|image_pad|> typed without a picture, F16/BF16 labels that
# contradict config.json's dtype.
add_test(NAME cli_hostile COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_hostile.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_hostile PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
