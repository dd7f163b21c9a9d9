# The byte-level BPE tokenizer: reference cases from ../shared/data, special tokens, decoding,
# hostile input, and broken tokenizer.json files.
qvl_add_test(test_tokenizer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer.c LIBS qvl-runtime)
# The tokenizer from GGUF-style lists equals the tokenizer.json it was made from.
pkg_check_modules(CJSON_TOKLISTS_TEST REQUIRED IMPORTED_TARGET libcjson)
qvl_add_test(test_tokenizer_lists SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer_lists.c
  LIBS qvl-runtime PkgConfig::CJSON_TOKLISTS_TEST)
